//! The Lua library as Redis Functions: loaded once per node at connect, found again when Redis
//! lost it (a restart without persistence, `FUNCTION FLUSH` while a pipeline is in flight),
//! and side by side with another version of itself (a rolling upgrade).
//!
//! Each test has a redis-server of its own: they flush, restart or count server-wide.
use crate::common;

use common::*;
use queue::scripts::LIBRARY;
use queue::{EnqueuePolicy, Enqueued, Queue};
use std::time::{Duration, Instant};

async fn conn_to(server: &Server) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Names of the function libraries the server holds.
async fn library_names(c: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
    let list: Vec<redis::Value> = redis::cmd("FUNCTION")
        .arg("LIST")
        .query_async(c)
        .await
        .unwrap();
    list.iter()
        .filter_map(|lib| match lib {
            redis::Value::Array(kv) | redis::Value::Set(kv) => kv
                .chunks(2)
                .find(|p| matches!(&p[0], redis::Value::BulkString(k) if k == b"library_name"))
                .and_then(|p| redis::from_redis_value::<String>(p[1].clone()).ok()),
            redis::Value::Map(kv) => kv
                .iter()
                .find(|(k, _)| matches!(k, redis::Value::BulkString(k) if k == b"library_name"))
                .and_then(|(_, v)| redis::from_redis_value::<String>(v.clone()).ok()),
            _ => None,
        })
        .collect()
}

/// `calls` and `failed_calls` of FCALL so far (`INFO commandstats`).
async fn fcall_counts(c: &mut redis::aio::MultiplexedConnection) -> (u64, u64) {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(c)
        .await
        .unwrap();
    let line = info
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_fcall:"))
        .unwrap_or("");
    let field = |name: &str| {
        line.split(',')
            .find_map(|kv| kv.strip_prefix(name))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    (field("calls="), field("failed_calls="))
}

#[tokio::test]
async fn a_call_after_a_restart_without_persistence_loads_the_library_again() {
    let mut srv = spawn_redis();
    let q = Queue::connect(&srv.url(), cfg("fn_restart")).await.unwrap();
    let policy = EnqueuePolicy::default();
    q.enqueue("before the restart", "p", &policy).await.unwrap();

    let mut c = conn_to(&srv).await;
    let _ = redis::cmd("SHUTDOWN")
        .arg("NOSAVE")
        .query_async::<()>(&mut c)
        .await;
    // The same command on the same port and directory, no persistence: an empty Redis.
    srv.restart_async()
        .await
        .expect("redis-server restarted on the same port");
    let mut c = conn_to(&srv).await;
    assert!(
        library_names(&mut c).await.is_empty(),
        "the restart lost it"
    );

    // The connection manager reconnects on its own; only connection errors are retried here,
    // so a "Function not found" fails the test.
    let t0 = Instant::now();
    let created = loop {
        match q.enqueue("after the restart", "p", &policy).await {
            Err(queue::QueueError::Redis(e))
                if (e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal())
                    && t0.elapsed() < Duration::from_secs(10) =>
            {
                sleep_ms(100).await;
            }
            other => break other.expect("the call heals the library"),
        };
    };
    assert!(matches!(created, Enqueued::Created(_)), "{created:?}");
    assert_eq!(library_names(&mut c).await, vec![LIBRARY.name.clone()]);
    assert_eq!(
        q.stats().await.unwrap().ready,
        1,
        "empty Redis, one new task"
    );
}

/// One `enqueue_many` of 400 fresh items into queue `name` with a `FUNCTION FLUSH` sent while
/// it is in flight. Checks every item is created and only failed items were sent again;
/// returns how many failed (met the flushed library) on their first send.
async fn enqueue_many_across_a_flush(srv: &Server, name: &str) -> u64 {
    let q = Queue::connect(&srv.url(), cfg(name)).await.unwrap();
    let mut blocker = conn_to(srv).await;
    let mut flusher = conn_to(srv).await;
    let mut c = conn_to(srv).await;
    // ~500 bytes an item: the pipeline is many times Redis's 16 KB read buffer, so Redis runs
    // it over several turns of its event loop, and the flush (queued behind its first part)
    // can land in the middle.
    let queries: Vec<String> = (0..400)
        .map(|i| format!("in flight {i} {}", "x".repeat(480)))
        .collect();
    let (calls_before, failed_before) = fcall_counts(&mut c).await;

    // Hold Redis busy (a script spinning on TIME for 300 ms) so the pipeline, then the flush,
    // arrive while it waits, in that order.
    let busy = tokio::spawn(async move {
        let () = redis::cmd("EVAL")
            .arg(
                "local t0 = redis.call('TIME') local t repeat t = redis.call('TIME') \
                 until (t[1] - t0[1]) * 1000000 + (t[2] - t0[2]) > 300000",
            )
            .arg(0)
            .query_async(&mut blocker)
            .await
            .unwrap();
    });
    sleep_ms(50).await;
    let pipeline = tokio::spawn({
        let q = q.clone();
        let queries = queries.clone();
        async move {
            let items: Vec<(&str, &str)> = queries.iter().map(|s| (s.as_str(), "p")).collect();
            q.enqueue_many(&items, &EnqueuePolicy::default()).await
        }
    });
    sleep_ms(50).await;
    let () = redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query_async(&mut flusher)
        .await
        .unwrap();
    busy.await.unwrap();
    let answers = pipeline.await.unwrap().expect("enqueue_many heals");

    assert_eq!(answers.len(), queries.len());
    for a in &answers {
        assert!(matches!(a, Ok(Enqueued::Created(_))), "{a:?}");
    }
    let (calls, failed) = fcall_counts(&mut c).await;
    let failed = failed - failed_before;
    assert_eq!(
        calls - calls_before,
        queries.len() as u64 + failed,
        "only the failed items were sent again"
    );
    assert_eq!(q.stats().await.unwrap().ready, queries.len() as u64);
    failed
}

#[tokio::test]
async fn enqueue_many_resends_only_the_items_that_met_a_flushed_library() {
    let srv = spawn_redis();
    // Where the flush lands depends on the scheduling of a shared machine: try until it met
    // the pipeline part-way (some items ran, some failed). Every try checks the healing.
    let mut partly = Vec::new();
    for attempt in 0..12 {
        let failed = enqueue_many_across_a_flush(&srv, &format!("fn_pipeline{attempt}")).await;
        partly.push(failed);
        if failed > 0 && failed < 400 {
            return;
        }
    }
    panic!("the flush never met the pipeline part-way (failed items per try: {partly:?})");
}

#[tokio::test]
async fn two_library_versions_run_side_by_side() {
    let srv = spawn_redis();
    let q = Queue::connect(&srv.url(), cfg("fn_versions"))
        .await
        .unwrap();
    let mut c = conn_to(&srv).await;
    // Another build of repoll: the same functions under another library name.
    let other = LIBRARY.source.replace(&LIBRARY.name, "repoll_0ther0ne");
    assert_ne!(other, LIBRARY.source);
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(&other)
        .query_async(&mut c)
        .await
        .unwrap();
    let mut names = library_names(&mut c).await;
    names.sort();
    let mut want = vec![LIBRARY.name.clone(), "repoll_0ther0ne".to_string()];
    want.sort();
    assert_eq!(names, want);

    // Connecting again finds its library there ("already exists" is success) ...
    let q2 = Queue::connect(&srv.url(), cfg("fn_versions"))
        .await
        .unwrap();
    // ... and both versions serve calls on the same queue.
    q.enqueue("side by side", "p", &EnqueuePolicy::default())
        .await
        .unwrap();
    let claimed = q2.claim("w", 1, 60_000).await.unwrap();
    assert_eq!(claimed.len(), 1);
    let ready: i64 = redis::cmd("FCALL_RO")
        .arg("repoll_0ther0ne_stats")
        .arg(10)
        .arg(&[
            "{fn_versions}:ready",
            "{fn_versions}:ready:bg",
            "{fn_versions}:due",
            "{fn_versions}:leases",
            "{fn_versions}:dead",
            "{fn_versions}:retry",
            "{fn_versions}:results",
            "{fn_versions}:paused",
            "{fn_versions}:tp",
            "{fn_versions}:fair",
        ])
        .arg(&[
            "100",
            "100",
            "dash",
            "full",
            "64",
            "{fn_versions}:",
            "60000",
            "1",
        ])
        .query_async::<Vec<redis::Value>>(&mut c)
        .await
        .map(|v| v.len() as i64)
        .unwrap();
    assert!(ready > 0, "the other version's stats function runs");
    q2.complete(&claimed[0].id, claimed[0].token, "done", 1)
        .await
        .unwrap();
    assert_eq!(
        q.result_by_id(&claimed[0].id).await.unwrap().unwrap().data,
        "done"
    );
}
