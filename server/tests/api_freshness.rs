//! Issue 26 over HTTP, with real workers on the simulator: a fresh hit costs no upstream call;
//! a stale result is answered at once while ONE refresh runs for every asker, then replaced
//! atomically; a failed refresh leaves the old result served (stale-if-error) and no new try
//! within the failed window; a refresh held by the breaker or a pause says so; a query the
//! upstream refuses is answered from its dead record for the failed window (negative
//! caching); a hot query is refreshed ahead and never answered stale; and all of it on three
//! partitions and a named upstream. (Directives and headers: api_freshness_directives.rs.)
//! The windows are a minute; results are made older in Redis (`common/fresh.rs`).

use crate::common;
use common::fresh;

use std::time::{Duration, Instant};

use fresh::*;
use queue::{FreshnessWindows, TaskState};
use serde_json::{json, Value};

/// The stored result the tests start from, set by hand: the upstream's answers differ from
/// it (the simulator's data names its key), so the old and the new result cannot be mixed up.
const OLD: &str = r#"{"v":"old"}"#;

fn old() -> Value {
    json!({"v": "old"})
}

/// A stored result's age past the fresh window: one second.
const STALE_BY: i64 = LONG as i64 + 1_000;

/// The answer is the stored `result`, marked `freshness` (and why it is stale: `reason`).
#[track_caller]
fn assert_served(r: &common::Reply, freshness: &str, reason: Value, result: &Value) {
    assert_eq!(r.json["status"], "done", "{}", r.body);
    assert_eq!(r.json["freshness"], freshness, "{}", r.body);
    assert_eq!(r.json["stale_reason"], reason, "{}", r.body);
    assert_eq!(&r.json["result"], result, "{}", r.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_hit_makes_no_upstream_call() {
    let mut env = Env::start(Opts::default()).await;
    env.start_workers();
    let key = "fresh hit polls=1";
    let first = env.submit(key).await;
    assert_eq!(first.status, 202, "{}", first.body);
    let done = until(
        "done",
        async || env.read(key).await,
        |r| r.json["status"] == "done",
    )
    .await;
    assert_eq!(env.sim_calls(key).await, (1, 1));
    for _ in 0..5 {
        let r = env.submit(key).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_served(&r, "fresh", Value::Null, &done.json["result"]);
        assert!(r.cache_status().starts_with("repoll; hit; ttl="), "{r:?}");
    }
    // No task: nothing a worker could call the upstream for.
    let id = id_of(&env.queue, key);
    assert!(env.queue.get(&id).await.unwrap().unwrap().task.is_none());
    assert_eq!(env.counter(&env.queue, "fresh").await, 5);
    assert_eq!(
        env.sim_calls(key).await,
        (1, 1),
        "the chain's one call only"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_stale_askers_are_answered_at_once_and_share_one_refresh() {
    let mut env = Env::start(Opts::default()).await;
    let q = env.queue.clone();
    let key = "stale fifty polls=2";
    env.seed(&q, key, OLD).await;
    env.backdate_result(&q, key, STALE_BY).await;
    // No worker yet: every asker finds the refresh waiting, none finds it done.
    let asks = (0..50).map(|_| {
        let router = env.router.clone();
        tokio::spawn(
            async move { common::oneshot(&router, ask_request(key, None, json!({}))).await },
        )
    });
    let mut collapsed = 0;
    let mut stored_at = Value::Null;
    for a in futures::future::join_all(asks).await {
        let a = a.unwrap();
        assert_eq!(a.status, 200, "{}", a.body);
        assert_served(&a, "stale", json!("refreshing"), &old());
        assert_eq!(a.json["refreshing"], true, "{}", a.body);
        stored_at = a.json["completed_at"].clone();
        let cs = a.cache_status();
        assert!(
            cs.starts_with("repoll; fwd=stale; fwd-status=202; ttl=-")
                && cs.ends_with("; detail=refreshing"),
            "{cs}"
        );
        collapsed += usize::from(cs.contains("; collapsed;"));
    }
    assert_eq!(collapsed, 49, "one ask started the refresh, 49 joined it");
    let t = q.get(&id_of(&q, key)).await.unwrap().unwrap().task;
    assert_eq!(
        t.map(|t| t.state),
        Some(TaskState::Due),
        "the one refresh waits"
    );
    assert_eq!(env.counter(&q, "stale").await, 50);

    // The refresh runs; every read meanwhile has a result (the old one, then the new one).
    env.start_workers();
    let new = until(
        "the refreshed result",
        async || {
            let r = env.read(key).await;
            assert_eq!(
                r.json["status"], "done",
                "a reader always has a result: {}",
                r.body
            );
            r
        },
        |r| r.json["completed_at"] != stored_at,
    )
    .await;
    assert_eq!(
        new.json["result"]["query"], key,
        "the upstream's data: {}",
        new.body
    );
    assert_eq!(new.json["freshness"], "fresh", "{}", new.body);
    let later = env.submit(key).await;
    assert_served(&later, "fresh", Value::Null, &new.json["result"]);
    assert!(
        later.cache_status().starts_with("repoll; hit;"),
        "{later:?}"
    );
    assert_eq!(env.sim_calls(key).await, (2, 1), "one chain of two polls");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_refresh_serves_the_old_result_and_waits_the_failed_window() {
    let mut env = Env::start(Opts::default()).await;
    let q = env.queue.clone();
    let key = "stale if error status=failed";
    env.seed(&q, key, OLD).await;
    env.backdate_result(&q, key, STALE_BY).await;
    env.start_workers();
    let first = env.submit(key).await;
    assert_served(&first, "stale", json!("refreshing"), &old());
    let failed = until(
        "the refresh fails",
        async || env.read(key).await,
        |r| r.json["stale_reason"] == "upstream_failed",
    )
    .await;
    assert_served(&failed, "stale", json!("upstream_failed"), &old());
    assert_eq!(failed.json["refreshing"], false);
    assert_eq!(env.sim_calls(key).await, (1, 0));
    assert_eq!(env.counter(&q, "refresh_failed").await, 1);

    // Within the failed window: the old result says why, and no new refresh starts.
    let mut asks = vec![];
    for _ in 0..3 {
        asks.push(env.submit(key).await);
    }
    // Past the stale window, within stale-if-error: still served, the refresh having failed.
    env.backdate_result(&q, key, LONG as i64).await;
    asks.push(env.submit(key).await);
    for r in &asks {
        assert_eq!(r.status, 200, "{}", r.body);
        assert_served(r, "stale", json!("upstream_failed"), &old());
        let cs = r.cache_status();
        // Nothing forwarded (no new refresh within the failed window): a hit, stale.
        assert!(
            cs.starts_with("repoll; hit; ttl=-") && cs.ends_with("; detail=upstream_failed"),
            "{cs}"
        );
    }
    let t = q.get(&id_of(&q, key)).await.unwrap().unwrap().task.unwrap();
    assert_eq!(
        t.state,
        TaskState::Dead,
        "no new refresh within the failed window"
    );
    assert_eq!(env.sim_calls(key).await, (1, 0));

    // After the failed window: the next ask starts one new refresh. Past the stale window a
    // running refresh is no error, so its progress is the answer, not the old result.
    env.backdate_death(&q, key, STALE_BY).await;
    let retry = env.submit(key).await;
    assert_eq!(retry.status, 202, "{}", retry.body);
    assert_eq!(retry.json["status"], "processing", "{}", retry.body);
    assert_eq!(retry.json["result"], Value::Null);
    assert_eq!(retry.cache_status(), "repoll; fwd=stale");
    let failed = until(
        "the new refresh fails",
        async || env.read(key).await,
        |r| r.json["stale_reason"] == "upstream_failed",
    )
    .await;
    assert_served(&failed, "stale", json!("upstream_failed"), &old());
    assert_eq!(env.sim_calls(key).await, (2, 0));

    // After the stale-if-error window the old result is never the answer: the failure is.
    env.backdate_result(&q, key, LONG as i64).await;
    for r in [env.submit(key).await, env.read(key).await] {
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.json["status"], "failed", "{}", r.body);
        assert_eq!(r.json["result"], Value::Null, "{}", r.body);
        assert!(r.json["error"].is_string(), "{}", r.body);
    }
    // ... and once the stored result is gone (its life is the three windows), the dead
    // refresh is answered as a failure cached for the failed window.
    let id = id_of(&q, key);
    let rkey = format!("{}:r:{id}", q.partition_tag(q.partition_of(&id)));
    let _: () = redis::cmd("DEL")
        .arg(&rkey)
        .query_async(&mut q.connection())
        .await
        .unwrap();
    let r = env.submit(key).await;
    assert_eq!(
        (r.json["status"].as_str(), r.json["freshness"].as_str()),
        (Some("failed"), Some("fresh"))
    );
    assert!(r.cache_status().ends_with("; detail=negative"), "{r:?}");
    assert_eq!(env.sim_calls(key).await, (2, 0));
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_held_by_the_breaker_or_a_pause_says_so() {
    // No worker: nothing would run anyway while the breaker is open or the queue paused.
    let env = Env::start(Opts::default()).await;
    let q = env.queue.clone();
    let key = "held refresh";
    env.seed(&q, key, OLD).await;
    env.backdate_result(&q, key, STALE_BY).await;
    q.open_breaker("admin", 600_000).await.unwrap();
    let opened = env.submit(key).await;
    let read = env.read(key).await;
    // Past the stale window, within stale-if-error: still shown, the breaker is an error.
    env.backdate_result(&q, key, LONG as i64).await;
    let late = env.submit(key).await;
    for r in [&opened, &read, &late] {
        assert_served(r, "stale", json!("breaker_open"), &old());
        assert_eq!(r.json["refreshing"], true, "{}", r.body);
        let cs = r.cache_status();
        assert!(
            cs.starts_with("repoll; fwd=stale; fwd-status=503; ttl=-"),
            "{cs}"
        );
        assert!(cs.ends_with("; detail=breaker_open"), "{cs}");
    }
    assert!(
        !opened.cache_status().contains("collapsed"),
        "it started the refresh"
    );
    assert!(
        late.cache_status().contains("; collapsed;"),
        "it joined the refresh"
    );

    assert!(q.close_breaker("admin").await.unwrap());
    q.pause("admin").await.unwrap();
    for r in [env.submit(key).await, env.read(key).await] {
        assert_served(&r, "stale", json!("paused"), &old());
        assert!(r.cache_status().ends_with("; detail=paused"), "{r:?}");
    }
    // Nothing holds the refresh any more: past the stale window it is no error, so the
    // refresh's progress is answered instead of the old result.
    q.resume("admin").await.unwrap();
    let r = env.submit(key).await;
    assert_eq!(
        (r.status, r.json["status"].as_str()),
        (202, Some("processing")),
        "{}",
        r.body
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_the_upstream_refuses_is_answered_failed_for_the_failed_window() {
    let mut env = Env::start(Opts::default()).await;
    env.start_workers();
    let q = env.queue.clone();
    let key = "refused status=failed";
    let created = env.submit(key).await;
    assert_eq!(created.status, 202, "{}", created.body);
    assert_eq!(created.cache_status(), "repoll; fwd=miss; stored");
    let dead = until(
        "the task fails",
        async || env.read(key).await,
        |r| r.json["status"] == "failed",
    )
    .await;
    assert_eq!(dead.json["freshness"], "fresh", "{}", dead.body);
    for _ in 0..3 {
        let r = env.submit(key).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.json["status"], "failed", "{}", r.body);
        assert_eq!(r.json["freshness"], "fresh", "{}", r.body);
        assert_eq!(r.json["result"], Value::Null);
        assert_eq!(r.json["error"], dead.json["error"]);
        let cs = r.cache_status();
        assert!(
            cs.starts_with("repoll; hit; ttl=") && cs.ends_with("; detail=negative"),
            "{cs}"
        );
        assert!(!cs.contains("stored"), "no new task: {cs}");
    }
    let t = q.get(&id_of(&q, key)).await.unwrap().unwrap().task.unwrap();
    assert_eq!(t.state, TaskState::Dead);
    assert_eq!(env.sim_calls(key).await, (1, 0));
    assert_eq!(env.counter(&q, "negative").await, 3);

    // After the failed window: a new task, a new call.
    env.backdate_death(&q, key, STALE_BY).await;
    let again = env.submit(key).await;
    assert_eq!(
        (again.status, again.cache_status()),
        (202, "repoll; fwd=miss; stored")
    );
    until(
        "the new call",
        async || env.sim_calls(key).await,
        |c| c.0 == 2,
    )
    .await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_while_refreshing_works_on_three_partitions_and_a_named_upstream() {
    let mut env = Env::start(Opts {
        partitions: 3,
        named: true,
        ..Opts::default()
    })
    .await;
    let keys: Vec<String> = (0..9).map(|i| format!("spread {i} polls=1")).collect();
    let ups = [None, Some("search")];
    for up in ups {
        let q = env.queue_of(up).clone();
        let parts: std::collections::BTreeSet<usize> =
            keys.iter().map(|k| q.partition_of(&id_of(&q, k))).collect();
        assert_eq!(parts.len(), 3, "the keys cover every partition of {up:?}");
        for k in &keys {
            env.seed(&q, k, OLD).await;
            env.backdate_result(&q, k, STALE_BY).await;
        }
    }
    let extra = |up: Option<&str>| up.map_or(json!({}), |u| json!({ "upstream": u }));
    for up in ups {
        for k in &keys {
            let r = env.ask(k, None, extra(up)).await;
            assert_served(&r, "stale", json!("refreshing"), &old());
            assert_eq!(r.json["upstream"], up.unwrap_or("default"), "{}", r.body);
            assert!(!r.cache_status().contains("collapsed"), "{r:?}");
        }
    }
    env.start_workers();
    for up in ups {
        let q = env.queue_of(up).clone();
        for k in &keys {
            until(
                k,
                async || env.read_in(&q, k).await,
                |r| r.json["freshness"] == "fresh",
            )
            .await;
            let r = env.ask(k, None, extra(up)).await;
            assert_eq!(r.json["result"]["query"], k.as_str(), "{}", r.body);
            assert_served(&r, "fresh", Value::Null, &r.json["result"]);
        }
    }
    for k in &keys {
        assert_eq!(
            env.sim_calls(k).await,
            (2, 2),
            "{k}: one refresh per upstream"
        );
    }
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_query_is_refreshed_ahead_and_a_cold_one_is_not() {
    // Real time here: the fresh window runs out by itself. Lead = a quarter = 400 ms, for
    // the refresh's claim, call and completion.
    const FRESH: u64 = 1_600;
    let mut env = Env::start(Opts {
        fresh_ms: FRESH,
        windows: FreshnessWindows {
            hot_asks: 3,
            ..Opts::default().windows
        },
        ..Opts::default()
    })
    .await;
    env.start_workers();
    let q = env.queue.clone();
    let (hot, cold) = ("hot polls=1", "cold polls=1");
    env.submit(cold).await;
    until(
        cold,
        async || env.read(cold).await,
        |r| r.json["status"] == "done",
    )
    .await;
    // The cold one: asked twice (hot_asks is 3), the second time within the lead of going
    // stale. Not refreshed ahead: no task.
    assert_eq!(env.submit(cold).await.json["freshness"], "fresh");
    until(
        "the cold one's lead",
        async || env.read(cold).await,
        |r| r.json["age_ms"].as_u64().unwrap_or(0) >= FRESH - 250,
    )
    .await;
    let second = env.submit(cold).await;
    assert_eq!(second.json["freshness"], "fresh", "{}", second.body);
    let t = q.get(&id_of(&q, cold)).await.unwrap().unwrap().task;
    assert!(
        t.is_none(),
        "asked fewer than hot_asks times, refreshed ahead: {t:?}"
    );

    // The hot one, asked every 100 ms for four windows: always fresh.
    env.submit(hot).await;
    until(
        hot,
        async || env.read(hot).await,
        |r| r.json["status"] == "done",
    )
    .await;
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(4 * FRESH) {
        let r = env.submit(hot).await;
        assert_eq!(
            r.json["freshness"],
            "fresh",
            "after {:?}: {}",
            start.elapsed(),
            r.body
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let elapsed = start.elapsed().as_millis() as u64;
    let refreshes = env.sim_calls(hot).await.0 - 1;
    // A refresh starts in the last quarter of each window and the new result starts a new
    // one: about one a window, never fewer than the windows run out, never many more.
    assert!(
        refreshes + 1 >= elapsed / FRESH && refreshes <= elapsed / (FRESH * 3 / 4) + 1,
        "{refreshes} refreshes in {elapsed} ms"
    );
    let ahead = env.counter(&q, "ahead").await;
    assert!(
        ahead as u64 == refreshes || ahead as u64 == refreshes + 1,
        "{ahead} counted ahead for {refreshes} calls (one may still run)"
    );
    assert_eq!(env.counter(&q, "stale").await, 0);
    assert_eq!(env.sim_calls(cold).await, (1, 1));
    env.stop().await;
}
