//! The queue-wide upstream rate limit, across two worker processes' worth of workers: the
//! simulator (the upstream) never sees more than `per_sec` calls a second plus the burst, and
//! every task still completes exactly once.

mod common;

use std::time::{Duration, Instant};

use common::*;
use sim::SimArgs;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_share_one_upstream_rate_limit() {
    init_tracing();
    let prom = worker::install_prometheus();
    let sim = start_sim(SimArgs::default()).await;
    let q = queue("ratelimit").await;
    let policy = fast_policy();
    let (per_sec, burst, n) = (20u32, 5u32, 45u64);
    let mut up = sim.upstream_args(5_000);
    up.upstream_rate_per_sec = per_sec;
    up.upstream_rate_burst = burst;

    // Done on the first call: every call is one task, so calls = n if nothing runs twice.
    let keys: Vec<String> = (0..n).map(|i| format!("rate-{i} polls=1")).collect();
    for k in &keys {
        q.enqueue(k, "", &policy.enqueue_policy()).await.unwrap();
    }
    let t0 = Instant::now();
    // 2 x 16 slots: without the limit all 45 calls would go out within milliseconds.
    let a = spawn(worker(&q, &up, policy.clone(), fast_worker_args(16)));
    let b = spawn(worker(&q, &up, policy.clone(), fast_worker_args(16)));

    // Sample the upstream's call counter while the tasks flow: each sample keeps the time
    // just before the read was sent and just after the answer came, so the true moment of the
    // count lies between them, however long the read took.
    let mut samples: Vec<(Instant, u64, Instant)> = Vec::new();
    loop {
        let before = Instant::now();
        let calls = sim.stats().await.calls;
        samples.push((before, calls, Instant::now()));
        if calls >= n || t0.elapsed() > Duration::from_secs(30) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stats = wait_settled(&q, n, Duration::from_secs(30)).await;
    let elapsed = t0.elapsed();
    let (ra, rb) = (a.stop().await, b.stop().await);
    println!(
        "{n} calls at {per_sec}/s (burst {burst}) through 2 workers took {elapsed:.2?} \
         (at least {:.2} s by the limit)",
        (n - u64::from(burst)) as f64 / f64::from(per_sec)
    );
    assert_eq!(stats.results, n, "{stats:?}");
    assert_eq!(ra.completed + rb.completed, n);
    assert_eq!(sim.stats().await.calls, n, "a task was called twice");

    // The limit held: n calls cannot finish before (n - burst) / per_sec seconds...
    let floor = Duration::from_millis((n - u64::from(burst)) * 1000 / u64::from(per_sec));
    assert!(
        elapsed >= floor - Duration::from_millis(100),
        "{elapsed:?} < {floor:?}"
    );
    // ... and no window between two samples saw more than per_sec x its length + burst
    // (+1 for a call counted at the edge of a sample). The window's length is taken at its
    // widest (from before the first read to after the second), so a stalled test process can
    // only make the bound looser, never fail it: what is asserted is the limit, not a speed.
    for (i, (ti, ci, _)) in samples.iter().enumerate() {
        for (_, cj, tj) in &samples[i + 1..] {
            let secs = tj.duration_since(*ti).as_secs_f64();
            let allowed = (f64::from(per_sec) * secs).ceil() as u64 + u64::from(burst) + 1;
            assert!(cj - ci <= allowed, "{} calls in {secs:.2} s", cj - ci);
        }
    }
    // Both workers took part, and the refusals are counted: the counter is registered at 0
    // when a worker starts, so what is asserted is its value. 32 slots asked for 45 calls
    // with 5 tokens: the calls beyond the burst had to wait, each wait counted once per
    // refusal (this binary runs no other worker, so every refusal is this test's).
    assert!(ra.completed > 0 && rb.completed > 0, "{ra:?} {rb:?}");
    let page = prom.render();
    let series = "repoll_upstream_rate_limited_total{upstream=\"default\"}";
    let refused: f64 = page
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.trim().parse().expect("a number"))
        .unwrap_or_else(|| panic!("no {series} in {page}"));
    println!("{refused} refusals counted");
    assert!(
        refused > 0.0,
        "no refusal counted for {n} calls at {per_sec}/s (burst {burst}): {page}"
    );
}
