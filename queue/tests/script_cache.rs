//! The Lua library heals itself when Redis has lost it: a restarted Redis (or a promoted
//! replica, or `FUNCTION FLUSH`) has no functions, and the process that loaded the library at
//! connect still calls them by name. Every kind of call must then load the library again and
//! go on: a single call (FCALL, "Function not found", FUNCTION LOAD, FCALL again) and the
//! `enqueue_many` pipeline (which resends the items that failed after one load).
//!
//! `FUNCTION FLUSH` empties the whole server, and this binary's tests share one private
//! redis-server: they take turns (`ONE_AT_A_TIME`), so a test's own calls are what load the
//! library again, and "no library is loaded" after its flush is a fact it can check.
mod common;

use common::*;
use queue::{EnqueuePolicy, Enqueued};

static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Removes every function library from the server, and checks none is left (so the next call
/// of every function really meets "Function not found").
async fn function_flush() {
    let mut c = raw().await;
    let () = redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query_async(&mut c)
        .await
        .expect("FUNCTION FLUSH");
    assert_eq!(
        loaded_libraries().await,
        0,
        "FUNCTION FLUSH removed the library"
    );
}

/// How many function libraries the server holds (entries of `FUNCTION LIST`).
async fn loaded_libraries() -> i64 {
    let mut c = raw().await;
    let list: Vec<redis::Value> = redis::cmd("FUNCTION")
        .arg("LIST")
        .query_async(&mut c)
        .await
        .unwrap();
    list.len() as i64
}

#[tokio::test]
async fn every_single_call_loads_the_library_again_after_a_function_flush() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let mut conf = cfg("noscript_one");
    // exercise_every_operation needs the reaper's poison path.
    conf.max_lease_losses = 1;
    let q = queue_with(conf).await;
    function_flush().await;
    // The first call after the flush meets "Function not found"; it must load the library
    // and run (the helper panics on the first error).
    exercise_every_operation(&q).await;
    assert_eq!(
        loaded_libraries().await,
        1,
        "the calls after the flush loaded the library again"
    );
    // A flush between two calls on a task in flight.
    q.enqueue("after a second flush", "p", &EnqueuePolicy::default())
        .await
        .unwrap();
    let c = q.claim("w", 1, 600_000).await.unwrap();
    assert_eq!(c.len(), 1);
    function_flush().await;
    q.complete(&c[0].id, c[0].token, "done", 1).await.unwrap();
    assert_eq!(
        q.result_by_id(&c[0].id).await.unwrap().unwrap().data,
        "done"
    );
    // The sign-in limiter calls its function without the queue's common ARGV: it heals too.
    function_flush().await;
    assert!(q.sign_in_attempts("10.0.0.9", 3).take().await.unwrap());
}

#[tokio::test]
async fn enqueue_many_loads_the_library_again_after_a_function_flush() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let q = queue("noscript_many").await;
    let policy = EnqueuePolicy::default();
    let queries: Vec<String> = (0..5).map(|i| format!("many after flush {i}")).collect();
    let items: Vec<(&str, &str)> = queries.iter().map(|s| (s.as_str(), "p")).collect();

    function_flush().await;
    let first = q.enqueue_many(&items, &policy).await.unwrap();
    assert_eq!(first.len(), items.len());
    for r in &first {
        assert!(
            matches!(r, Ok(Enqueued::Created(_))),
            "a fresh query is created after the flush: {r:?}"
        );
    }
    // Again after another flush: the same queries join the tasks the first batch created.
    function_flush().await;
    let again = q.enqueue_many(&items, &policy).await.unwrap();
    for r in &again {
        assert!(
            matches!(r, Ok(Enqueued::Joined(_))),
            "the second batch joins: {r:?}"
        );
    }
    assert_eq!(q.stats().await.unwrap().ready, items.len() as u64);
}
