//! Worker life cycle: a worker abandoned mid-call is recovered by another after the lease;
//! a call longer than three leases renews its lease and is made once; graceful shutdown
//! releases in-flight leases after the grace period; heartbeats; and the poll policy's order
//! (with the time to result printed) for a 2 s upstream and a 250 ms first interval.

mod common;

use std::time::{Duration, Instant};

use common::*;
use sim::SimArgs;
use worker::{PolicyArgs, WorkerArgs};

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

/// A call slower than three leases keeps its lease by renewing it: with a second worker
/// watching the queue (and both reaping), the task is never re-claimed, the upstream is
/// called exactly once, and no `lease_expired` appears in the history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_call_renews_its_lease_and_is_called_once() {
    init_tracing();
    let sim = start_sim(SimArgs::default()).await;
    let q = queue("renew-long").await;
    let policy = fast_policy();
    let up = sim.upstream_args(30_000);
    let lease_ms = 1_500;
    // Done on the first call, which takes 3.5 leases.
    let key = format!("long polls=0 latency={}", lease_ms * 7 / 2);
    let id = id_of(&key);
    q.enqueue(&key, "", &policy.enqueue_policy())
        .await
        .expect("enqueue");
    let args = |id: &str| WorkerArgs {
        lease_ms,
        worker_id: Some(id.to_string()),
        ..fast_worker_args(4)
    };
    let a = spawn(worker(&q, &up, policy.clone(), args("renew-a")));
    let b = spawn(worker(&q, &up, policy, args("renew-b")));

    // While the call runs, the lease deadline moves on under the same token.
    let t0 = Instant::now();
    let first = loop {
        let t = q.get(&id).await.expect("get").and_then(|d| d.task);
        if let Some(t) = t.filter(|t| t.state == queue::TaskState::Leased) {
            break t;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "never claimed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let first_deadline = first.lease_deadline_ms.expect("leased: a deadline");
    loop {
        let t = q.get(&id).await.expect("get").and_then(|d| d.task);
        let Some(t) = t else {
            panic!("finished before any renewal was seen (call of 3.5 leases)")
        };
        assert_eq!(t.token, first.token, "re-claimed: {t:?}");
        if t.lease_deadline_ms.is_some_and(|d| d > first_deadline) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "lease never renewed"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    wait_settled(&q, 1, Duration::from_secs(60)).await;
    let ra = a.stop().await;
    let rb = b.stop().await;
    println!("long call: a {ra:?}; b {rb:?}");
    assert_eq!(ra.claimed + rb.claimed, 1, "claimed once: {ra:?} {rb:?}");
    assert_eq!(ra.completed + rb.completed, 1);
    assert_eq!(ra.stale + rb.stale, 0);
    // To outlive 3.5 leases without an expiry the lease had to be renewed more than once
    // (each renewal extends it by one lease from the moment it is made; even a reaper late
    // by a whole lease would have caught a lease renewed only once).
    assert!(
        ra.renewed + rb.renewed >= 2,
        "renewals counted: {ra:?} {rb:?}"
    );
    let k = sim.key(&key).await;
    assert_eq!((k.calls, k.done), (1, 1), "one upstream call: {k:?}");
    let d = q.get(&id).await.expect("get").expect("detail");
    assert!(d.result.is_some());
    assert_eq!(
        kinds(&d.history),
        ["enqueued", "claimed", "completed"],
        "no lease_expired: {:?}",
        d.history
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_releases_in_flight_leases_within_grace() {
    init_tracing();
    let sim = start_sim(SimArgs::default()).await;
    let q = queue("shutdown").await;
    let policy = fast_policy();
    let up = sim.upstream_args(30_000);
    let hanging = ["sd-1 fail=hang", "sd-2 fail=hang"];
    // Quick next to the grace period (200 ms vs 2 s): they finish within it.
    let quick = ["sd-3 latency=200 polls=1", "sd-4 latency=200 polls=1"];
    for k in hanging.iter().chain(&quick) {
        q.enqueue(k, "", &policy.enqueue_policy())
            .await
            .expect("enqueue");
    }
    let grace = Duration::from_millis(2_000);
    let args = WorkerArgs {
        lease_ms: 10_000,
        grace_ms: 2_000,
        ..fast_worker_args(4)
    };
    let w = worker(&q, &up, policy, args);
    let id = w.id().to_string();
    let running = spawn(w);
    let t0 = Instant::now();
    while sim.stats().await.calls < 4 {
        assert!(t0.elapsed() < Duration::from_secs(10), "not all called");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        q.workers()
            .await
            .expect("workers")
            .iter()
            .any(|w| w.id == id),
        "heartbeat registered"
    );

    let asked = Instant::now();
    let report = running.stop().await;
    let took = asked.elapsed();
    println!("shutdown took {took:?} (grace {grace:?}): {report:?}");
    // The hanging calls were given the whole grace period before their leases were released
    // (a lower bound the worker itself enforces; how much longer it took is not asserted).
    assert!(took >= grace, "waited for the grace period: {took:?}");
    assert_eq!(report.released, 2, "{report:?}");
    assert_eq!(report.completed, 2, "quick calls finished within grace");
    let s = q.stats().await.expect("stats");
    assert_eq!((s.leased, s.ready, s.results), (0, 2, 2), "{s:?}");
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
