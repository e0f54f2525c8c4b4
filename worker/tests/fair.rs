//! Fair shares seen from a real worker and a real HTTP upstream (the simulator, 20 ms a call):
//! tenant A floods one upstream with 5,000 queries, then tenant B asks 20; with 8 slots, B's
//! p95 time to final stays within 3x of what it is when B is alone, because claims go round
//! the tenants with ready work (prelude.lua, "Fair shares") instead of first come, first served
//! (where B would wait behind A's whole backlog: 15,000 calls, over 35 s at this pace).

mod common;

use std::time::{Duration, Instant};

use common::*;
use queue::{EnqueuePolicy, Queue, QueueConfig};
use sim::SimArgs;

const SLOTS: usize = 8;
const B_TASKS: usize = 20;
const A_TASKS: usize = 5_000;

fn of(tenant: &str, policy: &worker::PolicyArgs) -> EnqueuePolicy {
    EnqueuePolicy {
        tenant: tenant.to_string(),
        ..policy.enqueue_policy()
    }
}

/// Enqueues `n` queries `<label> query <i>` of `tenant` (one pipeline per thousand); their ids.
async fn flood(
    q: &Queue,
    label: &str,
    tenant: &str,
    n: usize,
    policy: &worker::PolicyArgs,
) -> Vec<String> {
    let texts: Vec<String> = (0..n).map(|i| format!("{label} query {i}")).collect();
    let items: Vec<(&str, &str)> = texts.iter().map(|t| (t.as_str(), "")).collect();
    let mut ids = Vec::with_capacity(n);
    for r in q
        .enqueue_many(&items, &of(tenant, policy))
        .await
        .expect("enqueue")
    {
        match r.expect("enqueued") {
            queue::Enqueued::Created(t) => ids.push(t.id.to_string()),
            other => panic!("not created: {other:?}"),
        }
    }
    ids
}

/// Waits until every id has its stored result; each one's time to final (created ->
/// completed, both Redis time), in ms, sorted.
async fn times_to_final(q: &Queue, ids: &[String], limit: Duration) -> Vec<i64> {
    let t0 = Instant::now();
    loop {
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            match q.result_by_id(id).await.expect("read result") {
                Some(r) => out.push(r.completed_ms - r.created_ms),
                None => break,
            }
        }
        if out.len() == ids.len() {
            out.sort_unstable();
            return out;
        }
        assert!(
            t0.elapsed() < limit,
            "only {} of {} final after {limit:?}",
            out.len(),
            ids.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn p95(sorted: &[i64]) -> i64 {
    let rank = (sorted.len() * 95).div_ceil(100).max(1);
    sorted[rank - 1]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_tenant_keeps_its_pace_beside_a_flood() {
    init_tracing();
    let sim = start_sim(SimArgs {
        latency_ms: 20,
        ..SimArgs::default()
    })
    .await;
    let up = sim.upstream_args(10_000);
    let policy = fast_policy();
    let url = redis_url();
    let connect = |name: &str| {
        Queue::connect(
            &url,
            QueueConfig {
                name: name.to_string(),
                ..QueueConfig::default()
            },
        )
    };

    // B alone (after one warm-up query, so the worker's start is not counted).
    let alone = connect("fair-alone").await.expect("queue");
    let w = spawn(worker(&alone, &up, policy.clone(), fast_worker_args(SLOTS)));
    let warm = flood(&alone, "warm", "b", 1, &policy).await;
    times_to_final(&alone, &warm, Duration::from_secs(30)).await;
    let ids = flood(&alone, "b", "b", B_TASKS, &policy).await;
    let t_alone = times_to_final(&alone, &ids, Duration::from_secs(30)).await;
    w.stop().await;

    // A floods first, then B asks.
    let loaded = connect("fair-loaded").await.expect("queue");
    let w = spawn(worker(
        &loaded,
        &up,
        policy.clone(),
        fast_worker_args(SLOTS),
    ));
    let warm = flood(&loaded, "warm", "b", 1, &policy).await;
    times_to_final(&loaded, &warm, Duration::from_secs(30)).await;
    flood(&loaded, "a", "a", A_TASKS, &policy).await;
    let ids = flood(&loaded, "b", "b", B_TASKS, &policy).await;
    let t_loaded = times_to_final(&loaded, &ids, Duration::from_secs(60)).await;
    let left = loaded.stats().await.expect("stats");
    w.stop().await;

    let (alone_p95, loaded_p95) = (p95(&t_alone), p95(&t_loaded));
    eprintln!(
        "fairness: B's p95 time to final alone {alone_p95} ms, beside A's {A_TASKS} {loaded_p95} ms \
         ({:.2}x); A still had {} ready, {} waiting when B was done",
        loaded_p95 as f64 / alone_p95.max(1) as f64,
        left.ready,
        left.waiting
    );
    // A's flood was still there: the comparison means something only if B overtook it.
    assert!(
        left.ready + left.waiting + left.leased > 1_000,
        "A's backlog drained before B finished: {left:?}"
    );
    assert!(
        loaded_p95 <= 3 * alone_p95.max(50),
        "B's p95 beside the flood {loaded_p95} ms is over 3x alone ({alone_p95} ms): {t_loaded:?}"
    );

    // The control: the same flood without tenants is first come, first served, so B is still
    // waiting long after the time it took with fair shares.
    let fifo = connect("fair-fifo").await.expect("queue");
    let w = spawn(worker(&fifo, &up, policy.clone(), fast_worker_args(SLOTS)));
    flood(&fifo, "a", "", A_TASKS, &policy).await;
    let ids = flood(&fifo, "b", "", B_TASKS, &policy).await;
    let wait = Duration::from_millis(u64::try_from(3 * loaded_p95).unwrap_or(1000).max(1000));
    tokio::time::sleep(wait).await;
    let mut done = 0;
    for id in &ids {
        if fifo.result_by_id(id).await.expect("read").is_some() {
            done += 1;
        }
    }
    w.stop().await;
    eprintln!(
        "fairness control: without tenants {done} of B's {B_TASKS} were final after {wait:?}"
    );
    assert!(
        done < B_TASKS,
        "without tenants B finished anyway: the test would not see unfairness"
    );
}
