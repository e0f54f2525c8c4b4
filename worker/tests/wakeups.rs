//! How idle workers find work: woken by the queue's wake-up list (each query asked only once
//! every worker is seen asleep on it, their 1 s safety sleep set to an hour, so nothing else
//! could start the work), the safety sleep itself when a wake-up entry is lost, and the bound
//! on calls in flight per worker (`REPOLL_CONCURRENCY`).

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::routing::get;
use axum::{Json, Router};
use common::*;
use redis::AsyncCommands;
use sim::SimArgs;
use worker::{UpstreamArgs, WorkerArgs};

/// Idle worker args for the wake-up tests: one slot, and an idle cap of an hour.
///
/// Why one slot: the listener waits on the wake-up list whenever its claim loop has a free
/// slot and is about to sleep, and a `BLPOP` once sent is not withdrawn when the loop gets
/// busy. With two slots a worker running one task still has a free slot, so it blocks in
/// `BLPOP` while its task runs, and when that task ends its claim loop runs once more (a claim
/// of its own, which could take a query asked just then). With one slot the listener sends
/// its `BLPOP` only after the claim loop, its task done, found nothing to claim and went to
/// sleep; so "every worker blocked in `BLPOP`" (read from `CLIENT LIST` on a server of the
/// test's own) means every claim loop is asleep, and the only thing that wakes it before the
/// hour is a wake-up entry (nothing is due, nothing is leased, nothing else runs). The
/// upstream is done on the first call: a poll would leave the worker idle (`BLPOP` sent) with
/// its task due, then busy again with that `BLPOP` still blocked.
fn idle_args(id: String) -> WorkerArgs {
    WorkerArgs {
        worker_id: Some(id),
        max_idle_ms: 3_600_000,
        ..fast_worker_args(1)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_workers_are_woken_by_new_work() {
    let sim = start_sim(SimArgs {
        polls: 0,
        ..SimArgs::default()
    })
    .await;
    let redis = PrivateRedis::start();
    let q = redis
        .queue(queue::QueueConfig {
            name: "wake_idle".into(),
            ..queue::QueueConfig::default()
        })
        .await;
    let up = sim.upstream_args(5_000);
    let n_workers = 4;
    let workers: Vec<_> = (0..n_workers)
        .map(|i| spawn(redis.worker(&q, &up, fast_policy(), idle_args(format!("idle-{i}")))))
        .collect();
    // One at a time, each asked only once every worker is asleep on the wake-up list.
    for i in 0..8 {
        redis
            .wait_blocked_blpops(n_workers, Duration::from_secs(30))
            .await;
        q.enqueue(&format!("wake idle {i}"), "", &Default::default())
            .await
            .unwrap();
        wait_settled(&q, i + 1, Duration::from_secs(30)).await;
    }
    let mut completed = 0;
    for w in workers {
        completed += w.stop().await.completed;
    }
    assert_eq!(completed, 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_wake_up_is_covered_by_the_idle_cap() {
    let sim = start_sim(SimArgs {
        polls: 1,
        ..SimArgs::default()
    })
    .await;
    let name = "wake_lost";
    let q = queue(name).await;
    let w = spawn(worker(
        &q,
        &sim.upstream_args(5_000),
        fast_policy(),
        WorkerArgs {
            max_idle_ms: 200,
            ..fast_worker_args(2)
        },
    ));
    // A ready task whose wake-up entry was lost: the record and its ready-list place, written
    // as enqueue.lua would, and no entry in the wake-up list.
    let query = "wake lost";
    let id = id_of(query);
    let now = q.now_ms().await.unwrap();
    let mut c = redis::Client::open(redis_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = c
        .hset_multiple(
            format!("{{{name}}}:t:{id}"),
            &[("q", query), ("s", "due"), ("c", &now.to_string())],
        )
        .await
        .unwrap();
    let _: () = c
        .rpush(format!("{{{name}}}:ready"), id.as_str())
        .await
        .unwrap();
    let n: usize = c.llen(format!("{{{name}}}:wakeups")).await.unwrap();
    assert_eq!(n, 0, "no wake-up entry");
    let s = wait_settled(&q, 1, Duration::from_secs(30)).await;
    assert_eq!(s.results, 1);
    assert_eq!(w.stop().await.completed, 1);
}

/// An upstream that answers "done" after 50 ms and records the most calls in flight at once.
#[derive(Clone, Default)]
struct Gauge {
    now: Arc<AtomicUsize>,
    max: Arc<AtomicUsize>,
}

async fn slow_done(
    State(g): State<Gauge>,
    Query(_q): Query<std::collections::HashMap<String, String>>,
) -> Json<serde_json::Value> {
    let n = g.now.fetch_add(1, Ordering::SeqCst) + 1;
    g.max.fetch_max(n, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(50)).await;
    g.now.fetch_sub(1, Ordering::SeqCst);
    Json(serde_json::json!({"status": "done", "data": "ok"}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_in_flight_never_exceed_the_concurrency() {
    let gauge = Gauge::default();
    let base = serve_upstream(
        Router::new()
            .route("/api/query", get(slow_done))
            .with_state(gauge.clone()),
    )
    .await;

    let q = queue("wake_concurrency").await;
    for i in 0..40 {
        q.enqueue(&format!("concurrency {i}"), "", &Default::default())
            .await
            .unwrap();
    }
    let up = UpstreamArgs {
        url: format!("{base}/api/query?q={{key}}"),
        ..UpstreamArgs::default()
    };
    let w = spawn(worker(&q, &up, fast_policy(), fast_worker_args(3)));
    wait_settled(&q, 40, Duration::from_secs(60)).await;
    assert_eq!(w.stop().await.completed, 40);
    let max = gauge.max.load(Ordering::SeqCst);
    assert!(max <= 3, "{max} calls at once with 3 slots");
    assert!(max >= 2, "the slots were used together ({max})");
}

/// A partitioned queue has a wake-up list per partition, and an idle worker process waits on
/// all of them: each new query, whatever its partition, is asked once every worker is asleep
/// on every list (see [`idle_args`]) and starts although the workers' idle cap (an hour) would
/// otherwise keep them asleep.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_workers_are_woken_by_new_work_in_any_partition() {
    let sim = start_sim(SimArgs {
        polls: 0,
        ..SimArgs::default()
    })
    .await;
    let redis = PrivateRedis::start();
    let partitions = 4u16;
    let q = redis
        .queue(queue::QueueConfig {
            name: "wake_parts".into(),
            partitions,
            ..queue::QueueConfig::default()
        })
        .await;
    let up = sim.upstream_args(5_000);
    let n_workers = 2;
    let workers: Vec<_> = (0..n_workers)
        .map(|i| spawn(redis.worker(&q, &up, fast_policy(), idle_args(format!("parts-{i}")))))
        .collect();
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..12 {
        // One listener per partition per worker.
        redis
            .wait_blocked_blpops(n_workers * usize::from(partitions), Duration::from_secs(30))
            .await;
        let text = format!("wake part {i}");
        seen.insert(q.partition_of(&id_of(&text)));
        q.enqueue(&text, "", &Default::default()).await.unwrap();
        wait_settled(&q, i + 1, Duration::from_secs(30)).await;
    }
    assert_eq!(seen.len(), 4, "the queries covered every partition");
    let mut completed = 0;
    for w in workers {
        completed += w.stop().await.completed;
    }
    assert_eq!(completed, 12);
}
