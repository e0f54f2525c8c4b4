//! README: a stored final result is served "without asking the upstream" while fresh
//! (`result_ttl_ms`) and kept to the end of its last window (fresh + stale + stale-if-error),
//! then the query is asked again. With a real worker on the simulator: the stored result (and
//! the task's history) expire exactly a life after the completion; re-asking within the fresh
//! window answers the stored result, creates no task and makes no upstream call; once the life
//! has run out (made to run out in Redis, not waited for) the result and the results index
//! entry are gone (the index is trimmed by the reaper's housekeeping) and re-asking creates a
//! new task that is polled again. (What happens in the stale windows: queue/tests/freshness.rs
//! and server/tests/api_freshness.rs.)

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use queue::{Enqueued, Queue, QueueConfig};
use sim::SimArgs;

/// An hour: every step of the test is inside it by construction, and it is not the default
/// (a day), so the expiry read back from the keys proves the setting.
const TTL_MS: u64 = 3_600_000;
/// The stale and stale-if-error windows: not the defaults either, so the expiry proves both.
const STALE_MS: u64 = 1_800_000;
const STALE_IF_ERROR_MS: u64 = 900_000;
/// The stored result's whole life.
const LIFE_MS: u64 = TTL_MS + STALE_MS + STALE_IF_ERROR_MS;

type Conn = redis::aio::MultiplexedConnection;

/// A queue with the test's fresh, stale and stale-if-error windows, listing every claim.
async fn queue_with_the_windows(name: &str) -> Queue {
    Queue::connect(
        &redis_url(),
        QueueConfig {
            name: name.into(),
            result_ttl_ms: TTL_MS,
            freshness: queue::FreshnessWindows {
                stale_ms: STALE_MS,
                stale_if_error_ms: STALE_IF_ERROR_MS,
                ..Default::default()
            },
            // Every claim listed: the test counts the upstream calls in the history.
            history: queue::HistoryLevel::Full,
            ..QueueConfig::default()
        },
    )
    .await
    .expect("queue")
}

/// Asks `key`, which must create a new task.
async fn enqueue_creating_a_task(q: &Queue, key: &str, policy: &worker::PolicyArgs) {
    assert!(matches!(
        q.enqueue(key, "", &policy.enqueue_policy())
            .await
            .expect("enqueue"),
        Enqueued::Created(_)
    ));
}

/// The completion time the results index holds for `id`, if it is there.
async fn indexed_at(redis: &mut Conn, index: &str, id: &queue::TaskId) -> Option<i64> {
    redis::cmd("ZSCORE")
        .arg(index)
        .arg(id.as_str())
        .query_async(redis)
        .await
        .expect("zscore")
}

/// The result and the task's history expire a life after the completion, on the Redis
/// clock: the settings (not the defaults) are what was set on the keys. (Redis
/// counts a script's relative expiry from its own clock reading, which may be a
/// millisecond either side of the completion time the script read with TIME (a second of
/// slack above it); it cannot be before the task was created.)
async fn assert_expire_a_life_after_completion(
    redis: &mut Conn,
    keys: [&String; 2],
    first: &queue::StoredResult,
) {
    for key in keys {
        let expires: i64 = redis::cmd("PEXPIRETIME")
            .arg(key)
            .query_async(redis)
            .await
            .expect("pexpiretime");
        let ttl = LIFE_MS as i64;
        assert!(
            (first.created_ms + ttl..=first.completed_ms + ttl + 1_000).contains(&expires),
            "{key} expires at {expires}, not a life ({ttl} ms) after its completion at {} \
             (created at {})",
            first.completed_ms,
            first.created_ms
        );
    }
}

/// The life runs out, without waiting for it: the two keys are made to expire now (Redis
/// removes them as it would at their deadline), and the results index entry is moved a life
/// into the past, which is what the reaper's trim (members older than now - life) sees once
/// the clock has moved on by a life.
async fn run_out_the_life_now(
    redis: &mut Conn,
    keys: [&String; 2],
    index: &str,
    id: &queue::TaskId,
    first: &queue::StoredResult,
) {
    for key in keys {
        let set: i64 = redis::cmd("PEXPIRE")
            .arg(key)
            .arg(1)
            .query_async(redis)
            .await
            .expect("pexpire");
        assert_eq!(set, 1, "{key} was there to expire");
    }
    let moved: i64 = redis::cmd("ZADD")
        .arg(index)
        .arg("XX")
        .arg("CH")
        .arg(first.completed_ms - LIFE_MS as i64)
        .arg(id.as_str())
        .query_async(redis)
        .await
        .expect("zadd");
    assert_eq!(moved, 1, "the index entry was there to move");
}

/// Waits until the result is gone and the reaper (every 200 ms) has trimmed the index.
async fn wait_result_gone_and_unindexed(
    q: &Queue,
    redis: &mut Conn,
    index: &str,
    id: &queue::TaskId,
) {
    let t0 = Instant::now();
    loop {
        let gone = q.result_by_id(id).await.expect("read").is_none();
        let indexed = indexed_at(redis, index, id).await;
        if gone && indexed.is_none() {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "result gone: {gone}, still indexed: {indexed:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_result_is_served_until_its_ttl_then_asked_again() {
    init_tracing();
    let sim = start_sim(SimArgs::default()).await;
    let name = "result-ttl";
    let q = queue_with_the_windows(name).await;
    let mut redis = redis::Client::open(redis_url())
        .expect("client")
        .get_multiplexed_async_connection()
        .await
        .expect("redis");
    // The results index (ARCHITECTURE.md, key table): id -> completed ms.
    let index = format!("{{{name}}}:results");
    let policy = fast_policy();
    let up = sim.upstream_args(5_000);
    let key = "ttl polls=0";
    let id = id_of(key);
    let w = spawn(worker(&q, &up, policy.clone(), fast_worker_args(2)));

    enqueue_creating_a_task(&q, key, &policy).await;
    wait_settled(&q, 1, Duration::from_secs(20)).await;
    let first = q.result_by_id(&id).await.expect("read").expect("stored");
    let indexed = indexed_at(&mut redis, &index, &id).await;
    assert_eq!(indexed, Some(first.completed_ms), "indexed when completed");

    let rkey = format!("{{{name}}}:r:{id}");
    let hkey = format!("{{{name}}}:h:{id}");
    assert_expire_a_life_after_completion(&mut redis, [&rkey, &hkey], &first).await;

    // Within the fresh window (by construction: an hour): the stored result, no task, no call.
    match q
        .enqueue(key, "", &policy.enqueue_policy())
        .await
        .expect("enqueue")
    {
        Enqueued::Stored(r) => assert_eq!(r, first),
        other => panic!("expected the stored result, got {other:?}"),
    }
    let d = q.get(&id).await.expect("get").expect("detail");
    assert!(d.task.is_none(), "no task created: {:?}", d.task);
    let s = q.stats().await.expect("stats");
    assert_eq!((s.ready, s.waiting, s.leased, s.results), (0, 0, 0, 1));

    run_out_the_life_now(&mut redis, [&rkey, &hkey], &index, &id, &first).await;
    // Then the result is gone and the reaper (every 200 ms) trims the index.
    wait_result_gone_and_unindexed(&q, &mut redis, &index, &id).await;
    assert_eq!(q.stats().await.expect("stats").results, 0);
    assert_eq!(sim.key(key).await.calls, 1, "no upstream call while stored");

    // Asked again: a new task, polled again, a new result.
    enqueue_creating_a_task(&q, key, &policy).await;
    wait_settled(&q, 1, Duration::from_secs(20)).await;
    let second = q.result_by_id(&id).await.expect("read").expect("stored");
    assert!(second.completed_ms > first.completed_ms);
    let report = w.stop().await;
    assert_eq!(report.completed, 2, "{report:?}");
    let k = sim.key(key).await;
    assert_eq!((k.calls, k.done), (2, 2), "{k:?}");
    let d = q.get(&id).await.expect("get").expect("detail");
    let kinds: Vec<_> = d.history.iter().rev().map(|h| h.kind.as_str()).collect();
    assert_eq!(
        kinds,
        ["enqueued", "claimed", "completed"],
        "{:?}",
        d.history
    );
}
