//! Worker life cycle: a worker abandoned mid-call is recovered by another after the lease;
//! graceful shutdown releases in-flight leases within the grace period; heartbeats; and the
//! measured time to result with a 2 s upstream and a 250 ms first interval.

mod common;

use std::time::{Duration, Instant};

use common::*;
use sim::SimArgs;
use worker::{PolicyArgs, WorkerArgs};

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
    let args = WorkerArgs {
        lease_ms: 600,
        ..fast_worker_args(4)
    };

    let a = spawn(worker(&q, &up, policy.clone(), args.clone()));
    let t0 = Instant::now();
    while sim.key(key).await.calls < 1 {
        assert!(t0.elapsed() < Duration::from_secs(10), "never called");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Let it renew its lease at least once, then kill it: no release, no write, nothing.
    tokio::time::sleep(Duration::from_millis(300)).await;
    a.handle.abort();
    let _ = a.handle.await;
    let killed = Instant::now();
    assert_eq!(
        q.stats().await.expect("stats").leased,
        1,
        "still leased by the dead worker"
    );

    let b = spawn(worker(&q, &up, policy, args));
    wait_settled(&q, 1, Duration::from_secs(20)).await;
    let recovered = killed.elapsed();
    let rb = b.stop().await;
    println!("abandoned task recovered and completed {recovered:?} after the kill (lease 600 ms)");
    assert_eq!(rb.completed, 1);
    let k = sim.key(key).await;
    assert_eq!((k.calls, k.done), (2, 1), "{k:?}");
    assert!(q.result_by_id(&id_of(key)).await.expect("read").is_some());
    let hist = q
        .get(&id_of(key))
        .await
        .expect("get")
        .expect("detail")
        .history;
    println!("history: {hist:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_releases_in_flight_leases_within_grace() {
    init_tracing();
    let sim = start_sim(SimArgs::default()).await;
    let q = queue("shutdown").await;
    let policy = fast_policy();
    let up = sim.upstream_args(30_000);
    let hanging = ["sd-1 fail=hang", "sd-2 fail=hang"];
    let quick = ["sd-3 latency=200 polls=1", "sd-4 latency=200 polls=1"];
    for k in hanging.iter().chain(&quick) {
        q.enqueue(k, "", &policy.enqueue_policy())
            .await
            .expect("enqueue");
    }
    let grace = Duration::from_millis(700);
    let args = WorkerArgs {
        lease_ms: 10_000,
        grace_ms: 700,
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
    assert!(took >= grace, "waited for the grace period: {took:?}");
    assert!(took < grace + Duration::from_millis(1_500), "{took:?}");
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
/// Measured and printed (enqueue to stored result, Redis time), not asserted tightly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_to_result_is_measured() {
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
        let w = spawn(worker(&q, &up, policy, fast_worker_args(4)));
        let t0 = Instant::now();
        let r = loop {
            if let Some(r) = q.result_by_id(&id_of(&key)).await.expect("read") {
                break r;
            }
            assert!(t0.elapsed() < Duration::from_secs(15), "no result");
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        w.stop().await;
        let ttr = r.completed_ms - r.created_ms;
        println!(
            "time to result ({label}): {ttr} ms for an upstream done after 2000 ms, {} polls \
             (bound 2000 + one interval)",
            sim.key(&key).await.calls
        );
        assert!(ttr >= 2_000, "cannot beat the upstream: {ttr}");
    }
}
