//! README: a stored final result is served "without asking the upstream" for
//! `result_ttl_ms`, then the query is asked again. With a short TTL and a real worker on the
//! simulator: re-asking before the TTL answers the stored result, creates no task and makes no
//! upstream call; after the TTL the result and the results index entry are gone (the index is
//! trimmed by the reaper's housekeeping) and re-asking creates a new task that is polled again.

mod common;

use std::time::{Duration, Instant};

use common::*;
use queue::{Enqueued, Queue, QueueConfig};
use sim::SimArgs;

const TTL_MS: u64 = 3_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_result_is_served_until_its_ttl_then_asked_again() {
    init_tracing();
    let sim = start_sim(SimArgs::default()).await;
    let name = "result-ttl";
    let q = Queue::connect(
        &redis_url(),
        QueueConfig {
            name: name.into(),
            result_ttl_ms: TTL_MS,
            // Every claim listed: the test counts the upstream calls in the history.
            history: queue::HistoryLevel::Full,
            ..QueueConfig::default()
        },
    )
    .await
    .expect("queue");
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

    assert!(matches!(
        q.enqueue(key, "", &policy.enqueue_policy())
            .await
            .expect("enqueue"),
        Enqueued::Created(_)
    ));
    wait_settled(&q, 1, Duration::from_secs(20)).await;
    let first = q.result_by_id(&id).await.expect("read").expect("stored");
    let indexed: Option<i64> = redis::cmd("ZSCORE")
        .arg(&index)
        .arg(id.as_str())
        .query_async(&mut redis)
        .await
        .expect("zscore");
    assert_eq!(indexed, Some(first.completed_ms), "indexed when completed");

    // Before the TTL: the stored result, no task, no call.
    let asked_at = q.now_ms().await.expect("now");
    assert!(
        asked_at < first.completed_ms + TTL_MS as i64,
        "setup: re-asked {} ms after completion, past the {TTL_MS} ms TTL",
        asked_at - first.completed_ms
    );
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

    // After the TTL (Redis time): the result expires and the reaper trims the index.
    let t0 = Instant::now();
    loop {
        let gone = q.result_by_id(&id).await.expect("read").is_none();
        let indexed: Option<i64> = redis::cmd("ZSCORE")
            .arg(&index)
            .arg(id.as_str())
            .query_async(&mut redis)
            .await
            .expect("zscore");
        if gone && indexed.is_none() {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "result gone: {gone}, still indexed: {indexed:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        q.now_ms().await.expect("now") >= first.completed_ms + TTL_MS as i64,
        "gone only after the TTL"
    );
    assert_eq!(q.stats().await.expect("stats").results, 0);
    assert_eq!(sim.key(key).await.calls, 1, "no upstream call while stored");

    // Asked again: a new task, polled again, a new result.
    assert!(matches!(
        q.enqueue(key, "", &policy.enqueue_policy())
            .await
            .expect("enqueue"),
        Enqueued::Created(_)
    ));
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
