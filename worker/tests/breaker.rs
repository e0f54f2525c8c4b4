//! The circuit breaker seen from real workers and real HTTP upstreams, one of which goes down
//! and comes back: during the outage its breaker opens, it stops being hammered (a probe per
//! cool-down instead of every task's retries: the calls, counted against the Redis clock,
//! never exceed the threshold, the calls in flight and one per cool-down), none of its tasks
//! is dead-lettered for the outage, and the other upstream (its own queue, as named upstreams
//! are) keeps flowing; once the failing one is back, one probe closes its breaker and every
//! task completes.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::any;
use axum::{Json, Router};
use common::*;
use queue::{BreakerConfig, Queue, QueueConfig};
use worker::WorkerArgs;

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

/// The failing upstream (down from the start) and the healthy one, each with its own queue
/// (as named upstreams are), sharing one breaker configuration.
struct Outage {
    switch: Arc<Switch>,
    base: String,
    healthy: Arc<Switch>,
    healthy_base: String,
    breaker: BreakerConfig,
    q: Queue,
    other: Queue,
}

/// Serves an upstream answering as `switch` says; its base URL.
async fn serve_switch(switch: &Arc<Switch>) -> String {
    serve_upstream(
        Router::new()
            .route("/api/query", any(answer))
            .with_state(switch.clone()),
    )
    .await
}

async fn start_failing_and_healthy_upstreams() -> Outage {
    let switch = Arc::new(Switch::default());
    switch.down.store(true, Ordering::SeqCst);
    let base = serve_switch(&switch).await;
    let healthy = Arc::new(Switch::default());
    let healthy_base = serve_switch(&healthy).await;
    let breaker = BreakerConfig {
        failures: 5,
        error_percent: 50,
        cooldown_ms: 250,
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
    Outage {
        switch,
        base,
        healthy,
        healthy_base,
        breaker,
        q,
        other,
    }
}

/// Enqueues the tasks `{prefix} 0` to `{prefix} {n - 1}`.
async fn enqueue_numbered(q: &Queue, prefix: &str, n: u64, policy: &worker::PolicyArgs) {
    for i in 0..n {
        q.enqueue(&format!("{prefix} {i}"), "", &policy.enqueue_policy())
            .await
            .expect("enqueue");
    }
}

fn upstream_at(base: &str) -> worker::UpstreamArgs {
    worker::UpstreamArgs {
        url: format!("{base}/api/query?q={{key}}"),
        timeout_ms: 2_000,
        ..worker::UpstreamArgs::default()
    }
}

/// The bound on the failing upstream's calls, counted from `started` on the Redis clock (the
/// test explains each term).
struct CallBound<'a> {
    q: &'a Queue,
    switch: &'a Switch,
    breaker: BreakerConfig,
    concurrency: usize,
    started: i64,
}

impl CallBound<'_> {
    /// The calls the breaker allows by Redis time `now`.
    fn allowed(&self, now: i64) -> u64 {
        let elapsed = u64::try_from(now - self.started).unwrap();
        let f = u64::from(self.breaker.failures);
        f + ((f - 1) * elapsed).div_ceil(60_000)
            + self.concurrency as u64
            + elapsed / self.breaker.cooldown_ms
    }

    /// Counts the calls, then reads the clock, and asserts the count is within the bound.
    async fn check(&self, what: &str) -> u64 {
        let calls = self.switch.calls.load(Ordering::SeqCst);
        let now = self.q.now_ms().await.expect("now");
        assert!(
            calls <= self.allowed(now),
            "{calls} calls {what}, {} ms after the start: more than {} (threshold {}, {} \
             slots, one probe per {} ms cool-down)",
            now - self.started,
            self.allowed(now),
            self.breaker.failures,
            self.concurrency,
            self.breaker.cooldown_ms
        );
        calls
    }
}

/// Waits (at most a minute from `t0`) for the breaker to open on the upstream's 503s; the
/// breaker as first seen open and the calls counted then.
async fn wait_for_the_opening(bound: &CallBound<'_>, t0: Instant) -> (queue::BreakerInfo, u64) {
    let opened = loop {
        if let Some(b) = bound.q.breaker().await.expect("breaker") {
            break b;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "never opened");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(opened.by, "auto", "{opened:?}");
    assert!(opened.reason.contains("503"), "{opened:?}");
    let at_open = bound.check("when the opening was seen").await;
    println!("breaker: {at_open} calls when the opening was seen");
    (opened, at_open)
}

/// An open breaker stays open for exactly the cool-down set (the default is 30 s).
fn assert_open_for_the_cooldown(b: &queue::BreakerInfo, breaker: BreakerConfig) {
    if b.state == queue::BreakerState::Open {
        assert_eq!(
            b.until_ms - b.since_ms,
            breaker.cooldown_ms as i64,
            "open for the cool-down: {b:?}"
        );
    }
}

/// Lets the outage go on for ten more calls past `at_open`, checking the bound and the
/// cool-down of every opening seen at each step.
async fn watch_ten_more_outage_calls(
    bound: &CallBound<'_>,
    opened: &queue::BreakerInfo,
    at_open: u64,
    t0: Instant,
) {
    assert_open_for_the_cooldown(opened, bound.breaker);
    loop {
        if let Some(b) = bound.q.breaker().await.expect("breaker") {
            assert_open_for_the_cooldown(&b, bound.breaker);
        }
        let calls = bound.check("while open").await;
        if calls >= at_open + 10 {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "{} calls in two minutes of an open breaker: no probe?",
            calls - at_open
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs `n` tasks through the healthy upstream's queue while the failing one's breaker is
/// open: all complete, each in one call, and only the failing breaker is open.
async fn healthy_upstream_flows_beside_the_open_breaker(
    o: &Outage,
    n: u64,
    policy: &worker::PolicyArgs,
) {
    enqueue_numbered(&o.other, "healthy", n, policy).await;
    let other_up = upstream_at(&o.healthy_base);
    let t_other = Instant::now();
    let w2 = spawn(worker(
        &o.other,
        &other_up,
        policy.clone(),
        fast_worker_args(8),
    ));
    let s2 = wait_settled(&o.other, n, Duration::from_secs(20)).await;
    println!(
        "breaker: the healthy upstream's {n} tasks done in {} ms while the other's breaker was open",
        t_other.elapsed().as_millis()
    );
    w2.stop().await;
    assert_eq!((s2.results, s2.dead), (n, 0), "{s2:?}");
    assert_eq!(o.healthy.calls.load(Ordering::SeqCst), n, "one call each");
    assert!(o.other.breaker().await.expect("breaker").is_none());
    assert!(
        o.q.breaker().await.expect("breaker").is_some(),
        "still open"
    );
}

/// Every task has its stored result (none was lost while claims waited).
async fn assert_every_outage_task_has_its_result(q: &Queue, n: u64) {
    for i in 0..n {
        let d = q
            .get(&q.task_id(&format!("outage {i}")))
            .await
            .expect("get")
            .expect("known");
        assert!(d.result.is_some(), "outage {i} has its result");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_opens_the_breaker_spares_the_upstream_and_kills_no_task() {
    init_tracing();
    let o = start_failing_and_healthy_upstreams().await;
    let q = &o.q;
    // Three attempts each: without the breaker the outage below would kill every task.
    let policy = worker::PolicyArgs {
        max_attempts: 3,
        ..fast_policy()
    };
    let n = 40u64;
    enqueue_numbered(q, "outage", n, &policy).await;
    let up = upstream_at(&o.base);
    // A lease of a minute: a probe's lease cannot run out (which would let a second probe go)
    // however slowly the machine runs.
    let concurrency = 8;
    let w = spawn(worker(
        q,
        &up,
        policy.clone(),
        WorkerArgs {
            lease_ms: 60_000,
            ..fast_worker_args(concurrency)
        },
    ));
    // What the breaker allows, as calls made by Redis time `now`:
    // - before it opens, the failures it counts: `failures` (the one that reaches the
    //   threshold opens it), or a few more if a minute turns meanwhile (it counts this
    //   minute's errors plus the last minute's weighted by what is left of it, at most
    //   `failures` - 1 of them then, so a turn costs at most that many times the share of a
    //   minute gone since: bounded here by the minutes since the start, rounded up);
    // - at the opening, each of the worker's `concurrency` slots holds at most one task
    //   claimed while it was closed (the failing call's slot may have chained into the next
    //   one in the same script), whose call can still reach the upstream after the opening;
    // - after that only probes: one task once a cool-down has ended, the next no sooner than
    //   a cool-down after that one failed, so at most one per cool-down since the opening,
    //   which came after `started`.
    // The window is measured on the Redis clock the breaker itself uses, read after the
    // count, so a stalled test process only widens the allowance, never fails it.
    let bound = CallBound {
        q,
        switch: &o.switch,
        breaker: o.breaker,
        concurrency,
        started: q.now_ms().await.expect("now"),
    };

    // The breaker opens within the first few errors.
    let t0 = Instant::now();
    let (opened, at_open) = wait_for_the_opening(&bound, t0).await;
    // The outage goes on for ten more calls (probes, one a cool-down, and any call in flight
    // at the opening), the bound checked at every step; and each time the breaker is seen
    // open (opened, or reopened by a failed probe) it is open for exactly the cool-down set.
    watch_ten_more_outage_calls(&bound, &opened, at_open, t0).await;
    let s = q.stats().await.expect("stats");
    assert_eq!(s.dead, 0, "the outage killed no task: {s:?}");

    // The other upstream flows while this one's breaker is open: its 40 tasks complete at the
    // pace of a healthy upstream, each in one call.
    healthy_upstream_flows_beside_the_open_breaker(&o, n, &policy).await;

    // The upstream is back: the next probe closes the breaker and everything completes. The
    // calls counted after the switch all answer done, and a task answered done is not called
    // again: at most one call each.
    o.switch.down.store(false, Ordering::SeqCst);
    let at_back = bound.check("when the upstream came back").await;
    println!(
        "breaker: {at_back} calls in {} ms of outage (allowed {})",
        q.now_ms().await.expect("now") - bound.started,
        bound.allowed(q.now_ms().await.expect("now"))
    );
    let back = Instant::now();
    let s = wait_settled(q, n, Duration::from_secs(30)).await;
    println!(
        "breaker: all {n} done {} ms after the upstream came back",
        back.elapsed().as_millis()
    );
    w.stop().await;
    assert_eq!((s.results, s.dead), (n, 0), "{s:?}");
    assert!(q.breaker().await.expect("breaker").is_none(), "closed");
    let total = o.switch.calls.load(Ordering::SeqCst);
    assert!(
        total - at_back <= n,
        "{} calls for {n} tasks once the upstream was back",
        total - at_back
    );
    assert_every_outage_task_has_its_result(q, n).await;
}
