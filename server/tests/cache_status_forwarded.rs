//! Issue 39 row 4, over real HTTP in a `repoll serve --sim` with embedded workers: an ask
//! that refuses a fresh stored result (`no-cache`, `max-age=0`) sends a refresh upstream; when
//! that refresh comes back within the first-answer wait, the answer is the new result — and
//! its `Cache-Status` says it was forwarded (RFC 9211 `fwd=request`: a fresh response was
//! there, the request's directives did not let it be used), never `hit`, and `collapsed` only
//! beside `fwd` (the ask that joined a refresh already going).

use crate::common;
use common::process::*;

use serde_json::{json, Value};
use testkit::free_port;
use testkit::http::{Answer, BlockingHttp};

/// Each upstream call of the query takes this long: two asks sent together both find the
/// refresh running, and the first-answer wait (far longer) sees it end.
const KEY: &str = "forwarded answer latency=400 polls=1";

fn ask(http: &BlockingHttp, header: Option<&str>, extra: Value) -> Answer {
    let mut body = json!({ "query": KEY });
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    let mut req = http.client.post(http.url("/api/v1/queries")).json(&body);
    if let Some(h) = header {
        req = req.header("cache-control", h);
    }
    http.send(req)
}

fn cache_status(a: &Answer) -> &str {
    a.header("cache-status").unwrap_or("")
}

/// The answer is a new result (completed after `since`), fresh, and says it was forwarded
/// for the request's directives.
#[track_caller]
fn assert_forwarded(a: &Answer, since: i64) -> i64 {
    assert_eq!(a.status, 200, "{a:?}");
    let v = a.json();
    assert_eq!(v["status"], "done", "{a:?}");
    assert_eq!(v["freshness"], "fresh", "{a:?}");
    let completed = v["completed_at"].as_i64().unwrap();
    assert!(completed > since, "a new result: {a:?}");
    let cs = cache_status(a);
    assert!(
        cs.starts_with("repoll; fwd=request;") && !cs.contains("hit"),
        "went upstream, so forwarded: {cs}"
    );
    completed
}

#[test]
fn a_refresh_answered_within_the_first_answer_wait_says_forwarded_not_hit() {
    let (web_port, redis_port, sim_port) = (free_port(), free_port(), free_port());
    let _redis = spawn_redis(redis_port, &[]);
    let url = format!("redis://127.0.0.1:{redis_port}");
    let mut cmd = serve_command(&url, web_port);
    cmd.env("REPOLL_QUEUE", "fwdq")
        .env("REPOLL_WORKERS", "2")
        .with_sim(sim_port)
        .env("REPOLL_POLL_INTERVAL_MS", "50")
        .env("REPOLL_FIRST_ANSWER_MS", "10000")
        .env("REPOLL_RATE_PER_MIN", "0")
        .env("REPOLL_REFRESH_PER_MIN", "0")
        .env("REPOLL_HOT_ASKS", "0")
        .env("REPOLL_FRESH_FOR_MS", "600000")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut children = Reaped::default();
    children.serve(cmd, web_port);
    let http = BlockingHttp::local(web_port);

    // The first ask: a new task, answered within the wait (the control: a miss, stored).
    let first = ask(&http, None, json!({}));
    assert_eq!(first.status, 200, "{first:?}");
    assert_eq!(cache_status(&first), "repoll; fwd=miss; stored");
    let stored = first.json()["completed_at"].as_i64().unwrap();
    // A plain ask now: the fresh stored result, a hit.
    let hit = ask(&http, None, json!({}));
    assert!(
        cache_status(&hit).starts_with("repoll; hit; ttl="),
        "{hit:?}"
    );

    // no-cache: the refresh goes upstream and its result is the answer.
    let refreshed = ask(&http, Some("no-cache"), json!({}));
    let stored = assert_forwarded(&refreshed, stored);
    assert_eq!(refreshed.header("age"), Some("0"), "{refreshed:?}");
    // max-age=0 in the body: the same.
    let refreshed = ask(&http, None, json!({ "cache_control": "max-age=0" }));
    let stored = assert_forwarded(&refreshed, stored);

    // Two at once: one starts the refresh, the other joins it (collapsed); both forwarded.
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| ask(&BlockingHttp::local(web_port), Some("no-cache"), json!({})));
        let b = s.spawn(|| ask(&BlockingHttp::local(web_port), Some("no-cache"), json!({})));
        (a.join().unwrap(), b.join().unwrap())
    });
    assert_forwarded(&a, stored);
    assert_forwarded(&b, stored);
    let collapsed = [&a, &b]
        .iter()
        .filter(|r| cache_status(r).contains("; collapsed"))
        .count();
    assert_eq!(
        collapsed,
        1,
        "one started the refresh, one joined it: {} | {}",
        cache_status(&a),
        cache_status(&b)
    );
}
