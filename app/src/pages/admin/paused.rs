//! Whether the queue is paused, and since when and by whom: the queue's pause flag
//! (`{<queue>}:paused`, "at|who", written by its pause script) read as it is, so every page
//! can say so in its banner with one `GET`.

use super::model::PauseInfo;

/// The pause, or None while the queue runs.
pub async fn read(queue: &queue::Queue) -> queue::redis::RedisResult<Option<PauseInfo>> {
    let key = format!("{{{}}}:paused", queue.config().name);
    let mut c = queue.connection();
    let flag: Option<String> = queue::redis::cmd("GET")
        .arg(key)
        .query_async(&mut c)
        .await?;
    Ok(flag.map(|f| parse(&f)))
}

/// "at|who"; a flag in another shape still means paused.
fn parse(flag: &str) -> PauseInfo {
    let (at, who) = flag.split_once('|').unwrap_or(("0", ""));
    PauseInfo {
        at_ms: at.parse().unwrap_or(0),
        who: who.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_the_flag() {
        let p = super::parse("1796107267215|admin");
        assert_eq!((p.at_ms, p.who.as_str()), (1_796_107_267_215, "admin"));
        let p = super::parse("1");
        assert_eq!((p.at_ms, p.who.as_str()), (0, ""));
    }
}
