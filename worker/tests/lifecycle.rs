//! Worker life cycle: a worker abandoned mid-call is recovered by another after the lease;
//! a call longer than its lease renews the lease and is made once; graceful shutdown lets
//! in-flight calls finish within the grace period and releases the leases of those still
//! running at its end; heartbeats; and the poll policy's order (with the time to result
//! printed) for a 2 s upstream and a 250 ms first interval.

use crate::common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Query, State};
use axum::routing::get;
use axum::{Json, Router};
use common::*;
use sim::SimArgs;
use tokio::sync::{oneshot, watch};
use worker::{PolicyArgs, UpstreamArgs, WorkerArgs};

/// An upstream whose answers the test lets go: every call is counted, then waits until the
/// gate is opened and answers done; a query holding "hang" never answers. Nothing the test
/// asserts depends on how long a call takes: a call lasts until the test has seen what it
/// waits for.
#[derive(Clone)]
struct Gated {
    calls: Arc<AtomicU64>,
    open: watch::Receiver<bool>,
}

async fn gated_answer(
    State(g): State<Gated>,
    Query(q): Query<std::collections::HashMap<String, String>>,
) -> Json<serde_json::Value> {
    g.calls.fetch_add(1, Ordering::SeqCst);
    if q.get("q").is_some_and(|k| k.contains("hang")) {
        std::future::pending::<()>().await;
    }
    let mut open = g.open.clone();
    let _ = open.wait_for(|o| *o).await;
    Json(serde_json::json!({"status": "done", "data": "ok"}))
}

/// Starts a gated upstream: its counter, the switch that opens the gate, and the worker's
/// upstream settings (a call timeout of ten minutes: the gate, not the timeout, ends a call).
async fn gated_upstream() -> (Arc<AtomicU64>, watch::Sender<bool>, UpstreamArgs) {
    let (gate, open) = watch::channel(false);
    let calls = Arc::new(AtomicU64::new(0));
    let base = serve_upstream(
        Router::new()
            .route("/api/query", get(gated_answer))
            .with_state(Gated {
                calls: calls.clone(),
                open,
            }),
    )
    .await;
    let up = UpstreamArgs {
        url: format!("{base}/api/query?q={{key}}"),
        timeout_ms: 600_000,
        ..UpstreamArgs::default()
    };
    (calls, gate, up)
}

/// Waits until the upstream has been called `n` times (panics after a minute).
async fn wait_calls(calls: &AtomicU64, n: u64) {
    let t0 = Instant::now();
    while calls.load(Ordering::SeqCst) < n {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "{} upstream calls after a minute, {n} expected",
            calls.load(Ordering::SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A running worker whose stop is seen: `stop` asks it to shut down and returns once the
/// worker has taken the shutdown (its claim loop polled the shutdown future to the end; from
/// there it goes into the drain with no await between), then `join` waits for its report.
struct Stoppable {
    stop: Option<oneshot::Sender<()>>,
    seen: Option<oneshot::Receiver<()>>,
    handle: tokio::task::JoinHandle<Result<worker::WorkerReport, worker::WorkerError>>,
}

fn spawn_stoppable(w: worker::Worker) -> Stoppable {
    let (stop, asked) = oneshot::channel::<()>();
    let (seen_tx, seen) = oneshot::channel::<()>();
    let handle = tokio::spawn(w.run(async move {
        let _ = asked.await;
        let _ = seen_tx.send(());
    }));
    Stoppable {
        stop: Some(stop),
        seen: Some(seen),
        handle,
    }
}

impl Stoppable {
    async fn stop(&mut self) {
        let _ = self.stop.take().expect("stopped once").send(());
        let seen = self.seen.take().expect("stopped once");
        tokio::time::timeout(Duration::from_secs(60), seen)
            .await
            .expect("the worker did not take the shutdown within a minute")
            .expect("the worker ended before its shutdown");
    }

    async fn join(self) -> worker::WorkerReport {
        tokio::time::timeout(Duration::from_secs(120), self.handle)
            .await
            .expect("the worker did not stop within two minutes")
            .expect("worker task")
            .expect("worker run")
    }
}

/// Waits until the worker `id` has registered (its heartbeat, first at start).
async fn wait_registered(q: &queue::Queue, id: &str) {
    let t0 = Instant::now();
    while !q
        .workers()
        .await
        .expect("workers")
        .iter()
        .any(|w| w.id == id)
    {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "worker {id} not registered after a minute"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Kinds of a task's history, oldest first.
fn kinds(h: &[queue::HistoryEntry]) -> Vec<&str> {
    h.iter().rev().map(|e| e.kind.as_str()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_task_is_recovered_after_the_lease_and_completed_once() {
    init_tracing();
    let sim = start_sim(SimArgs::default()).await;
    let q = queue("abandon").await;
    let policy = fast_policy();
    let up = sim.upstream_args(10_000);
    // First call hangs (a minute), the second answers done at once.
    let key = "ab fail=hang fail_times=1 polls=1";
    q.enqueue(key, "", &policy.enqueue_policy())
        .await
        .expect("enqueue");
    let args = |id: &str| WorkerArgs {
        lease_ms: 600,
        worker_id: Some(id.to_string()),
        ..fast_worker_args(4)
    };

    let a = spawn(worker(&q, &up, policy.clone(), args("abandon-a")));
    let t0 = Instant::now();
    while sim.key(key).await.calls < 1 {
        assert!(t0.elapsed() < Duration::from_secs(10), "never called");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Kill it mid-call: no release, no write, nothing.
    a.handle.abort();
    let _ = a.handle.await;
    let killed = Instant::now();
    assert_eq!(
        q.stats().await.expect("stats").leased,
        1,
        "still leased by the dead worker"
    );

    let b = spawn(worker(&q, &up, policy, args("abandon-b")));
    wait_settled(&q, 1, Duration::from_secs(20)).await;
    let recovered = killed.elapsed();
    let rb = b.stop().await;
    println!("abandoned task recovered and completed {recovered:?} after the kill (lease 600 ms)");
    assert_eq!(rb.completed, 1);
    let k = sim.key(key).await;
    assert_eq!((k.calls, k.done), (2, 1), "{k:?}");
    let d = q.get(&id_of(key)).await.expect("get").expect("detail");
    assert!(d.result.is_some(), "result stored");
    assert!(d.task.is_none(), "task record gone once done");
    // The dead worker's lease expired (it never wrote), the other claimed and completed.
    assert_eq!(
        kinds(&d.history),
        [
            "enqueued",
            "claimed",
            "lease_expired",
            "claimed",
            "completed"
        ],
        "{:?}",
        d.history
    );
    let h: Vec<_> = d.history.iter().rev().collect();
    assert!(h[1].detail.contains("by abandon-a"), "{:?}", h[1]);
    assert!(h[2].detail.contains("from abandon-a"), "{:?}", h[2]);
    assert!(h[3].detail.contains("by abandon-b"), "{:?}", h[3]);
    assert!(h[4].detail.contains("by abandon-b"), "{:?}", h[4]);
}

/// A call longer than its lease keeps the lease by renewing it (every third of the lease):
/// with a second worker watching the queue (both reaping), the call is held open until the
/// Redis clock is past the deadline of the lease it was claimed with, and a reap then finds
/// nothing to take back; the task is never re-claimed, the upstream is called exactly once,
/// and no `lease_expired` appears in the history. The lease is six seconds, so a stalled
/// test machine does not make the worker miss its renewals; the call's length is set by the
/// test, not by a clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_call_renews_its_lease_and_is_called_once() {
    init_tracing();
    let (calls, gate, up) = gated_upstream().await;
    let q = queue("renew-long").await;
    let policy = fast_policy();
    let lease_ms = 6_000;
    let key = "long call";
    let id = id_of(key);
    q.enqueue(key, "", &policy.enqueue_policy())
        .await
        .expect("enqueue");
    let args = |id: &str| WorkerArgs {
        lease_ms,
        worker_id: Some(id.to_string()),
        ..fast_worker_args(4)
    };
    let a = spawn(worker(&q, &up, policy.clone(), args("renew-a")));
    let b = spawn(worker(&q, &up, policy, args("renew-b")));

    let t0 = Instant::now();
    let first = loop {
        let t = q.get(&id).await.expect("get").and_then(|d| d.task);
        if let Some(t) = t.filter(|t| t.state == queue::TaskState::Leased) {
            break t;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "never claimed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let first_deadline = first.lease_deadline_ms.expect("leased: a deadline");
    wait_calls(&calls, 1).await;
    // The call is held until the Redis clock is past the first lease's deadline; meanwhile
    // the task stays leased under the same token.
    loop {
        let now = q.now_ms().await.expect("now");
        let t = q
            .get(&id)
            .await
            .expect("get")
            .and_then(|d| d.task)
            .expect("the task is still open (its call is held)");
        assert_eq!(
            (t.state, t.token),
            (queue::TaskState::Leased, first.token),
            "re-claimed: {t:?}"
        );
        if now > first_deadline {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "the Redis clock never passed {first_deadline}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Past it, a reap (the one the workers run) finds nothing to take back: the lease was
    // renewed, in the lease index the reaper reads, not only in the task's record.
    let reaped = q.reap(100).await.expect("reap");
    assert!(
        reaped.requeued.is_empty() && reaped.dead.is_empty(),
        "a lease past its first deadline was reaped: {reaped:?}"
    );
    let t = q
        .get(&id)
        .await
        .expect("get")
        .and_then(|d| d.task)
        .expect("still open");
    assert_eq!(t.token, first.token, "re-claimed: {t:?}");
    assert!(
        t.lease_deadline_ms.is_some_and(|d| d > first_deadline),
        "the deadline moved on: {t:?}"
    );

    gate.send_replace(true);
    wait_settled(&q, 1, Duration::from_secs(60)).await;
    let ra = a.stop().await;
    let rb = b.stop().await;
    println!("long call: a {ra:?}; b {rb:?}");
    assert_eq!(ra.claimed + rb.claimed, 1, "claimed once: {ra:?} {rb:?}");
    assert_eq!(ra.completed + rb.completed, 1);
    assert_eq!(ra.stale + rb.stale, 0);
    assert!(
        ra.renewed + rb.renewed >= 1,
        "renewals counted: {ra:?} {rb:?}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1, "one upstream call");
    let d = q.get(&id).await.expect("get").expect("detail");
    assert!(d.result.is_some());
    assert_eq!(
        kinds(&d.history),
        ["enqueued", "claimed", "completed"],
        "no lease_expired: {:?}",
        d.history
    );
}

/// Graceful shutdown, first half: calls in flight when the worker is asked to stop are given
/// the grace period, and those that end within it complete (nothing is released). The calls
/// are held until the Redis clock is 10.5 s past the moment the worker took the shutdown
/// (longer than the default grace of 10 s, so the setting, ten minutes, is what lets them
/// finish), then let go; the grace is far longer than anything the test waits for, so the
/// speed of the machine plays no part.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_lets_in_flight_calls_finish_within_grace() {
    init_tracing();
    let (calls, gate, up) = gated_upstream().await;
    let q = queue("shutdown-finish").await;
    let policy = fast_policy();
    for k in ["sd finish 1", "sd finish 2"] {
        q.enqueue(k, "", &policy.enqueue_policy())
            .await
            .expect("enqueue");
    }
    let args = WorkerArgs {
        lease_ms: 60_000,
        grace_ms: 600_000,
        ..fast_worker_args(2)
    };
    let w = worker(&q, &up, policy, args);
    let id = w.id().to_string();
    let mut running = spawn_stoppable(w);
    wait_calls(&calls, 2).await;
    wait_registered(&q, &id).await;

    running.stop().await;
    // Draining now (since before `stopped`): the calls are held 10.5 s more, then answer.
    let stopped = q.now_ms().await.expect("now");
    while q.now_ms().await.expect("now") < stopped + 10_500 {
        assert_eq!(
            q.stats().await.expect("stats").leased,
            2,
            "a held call's lease was given back before the grace ended"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    gate.send_replace(true);
    let report = running.join().await;
    println!("shutdown within grace: {report:?}");
    assert_eq!(
        (report.completed, report.released),
        (2, 0),
        "the calls finished within the grace: {report:?}"
    );
    let s = q.stats().await.expect("stats");
    assert_eq!((s.leased, s.ready, s.results), (0, 0, 2), "{s:?}");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    // It left the registry before its run returned (not by its entry expiring later).
    assert!(
        !q.workers()
            .await
            .expect("workers")
            .iter()
            .any(|w| w.id == id),
        "removed itself from the registry"
    );
}

/// Graceful shutdown, second half: calls that never answer are given the whole grace period
/// (a lower bound the worker enforces; how much longer it took is not asserted), then
/// aborted and their leases given back at once (ready again, though the lease has a minute
/// left), and the worker leaves the registry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_releases_in_flight_leases_at_the_end_of_grace() {
    init_tracing();
    let (calls, _gate, up) = gated_upstream().await;
    let q = queue("shutdown-release").await;
    let policy = fast_policy();
    for k in ["sd hang 1", "sd hang 2"] {
        q.enqueue(k, "", &policy.enqueue_policy())
            .await
            .expect("enqueue");
    }
    let grace = Duration::from_millis(2_000);
    let args = WorkerArgs {
        lease_ms: 60_000,
        grace_ms: 2_000,
        ..fast_worker_args(2)
    };
    let w = worker(&q, &up, policy, args);
    let id = w.id().to_string();
    let mut running = spawn_stoppable(w);
    wait_calls(&calls, 2).await;
    wait_registered(&q, &id).await;

    let asked = Instant::now();
    running.stop().await;
    let report = running.join().await;
    let took = asked.elapsed();
    println!("shutdown took {took:?} (grace {grace:?}): {report:?}");
    assert!(took >= grace, "waited for the grace period: {took:?}");
    assert_eq!(
        (report.completed, report.released),
        (0, 2),
        "the hanging calls' leases were released: {report:?}"
    );
    let s = q.stats().await.expect("stats");
    assert_eq!((s.leased, s.ready, s.results), (0, 2, 0), "{s:?}");
    // It left the registry before its run returned (not by its entry expiring later).
    assert!(
        !q.workers()
            .await
            .expect("workers")
            .iter()
            .any(|w| w.id == id),
        "removed itself from the registry"
    );
}

/// Time to result: the upstream is done 2 s after the first call; polls start at 250 ms.
/// The time is printed, not asserted (it is the simulator's 2 s plus at most one interval,
/// unless the machine is slow). What is asserted is the order the poll policy dictates: every
/// "processing" answer was followed by a poll scheduled after exactly the policy's interval for
/// that poll (within its jitter), the upstream was never called again after `done`, and the
/// stored result counts the polls the upstream saw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_to_result_follows_the_poll_policy() {
    init_tracing();
    let sim = start_sim(SimArgs::default()).await;
    let q = queue("ttr").await;
    let up = sim.upstream_args(5_000);
    for (label, multiplier) in [("fixed 250 ms", 1.0), ("250 ms x1.5 (default)", 1.5)] {
        let policy = PolicyArgs {
            poll_interval_ms: 250,
            poll_multiplier: multiplier,
            ..PolicyArgs::default()
        };
        let key = format!("ttr-{multiplier} ms=2000");
        q.enqueue(&key, "", &policy.enqueue_policy())
            .await
            .expect("enqueue");
        let w = spawn(worker(&q, &up, policy.clone(), fast_worker_args(4)));
        let t0 = Instant::now();
        let r = loop {
            if let Some(r) = q.result_by_id(&id_of(&key)).await.expect("read") {
                break r;
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "no result");
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        w.stop().await;
        let k = sim.key(&key).await;
        let ttr = r.completed_ms - r.created_ms;
        println!(
            "time to result ({label}): {ttr} ms for an upstream done after 2000 ms, {} polls \
             (bound 2000 + one interval)",
            k.calls
        );
        assert_eq!(k.done, 1, "never called again after done: {k:?}");
        assert!(k.calls >= 2, "processing at first: {k:?}");
        assert_eq!(u64::from(r.polls), k.calls - 1, "polls before done: {k:?}");

        let d = q.get(&id_of(&key)).await.expect("get").expect("detail");
        let polled: Vec<_> = d
            .history
            .iter()
            .rev()
            .filter(|h| h.kind == "polled")
            .collect();
        assert_eq!(polled.len() as u64, k.calls - 1, "{:?}", d.history);
        for (n, h) in polled.iter().enumerate() {
            let poll = u32::try_from(n + 1).expect("poll number");
            assert!(
                h.detail
                    .starts_with(&format!("still processing (poll {poll},")),
                "{h:?}"
            );
            let due: i64 = h
                .detail
                .rsplit("next poll at ")
                .next()
                .and_then(|t| t.parse().ok())
                .unwrap_or_else(|| panic!("no due time in {h:?}"));
            let interval = policy.poll_interval(poll).as_millis() as f64;
            let (lo, hi) = (
                interval * (1.0 - policy.poll_jitter) - 1.0,
                interval * (1.0 + policy.poll_jitter) + 1.0,
            );
            let delay = (due - h.at_ms) as f64;
            assert!(
                (lo..=hi).contains(&delay),
                "poll {poll}: next poll {delay} ms later, policy says {lo}..={hi}: {h:?}"
            );
        }
    }
}
