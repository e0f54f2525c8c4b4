//! What an upstream sends is bounded where it enters: a `failed` answer's message is cut like
//! an HTTP error body, a result larger than `REPOLL_UPSTREAM_MAX_RESULT` ends its task dead
//! instead of being stored, a partial that large is not stored, and the task's record and
//! history stay small in Redis (MEMORY USAGE) however large the answer was. Real simulator
//! (`pad=` makes an answer that large), real Redis.

use crate::common;

use std::time::Duration;

use common::*;
use queue::{DeadReason, Queue, QueueConfig, TaskState};
use sim::SimArgs;

/// A queue at the default history level (what a deployment stores).
async fn default_queue(name: &str) -> Queue {
    let cfg = QueueConfig {
        name: name.to_string(),
        ..QueueConfig::default()
    };
    Queue::connect(&redis_url(), cfg).await.expect("queue")
}

async fn raw() -> redis::aio::MultiplexedConnection {
    redis::Client::open(redis_url())
        .expect("redis client")
        .get_multiplexed_async_connection()
        .await
        .expect("redis connection")
}

/// `MEMORY USAGE` of a key (0 when it does not exist).
async fn memory_usage(key: &str) -> u64 {
    let used: Option<u64> = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(key)
        .arg("SAMPLES")
        .arg(0)
        .query_async(&mut raw().await)
        .await
        .expect("MEMORY USAGE");
    used.unwrap_or(0)
}

async fn encoding(key: &str) -> String {
    redis::cmd("OBJECT")
        .arg("ENCODING")
        .arg(key)
        .query_async(&mut raw().await)
        .await
        .expect("OBJECT ENCODING")
}

/// The record and history keys of the task of `query`.
fn task_keys(q: &Queue, query: &str) -> (String, String) {
    let id = id_of(query);
    let tag = q.partition_tag(q.partition_of(id.as_str()));
    (format!("{tag}:t:{id}"), format!("{tag}:h:{id}"))
}

/// Runs one worker on `q` until `n` tasks are settled.
async fn work(q: &Queue, up: &worker::UpstreamArgs, n: u64) {
    let w = spawn(worker(q, up, fast_policy(), fast_worker_args(2)));
    wait_settled(q, n, Duration::from_secs(30)).await;
    w.stop().await;
}

/// The hostile upstream: 200 `{"status":"failed","error":"<3.9 MB>"}`. The message is
/// cut to 200 characters with "…" before it is stored, so the dead task's record and history
/// together take under 2 KB of Redis; a short message keeps the record a compact listpack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_failed_message_is_cut_and_the_dead_task_stays_small() {
    init_tracing();
    let sim = start_sim(SimArgs::default()).await;
    let q = default_queue("bounds-failed").await;
    let hostile = "hostile status=failed error=boom pad=3900000";
    let short = "short status=failed error=no-such-order";
    for k in [hostile, short] {
        q.enqueue(k, "", &fast_policy().enqueue_policy())
            .await
            .expect("enqueue");
    }
    work(&q, &sim.upstream_args(5_000), 2).await;

    let (record, history) = task_keys(&q, hostile);
    let (r, h) = (memory_usage(&record).await, memory_usage(&history).await);
    println!("hostile failed message: record {r} B + history {h} B in Redis");
    let t = q
        .get(&id_of(hostile))
        .await
        .expect("get")
        .and_then(|d| d.task)
        .expect("task");
    assert_eq!(t.state, TaskState::Dead, "{t:?}");
    assert_eq!(t.dead_reason, Some(DeadReason::Fatal));
    let e = t.last_error.as_deref().unwrap_or_default();
    assert!(
        e.starts_with("upstream failed: boomxxx") && e.ends_with('…'),
        "{} bytes: {}",
        e.len(),
        e.chars().take(300).collect::<String>()
    );
    assert!(e.chars().count() <= 220, "{} chars", e.chars().count());

    assert!(r + h <= 2048, "record {r} B + history {h} B");

    let t = q
        .get(&id_of(short))
        .await
        .expect("get")
        .and_then(|d| d.task)
        .expect("task");
    assert_eq!(
        t.last_error.as_deref(),
        Some("upstream failed: no-such-order")
    );
    let (record, _) = task_keys(&q, short);
    assert_eq!(
        encoding(&record).await,
        "listpack",
        "a short error keeps it compact"
    );
}

/// A final answer larger than `REPOLL_UPSTREAM_MAX_RESULT` (here 10,000 bytes) is not stored:
/// the task is dead (`fatal`) with "result too large" and the sizes, its record small; one
/// within the limit is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_over_the_max_result_ends_dead_and_is_not_stored() {
    init_tracing();
    let sim = start_sim(SimArgs::default()).await;
    let q = default_queue("bounds-result").await;
    let big = "big-result polls=1 pad=20000";
    let small = "small-result polls=1 pad=5000";
    for k in [big, small] {
        q.enqueue(k, "", &fast_policy().enqueue_policy())
            .await
            .expect("enqueue");
    }
    let up = worker::UpstreamArgs {
        max_result_bytes: 10_000,
        ..sim.upstream_args(5_000)
    };
    work(&q, &up, 2).await;

    let d = q.get(&id_of(big)).await.expect("get").expect("known");
    assert!(d.result.is_none(), "a result over the limit was stored");
    let t = d.task.expect("task");
    assert_eq!(t.state, TaskState::Dead, "{t:?}");
    assert_eq!(t.dead_reason, Some(DeadReason::Fatal));
    let e = t.last_error.as_deref().unwrap_or_default();
    assert!(
        e.starts_with("result too large: ") && e.contains("more than the 10000 bytes kept"),
        "{e}"
    );
    let (record, history) = task_keys(&q, big);
    let (r, h) = (memory_usage(&record).await, memory_usage(&history).await);
    assert!(r + h <= 2048, "record {r} B + history {h} B");

    let d = q.get(&id_of(small)).await.expect("get").expect("known");
    let stored = d.result.expect("a result within the limit is stored");
    assert!(stored.data.len() > 5_000, "{} bytes", stored.data.len());
}

/// A partial answer larger than the limit is not stored (the last one that fit stays; here
/// none did): polling goes on, and the task is not killed for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_over_the_max_result_is_not_stored_and_polling_goes_on() {
    init_tracing();
    let sim = start_sim(SimArgs::default()).await;
    let q = default_queue("bounds-partial").await;
    let key = "big-partial polls=1000 pad=20000";
    q.enqueue(key, "", &fast_policy().enqueue_policy())
        .await
        .expect("enqueue");
    let up = worker::UpstreamArgs {
        max_result_bytes: 10_000,
        ..sim.upstream_args(5_000)
    };
    let w = spawn(worker(&q, &up, fast_policy(), fast_worker_args(2)));
    let t0 = std::time::Instant::now();
    let t = loop {
        let t = q
            .get(&id_of(key))
            .await
            .expect("get")
            .and_then(|d| d.task)
            .expect("task");
        if t.polls >= 3 {
            break t;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "{t:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    w.stop().await;
    assert_ne!(t.state, TaskState::Dead, "{t:?}");
    assert!(
        t.partial.is_none(),
        "an oversized partial was stored: {:?} bytes",
        t.partial.map(|p| p.len())
    );
    assert!(sim.key(key).await.calls >= 3);
}

/// An answer nested 60,000 arrays deep (`deep=`) is refused by the JSON parser's recursion
/// limit as a bad body, like any unreadable answer: the worker does not crash (a recursive
/// parse or drop that deep would overflow its stack), the call is retried and the task ends
/// dead after its attempts with "bad body" in its last error, nothing stored; a shallow
/// `deep=` answer is read as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_nested_deeper_than_the_parser_allows_is_a_bad_body() {
    init_tracing();
    let sim = start_sim(SimArgs::default()).await;
    let q = default_queue("bounds-deep").await;
    let deep = "deep polls=1 deep=60000";
    let shallow = "shallow polls=1 deep=20";
    for k in [deep, shallow] {
        q.enqueue(k, "", &fast_policy().enqueue_policy())
            .await
            .expect("enqueue");
    }
    work(&q, &sim.upstream_args(5_000), 2).await;

    let d = q.get(&id_of(deep)).await.expect("get").expect("known");
    assert!(d.result.is_none(), "a refused body was stored");
    let t = d.task.expect("task");
    assert_eq!(t.state, TaskState::Dead, "{t:?}");
    assert_eq!(t.dead_reason, Some(DeadReason::MaxAttempts), "{t:?}");
    assert_eq!(t.attempts, fast_policy().max_attempts);
    let e = t.last_error.as_deref().unwrap_or_default();
    assert!(
        e.contains("bad body") && e.contains("recursion limit"),
        "{e}"
    );
    assert_eq!(
        sim.key(deep).await.calls,
        u64::from(fast_policy().max_attempts)
    );

    let d = q.get(&id_of(shallow)).await.expect("get").expect("known");
    let stored = d
        .result
        .expect("a shallow nest is an answer like any other");
    assert!(stored.data.contains("[[[[[[[[[["), "{}", stored.data);
}
