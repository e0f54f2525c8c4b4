//! 1,000 keys with varied `polls=` all complete; the simulator's stats prove each key answered
//! `done` exactly once and was polled exactly as often as it needed (never more than the poll
//! policy allows). Two workers share the queue, so exactly-once holds across workers.

mod common;

use std::time::{Duration, Instant};

use common::*;
use sim::SimArgs;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousand_keys_complete_exactly_once() {
    init_tracing();
    let prom = worker::install_prometheus();
    let sim = start_sim(SimArgs::default()).await;
    let q = queue("complete1k").await;
    let policy = fast_policy();
    let up = sim.upstream_args(5_000);

    let n = 1_000u64;
    let keys: Vec<String> = (0..n)
        .map(|i| format!("key-{i} polls={}", 1 + i % 5))
        .collect();
    let t0 = Instant::now();
    for k in &keys {
        q.enqueue(k, "", &policy.enqueue_policy())
            .await
            .expect("enqueue");
    }
    let a = spawn(worker(&q, &up, policy.clone(), fast_worker_args(32)));
    let b = spawn(worker(&q, &up, policy.clone(), fast_worker_args(32)));

    let stats = wait_settled(&q, n, Duration::from_secs(60)).await;
    let elapsed = t0.elapsed();
    let ra = a.stop().await;
    let rb = b.stop().await;
    println!(
        "1,000 keys (polls 1..=5, first interval 20 ms) done in {:.2?}: {:.0} tasks/s; \
         worker a {ra:?}; worker b {rb:?}",
        elapsed,
        n as f64 / elapsed.as_secs_f64()
    );
    assert_eq!(stats.results, n, "{stats:?}");
    assert_eq!(stats.dead, 0, "{stats:?}");
    assert_eq!(ra.completed + rb.completed, n);
    assert_eq!(ra.stale + rb.stale, 0);

    let witness = sim.stats().await;
    assert_eq!(witness.keys.len(), keys.len());
    for (i, k) in keys.iter().enumerate() {
        let polls = 1 + i as u64 % 5;
        let s = witness
            .keys
            .get(k)
            .unwrap_or_else(|| panic!("{k} never polled"));
        assert_eq!(s.done, 1, "{k}: {s:?}");
        assert_eq!(s.calls, polls, "{k}: {s:?}");
    }
    let total_polls: u64 = (0..n).map(|i| 1 + i % 5).sum();
    assert_eq!(witness.calls, total_polls);

    // The stored result is the upstream's full data.
    let r = q
        .result_by_id(&id_of(&keys[7]))
        .await
        .expect("read")
        .expect("stored");
    let data: serde_json::Value = serde_json::from_str(&r.data).expect("json");
    assert_eq!(data["progress"], 1.0);
    assert_eq!(data["items"].as_array().map(Vec::len), Some(5));
    assert_eq!(r.polls, 2, "3 calls = 2 processing polls, then done");

    // The metrics agree with the reports (this binary runs no other worker).
    let page = prom.render();
    let value = |name: &str| -> f64 {
        page.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .map_or(0.0, |v| v.trim().parse().expect("a number"))
    };
    // Every series carries its worker's upstream.
    assert_eq!(
        value("repoll_completions_total{upstream=\"default\"}"),
        n as f64,
        "{page}"
    );
    assert_eq!(
        value("repoll_claims_total{upstream=\"default\"}"),
        (ra.claimed + rb.claimed) as f64,
        "{page}"
    );
    assert_eq!(
        value("repoll_stale_tokens_total{upstream=\"default\"}"),
        0.0,
        "{page}"
    );
    // One latency observation per upstream call.
    assert_eq!(
        value("repoll_upstream_latency_seconds_count{outcome=\"done\",upstream=\"default\"}"),
        n as f64,
        "{page}"
    );
    assert_eq!(
        value("repoll_upstream_latency_seconds_count{outcome=\"processing\",upstream=\"default\"}"),
        (total_polls - n) as f64,
        "{page}"
    );
}
