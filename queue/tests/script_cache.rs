//! The Lua library heals itself when Redis has lost it: a restarted Redis (or a promoted
//! replica, or `SCRIPT FLUSH`) has an empty script cache, and the process that loaded the
//! scripts at connect still calls them by SHA. Every kind of call must then load its script
//! again and go on: a single script call (EVALSHA, NOSCRIPT, SCRIPT LOAD, EVALSHA again) and
//! the `enqueue_many` pipeline (which cannot retry inside the pipeline, so it sends SCRIPT LOAD
//! with each chunk).
//!
//! `SCRIPT FLUSH` empties the cache of the whole server, and this binary's tests share one
//! private redis-server: they take turns (`ONE_AT_A_TIME`), so a test's own calls are what
//! loads a script again, and "the cache is empty" after its flush is a fact it can check.
mod common;

use common::*;
use queue::{EnqueuePolicy, Enqueued};

static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Empties the server's script cache, and checks it is empty (so the next call of every
/// script really meets NOSCRIPT).
async fn script_flush() {
    let mut c = raw().await;
    let () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut c)
        .await
        .expect("SCRIPT FLUSH");
    assert_eq!(cached_scripts().await, 0, "SCRIPT FLUSH emptied the cache");
}

/// How many scripts the server's cache holds (`INFO memory`'s `number_of_cached_scripts`).
async fn cached_scripts() -> u64 {
    let mut c = raw().await;
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut c)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("number_of_cached_scripts:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("number_of_cached_scripts in INFO memory")
}

#[tokio::test]
async fn every_single_script_call_loads_its_script_again_after_a_flush() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let mut conf = cfg("noscript_one");
    // exercise_every_operation needs the reaper's poison path.
    conf.max_lease_losses = 1;
    let q = queue_with(conf).await;
    script_flush().await;
    // The first call of every script after the flush meets NOSCRIPT; each must load and
    // run it (the helper panics on the first error).
    exercise_every_operation(&q).await;
    assert!(
        cached_scripts().await > 0,
        "the calls after the flush loaded their scripts again"
    );
    // A flush between two calls of the same script, on a task in flight.
    q.enqueue("after a second flush", "p", &EnqueuePolicy::default())
        .await
        .unwrap();
    let c = q.claim("w", 1, 600_000).await.unwrap();
    assert_eq!(c.len(), 1);
    script_flush().await;
    q.complete(&c[0].id, c[0].token, "done", 1).await.unwrap();
    assert_eq!(
        q.result_by_id(&c[0].id).await.unwrap().unwrap().data,
        "done"
    );
}

#[tokio::test]
async fn enqueue_many_loads_its_script_again_after_a_flush() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let q = queue("noscript_many").await;
    let policy = EnqueuePolicy::default();
    let queries: Vec<String> = (0..5).map(|i| format!("many after flush {i}")).collect();
    let items: Vec<(&str, &str)> = queries.iter().map(|s| (s.as_str(), "p")).collect();

    script_flush().await;
    let first = q.enqueue_many(&items, &policy).await.unwrap();
    assert_eq!(first.len(), items.len());
    for r in &first {
        assert!(
            matches!(r, Ok(Enqueued::Created(_))),
            "a fresh query is created after the flush: {r:?}"
        );
    }
    // Again after another flush: the same queries join the tasks the first batch created.
    script_flush().await;
    let again = q.enqueue_many(&items, &policy).await.unwrap();
    for r in &again {
        assert!(
            matches!(r, Ok(Enqueued::Joined(_))),
            "the second batch joins: {r:?}"
        );
    }
    assert_eq!(q.stats().await.unwrap().ready, items.len() as u64);
}
