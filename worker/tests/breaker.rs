//! The circuit breaker seen from real workers and real HTTP upstreams, one of which goes down
//! and comes back: during the outage its breaker opens, it stops being hammered (a probe per
//! cool-down instead of every task's retries), none of its tasks is dead-lettered for the
//! outage, and the other upstream (its own queue, as named upstreams are) keeps flowing; once
//! the failing one is back, one probe closes its breaker and every task completes.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::any;
use axum::{Json, Router};
use common::*;
use queue::{BreakerConfig, Queue, QueueConfig};

/// An upstream with a switch: down answers 503, up answers `done`. It counts its calls.
#[derive(Default)]
struct Switch {
    down: AtomicBool,
    calls: AtomicU64,
}

async fn answer(State(s): State<Arc<Switch>>) -> (StatusCode, Json<serde_json::Value>) {
    s.calls.fetch_add(1, Ordering::SeqCst);
    if s.down.load(Ordering::SeqCst) {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({"error": "down"})),
        )
    } else {
        (
            StatusCode::OK,
            Json(serde_json::json!({"status": "done", "data": "ok"})),
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_opens_the_breaker_spares_the_upstream_and_kills_no_task() {
    init_tracing();
    let switch = Arc::new(Switch::default());
    switch.down.store(true, Ordering::SeqCst);
    let base = serve_upstream(
        Router::new()
            .route("/api/query", any(answer))
            .with_state(switch.clone()),
    )
    .await;
    let healthy = Arc::new(Switch::default());
    let healthy_base = serve_upstream(
        Router::new()
            .route("/api/query", any(answer))
            .with_state(healthy.clone()),
    )
    .await;
    let breaker = BreakerConfig {
        failures: 5,
        error_percent: 50,
        cooldown_ms: 400,
    };
    let cfg = QueueConfig {
        name: "breaker-outage".into(),
        breaker,
        upstream: "failing".into(),
        ..QueueConfig::default()
    };
    let q = Queue::connect(&redis_url(), cfg).await.expect("queue");
    let other = Queue::connect(
        &redis_url(),
        QueueConfig {
            name: "breaker-outage.healthy".into(),
            breaker,
            upstream: "healthy".into(),
            ..QueueConfig::default()
        },
    )
    .await
    .expect("queue");
    // Three attempts each: without the breaker the outage below would kill every task.
    let policy = worker::PolicyArgs {
        max_attempts: 3,
        ..fast_policy()
    };
    let n = 40u64;
    for i in 0..n {
        q.enqueue(&format!("outage {i}"), "", &policy.enqueue_policy())
            .await
            .expect("enqueue");
    }
    let up = worker::UpstreamArgs {
        url: format!("{base}/api/query?q={{key}}"),
        timeout_ms: 2_000,
        ..worker::UpstreamArgs::default()
    };
    let w = spawn(worker(&q, &up, policy.clone(), fast_worker_args(8)));

    // The breaker opens within the first few errors.
    let t0 = Instant::now();
    let opened = loop {
        if let Some(b) = q.breaker().await.expect("breaker") {
            break b;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "never opened");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(opened.by, "auto", "{opened:?}");
    assert!(opened.reason.contains("503"), "{opened:?}");
    // Two seconds of outage: five cool-downs. Calls: those before it opened (at most the
    // threshold plus what was in flight), then one probe per cool-down.
    let at_open = switch.calls.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let during = switch.calls.load(Ordering::SeqCst) - at_open;
    println!("breaker: {at_open} calls before it opened, {during} in 2 s while open");
    assert!(at_open <= 5 + 8 + 8, "{at_open} calls before it opened");
    assert!(during <= 8, "{during} calls in 2 s with a 400 ms cool-down");
    let s = q.stats().await.expect("stats");
    assert_eq!(s.dead, 0, "the outage killed no task: {s:?}");

    // The other upstream flows while this one's breaker is open: its 40 tasks complete at the
    // pace of a healthy upstream, each in one call.
    for i in 0..n {
        other
            .enqueue(&format!("healthy {i}"), "", &policy.enqueue_policy())
            .await
            .expect("enqueue");
    }
    let other_up = worker::UpstreamArgs {
        url: format!("{healthy_base}/api/query?q={{key}}"),
        timeout_ms: 2_000,
        ..worker::UpstreamArgs::default()
    };
    let t_other = Instant::now();
    let w2 = spawn(worker(
        &other,
        &other_up,
        policy.clone(),
        fast_worker_args(8),
    ));
    let s2 = wait_settled(&other, n, Duration::from_secs(20)).await;
    println!(
        "breaker: the healthy upstream's {n} tasks done in {} ms while the other's breaker was open",
        t_other.elapsed().as_millis()
    );
    w2.stop().await;
    assert_eq!((s2.results, s2.dead), (n, 0), "{s2:?}");
    assert_eq!(healthy.calls.load(Ordering::SeqCst), n, "one call each");
    assert!(other.breaker().await.expect("breaker").is_none());
    assert!(q.breaker().await.expect("breaker").is_some(), "still open");

    // The upstream is back: the next probe closes the breaker and everything completes.
    switch.down.store(false, Ordering::SeqCst);
    let back = Instant::now();
    let s = wait_settled(&q, n, Duration::from_secs(30)).await;
    println!(
        "breaker: all {n} done {} ms after the upstream came back",
        back.elapsed().as_millis()
    );
    w.stop().await;
    assert_eq!((s.results, s.dead), (n, 0), "{s:?}");
    assert!(q.breaker().await.expect("breaker").is_none(), "closed");
    // Total calls: each task's one success plus the bounded failures above.
    let total = switch.calls.load(Ordering::SeqCst);
    assert!(total <= n + at_open + during + 8, "{total} calls");
    // Every task has its stored result (none was lost while claims waited).
    for i in 0..n {
        let d = q
            .get(&q.task_id(&format!("outage {i}")))
            .await
            .expect("get")
            .expect("known");
        assert!(d.result.is_some(), "outage {i} has its result");
    }
}
