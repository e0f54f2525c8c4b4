//! Issue 26's settings in a real `repoll serve --sim` on three partitions: the top level's
//! REPOLL_FRESH_FOR_MS (winning over REPOLL_RESULT_TTL_MS), REPOLL_STALE_FOR_MS,
//! REPOLL_STALE_IF_ERROR_FOR_MS and REPOLL_FAILED_FOR_MS, and an `[upstreams.search]`
//! section's own windows, each reach its upstream: the answers' `fresh_until`, a stored
//! result's expiry in Redis (its three windows), a cached failure's `fresh_until`; and a
//! result past its (short) fresh window is answered stale while it is refreshed.

use crate::common;
use common::process::*;

use std::time::Duration;

use serde_json::{json, Value};
use testkit::free_port;
use testkit::http::BlockingHttp;

/// Asks the query `id` until `done` says yes of it (hang guard 30 s).
fn until(http: &BlockingHttp, id: &str, done: impl Fn(&Value) -> bool) -> Value {
    http.query_until(id, Duration::from_secs(30), done)
}

/// When (ms, Redis time) the stored result of `id` expires: its key found by pattern (the
/// partition's hash tag is the queue's business).
fn result_expiry(redis: &mut redis::Connection, id: &str) -> i64 {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("*:r:{id}"))
        .query(redis)
        .unwrap();
    assert_eq!(keys.len(), 1, "{keys:?}");
    redis::cmd("PEXPIRETIME")
        .arg(&keys[0])
        .query(redis)
        .unwrap()
}

#[test]
fn the_windows_set_at_the_top_and_per_upstream_reach_their_answers() {
    let (web_port, redis_port, sim_port) = (free_port(), free_port(), free_port());
    let _redis = spawn_redis(redis_port, &[]);
    let url = format!("redis://127.0.0.1:{redis_port}");
    let dir = std::env::temp_dir().join(format!("repoll-freshness-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("freshness.toml");
    std::fs::write(
        &config,
        format!(
            "[upstreams.search]\n\
             url = \"http://127.0.0.1:{sim_port}/api/query?q={{key}}\"\n\
             fresh_for_ms = 700\n\
             stale_for_ms = 50000\n\
             stale_if_error_for_ms = 70000\n\
             failed_for_ms = 20000\n"
        ),
    )
    .unwrap();
    let mut cmd = serve_command(&url, web_port);
    cmd.arg("--config")
        .arg(&config)
        .env("REPOLL_QUEUE", "fq")
        .env("REPOLL_PARTITIONS", "3")
        .env("REPOLL_WORKERS", "2")
        .with_sim(sim_port)
        .env("REPOLL_POLL_INTERVAL_MS", "50")
        .env("REPOLL_FIRST_ANSWER_MS", "0")
        .env("REPOLL_RATE_PER_MIN", "0")
        .env("REPOLL_RESULT_TTL_MS", "999999")
        .env("REPOLL_FRESH_FOR_MS", "600")
        .env("REPOLL_STALE_FOR_MS", "60000")
        .env("REPOLL_STALE_IF_ERROR_FOR_MS", "120000")
        .env("REPOLL_FAILED_FOR_MS", "30000")
        .env("REPOLL_HOT_ASKS", "0")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut children = Reaped::default();
    children.serve(cmd, web_port);
    let http = BlockingHttp::local(web_port);
    let mut redis = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();

    // (upstream, fresh, stale + stale-if-error, failed) as set.
    for (upstream, fresh, after, failed) in [
        ("default", 600, 180_000, 30_000),
        ("search", 700, 120_000, 20_000),
    ] {
        let ask = |query: &str| {
            http.post_json(
                "/api/v1/queries",
                &json!({ "query": query, "upstream": upstream }),
            )
        };
        let id = id_in(&ask("wired polls=1"));
        let done = until(&http, &id, |v| v["status"] == "done");
        let completed = done["completed_at"].as_i64().unwrap();
        assert_eq!(
            done["fresh_until"].as_i64(),
            Some(completed + fresh),
            "{done}"
        );
        let expires = result_expiry(&mut redis, &id);
        let life = fresh + after;
        // Redis counts a script's PX from its own clock reading, which can fall a millisecond
        // either side of the completion time the script read with TIME: a second of slack,
        // far below the minute that tells the two upstreams' lives apart.
        assert!(
            (completed + life - 1_000..=completed + life + 1_000).contains(&expires),
            "{upstream}: expires at {expires}, completed at {completed}, life {life}"
        );

        // Past its fresh window: answered stale at once while it is refreshed, then fresh.
        let stale = until(&http, &id, |v| v["freshness"] == "stale");
        assert_eq!(stale["result"], done["result"]);
        let asked = ask("wired polls=1");
        assert_eq!(asked.status, 200, "{upstream}: {asked:?}");
        assert_eq!(asked.json()["freshness"], "stale", "{upstream}: {asked:?}");
        let again = until(&http, &id, |v| v["completed_at"] != done["completed_at"]);
        assert_eq!(again["status"], "done", "{again}");

        // A query the upstream refuses: its failure is kept for the failed window.
        let id = id_in(&ask("wired status=failed"));
        let dead = until(&http, &id, |v| v["status"] == "failed");
        assert_eq!(dead["freshness"], "fresh", "{dead}");
        let updated = dead["updated_at"].as_i64().unwrap();
        assert_eq!(
            dead["fresh_until"].as_i64(),
            Some(updated + failed),
            "{dead}"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}
