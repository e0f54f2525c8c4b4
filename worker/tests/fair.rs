//! Fair shares seen from a real worker and a real HTTP upstream (the simulator, 20 ms a call):
//! tenant A floods one upstream with 5,000 queries, then tenant B asks 20; with 8 slots, B's
//! 20 all reach final while the upstream makes a few dozen calls for A, because claims go
//! round the tenants with ready work (queue/lua/prelude/fair.lua) instead of first come, first
//! served (where B would wait behind the first calls of A's 5,000). The control, the same flood
//! without tenants, serves A's backlog first: B has not been called once while A has been
//! called hundreds of times. What is asserted is an order (whose work is done before whose);
//! B's p95 time to final, alone and beside the flood, is printed only (a speed).

use crate::common;

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

/// Waits until every id has its stored result; the results.
async fn finals(q: &Queue, ids: &[String], limit: Duration) -> Vec<queue::StoredResult> {
    let t0 = Instant::now();
    loop {
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            match q.result_by_id(id).await.expect("read result") {
                Some(r) => out.push(r),
                None => break,
            }
        }
        if out.len() == ids.len() {
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

/// Each result's time to final (created -> completed, both Redis time), in ms, sorted.
fn times_to_final(results: &[queue::StoredResult]) -> Vec<i64> {
    let mut t: Vec<i64> = results
        .iter()
        .map(|r| r.completed_ms - r.created_ms)
        .collect();
    t.sort_unstable();
    t
}

fn p95(sorted: &[i64]) -> i64 {
    let rank = (sorted.len() * 95).div_ceil(100).max(1);
    sorted[rank - 1]
}

/// The simulator at 20 ms a call.
async fn sim_of_20_ms() -> SimServer {
    start_sim(SimArgs {
        latency_ms: 20,
        ..SimArgs::default()
    })
    .await
}

async fn connect(name: &str) -> Queue {
    Queue::connect(
        &redis_url(),
        QueueConfig {
            name: name.to_string(),
            ..QueueConfig::default()
        },
    )
    .await
    .expect("queue")
}

/// B alone (after one warm-up query, so the worker's start is not counted): the printed
/// reference for B's time to final. B's times to final, sorted.
async fn b_times_to_final_alone(
    up: &worker::UpstreamArgs,
    policy: &worker::PolicyArgs,
) -> Vec<i64> {
    let alone = connect("fair-alone").await;
    let w = spawn(worker(&alone, up, policy.clone(), fast_worker_args(SLOTS)));
    let warm = flood(&alone, "warm", "b", 1, policy).await;
    finals(&alone, &warm, Duration::from_secs(30)).await;
    let ids = flood(&alone, "b", "b", B_TASKS, policy).await;
    let t_alone = times_to_final(&finals(&alone, &ids, Duration::from_secs(30)).await);
    w.stop().await;
    t_alone
}

/// The upstream's calls for A from `from` to `to` (ms since the epoch), and in all, from the
/// simulator's record of each call's time (the clock Redis time is read from on this machine).
async fn a_calls_within(sim: &SimServer, from: i64, to: i64) -> (usize, usize) {
    let mut a_calls_in_b_life = 0;
    let mut a_calls = 0;
    for (key, k) in sim.stats().await.keys {
        if !key.starts_with("a query ") || k.calls == 0 {
            continue;
        }
        let times = sim.key(&key).await.call_ms;
        a_calls += times.len();
        a_calls_in_b_life += times.iter().filter(|t| **t >= from && **t <= to).count();
    }
    (a_calls_in_b_life, a_calls)
}

/// The control: the same flood without tenants is first come, first served. Both are
/// asked before the worker starts, so A's 5,000 are all ahead of B; B is not called once
/// while A's first hundreds of calls go out (with fair shares B would have half of them).
async fn without_tenants_b_waits_behind_the_flood(policy: &worker::PolicyArgs) {
    let fifo_sim = sim_of_20_ms().await;
    let fifo_up = fifo_sim.upstream_args(10_000);
    let fifo = connect("fair-fifo").await;
    flood(&fifo, "a", "", A_TASKS, policy).await;
    flood(&fifo, "b", "", B_TASKS, policy).await;
    let w = spawn(worker(
        &fifo,
        &fifo_up,
        policy.clone(),
        fast_worker_args(SLOTS),
    ));
    let t0 = Instant::now();
    let seen = loop {
        let st = fifo_sim.stats().await;
        if st.calls >= 25 * SLOTS as u64 {
            break st;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the control's worker made {} calls",
            st.calls
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    w.stop().await;
    let b_calls: u64 = seen
        .keys
        .iter()
        .filter(|(k, _)| k.starts_with("b query "))
        .map(|(_, s)| s.calls)
        .sum();
    eprintln!(
        "fairness control: without tenants B had {b_calls} calls when the upstream had seen {}",
        seen.calls
    );
    assert_eq!(
        b_calls, 0,
        "without tenants B was called among A's first {} calls: the control would not show \
         unfairness",
        seen.calls
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_tenant_keeps_its_pace_beside_a_flood() {
    init_tracing();
    let sim = sim_of_20_ms().await;
    let up = sim.upstream_args(10_000);
    let policy = fast_policy();

    let t_alone = b_times_to_final_alone(&up, &policy).await;

    // A floods first, then B asks.
    let loaded = connect("fair-loaded").await;
    let w = spawn(worker(
        &loaded,
        &up,
        policy.clone(),
        fast_worker_args(SLOTS),
    ));
    let warm = flood(&loaded, "warm", "b", 1, &policy).await;
    finals(&loaded, &warm, Duration::from_secs(30)).await;
    flood(&loaded, "a", "a", A_TASKS, &policy).await;
    let ids = flood(&loaded, "b", "b", B_TASKS, &policy).await;
    // First come, first served, B would wait behind A's 15,000 calls: over 35 s at this pace.
    let b_results = finals(&loaded, &ids, Duration::from_secs(90)).await;
    w.stop().await;
    let b_asked = b_results.iter().map(|r| r.created_ms).min().expect("B");
    let b_last = b_results.iter().map(|r| r.completed_ms).max().expect("B");
    // The upstream's calls for A while B had work (from B's first ask to B's last result).
    let (a_calls_in_b_life, a_calls) = a_calls_within(&sim, b_asked, b_last).await;
    let t_loaded = times_to_final(&b_results);
    let (alone_p95, loaded_p95) = (p95(&t_alone), p95(&t_loaded));
    eprintln!(
        "fairness: B's p95 time to final alone {alone_p95} ms, beside A's {A_TASKS} {loaded_p95} ms \
         ({:.2}x); {a_calls_in_b_life} calls for A while B's {B_TASKS} were in the queue \
         ({a_calls} by the time the worker stopped)",
        loaded_p95 as f64 / alone_p95.max(1) as f64,
    );
    // B overtook A's backlog: while B's 20 went through (3 calls each, claims alternating
    // between the tenants), A's calls were of the same order, nowhere near the 5,000 first
    // calls of A's backlog that first come, first served would make before B's first.
    assert!(
        a_calls_in_b_life <= A_TASKS / 10,
        "{a_calls_in_b_life} calls for A while B's {B_TASKS} were in the queue: B waited behind \
         A's backlog"
    );

    without_tenants_b_waits_behind_the_flood(&policy).await;
}
