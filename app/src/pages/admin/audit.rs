//! The audit log: every admin action (who, when, what, how many), newest first, in a capped
//! Redis list next to the queue (`{<queue>}:audit`).
//!
//! Kept apart from the queue's own event stream on purpose: that stream is capped by volume
//! of task events and would push an admin action out within seconds on a busy queue; this
//! list holds only admin actions, so the last [`CAP`] of them stay.

use super::model::AuditEntry;

/// Entries kept.
pub const CAP: isize = 1000;

fn key(queue: &queue::Queue) -> String {
    format!("{{{}}}:audit", queue.config().name)
}

/// Appends an entry. A failure is logged, not returned: the action itself already happened
/// and its result must still reach the admin.
pub async fn record(queue: &queue::Queue, who: &str, action: &str, target: &str, count: u64) {
    let at_ms = queue.now_ms().await.unwrap_or_default();
    let entry = AuditEntry {
        at_ms,
        who: who.into(),
        action: action.into(),
        target: target.into(),
        count,
    };
    let body = serde_json::to_string(&entry).unwrap_or_default();
    let mut c = queue.connection();
    let written = queue::redis::pipe()
        .cmd("LPUSH")
        .arg(key(queue))
        .arg(body)
        .ignore()
        .cmd("LTRIM")
        .arg(key(queue))
        .arg(0)
        .arg(CAP - 1)
        .ignore()
        .query_async::<()>(&mut c)
        .await;
    if let Err(e) = written {
        tracing::error!(error = %e, who, action, target, count, "audit log write failed");
    }
    tracing::info!(who, action, target, count, "admin action");
}

/// The newest `n` entries (unparsable ones skipped).
pub async fn latest(queue: &queue::Queue, n: isize) -> queue::redis::RedisResult<Vec<AuditEntry>> {
    let mut c = queue.connection();
    let rows: Vec<String> = queue::redis::cmd("LRANGE")
        .arg(key(queue))
        .arg(0)
        .arg(n.max(1) - 1)
        .query_async(&mut c)
        .await?;
    Ok(rows
        .iter()
        .filter_map(|r| serde_json::from_str(r).ok())
        .collect())
}
