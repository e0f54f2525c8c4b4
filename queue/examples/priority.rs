//! How long a person waits behind a background backlog: the p95 time from enqueue to claim of
//! interactive tasks arriving at a steady rate while `BACKLOG` background tasks are queued,
//! with `WORKERS` slots going from task to task (`complete_and_claim`, one call per task, as
//! the worker runtime does). Public queue API only, on a private redis-server.
//!
//! `cargo run --release -p queue --example priority [BACKLOG=50000] [INTERACTIVE=1000] [RATE=200] [WORKERS=8]`
//!
//! Waits are measured on Redis's clock: enqueue time is the task's `created_ms`, claim time its
//! lease deadline minus the lease. The background share (every tenth claim while both wait)
//! is also reported: background tasks claimed while interactive ones were being served.
//!
//! Machine-readable, for scripts/bench: `RESULT peer=repoll phase=priority p95_wait_ms= ...`

#[path = "../tests/common/mod.rs"]
mod common;

use queue::{Completion, EnqueuePolicy, Priority, Queue, QueueConfig};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Mutex;

const LEASE_MS: u64 = 60_000;

fn arg(i: usize, default: usize) -> usize {
    std::env::args()
        .nth(i)
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

#[tokio::main]
async fn main() {
    let backlog = arg(1, 50_000);
    let interactive = arg(2, 1_000);
    let rate = arg(3, 200).max(1);
    let workers = arg(4, 8).max(1);
    let server = common::spawn_redis();
    let q = Queue::connect(
        &server.url(),
        QueueConfig {
            name: "prio".into(),
            ..QueueConfig::default()
        },
    )
    .await
    .expect("connect");
    let bg = EnqueuePolicy {
        priority: Priority::Background,
        ..EnqueuePolicy::default()
    };
    // The backlog, pipelined by the multiplexed connection.
    for chunk in (0..backlog).collect::<Vec<_>>().chunks(1000) {
        let names: Vec<String> = chunk
            .iter()
            .map(|i| format!("background refresh #{i:06}"))
            .collect();
        let futs = names.iter().map(|n| q.enqueue(n, "", &bg));
        for r in futures::future::join_all(futs).await {
            r.expect("enqueue");
        }
    }
    eprintln!("{backlog} background tasks queued; {interactive} interactive at {rate}/s into {workers} slots");

    let waits = Arc::new(Mutex::new(Vec::<i64>::new()));
    let bg_claims = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut slots = Vec::new();
    for w in 0..workers {
        let (q, waits, bg_claims, stop) =
            (q.clone(), waits.clone(), bg_claims.clone(), stop.clone());
        slots.push(tokio::spawn(async move {
            let worker = format!("w{w}");
            let mut cur = q.claim(&worker, 1, LEASE_MS).await.expect("claim").pop();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let Some(c) = cur.take() else {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    cur = q.claim(&worker, 1, LEASE_MS).await.expect("claim").pop();
                    continue;
                };
                let claimed_at = c.lease_deadline_ms - LEASE_MS as i64;
                if c.query.starts_with("person") {
                    waits.lock().await.push(claimed_at - c.created_ms);
                } else {
                    bg_claims.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                // An upstream call of ~2 ms, then the completion that brings the next task.
                tokio::time::sleep(Duration::from_millis(2)).await;
                let item = [Completion {
                    id: c.id,
                    token: c.token,
                    result: "{}".into(),
                    latency_ms: 2,
                }];
                let (_, next) = q
                    .complete_and_claim(&item, &worker, 1, LEASE_MS)
                    .await
                    .expect("complete");
                cur = next.into_iter().next();
            }
        }));
    }
    let gap = Duration::from_secs_f64(1.0 / rate as f64);
    let mut tick = tokio::time::interval(gap);
    for i in 0..interactive {
        tick.tick().await;
        q.enqueue(
            &format!("person waiting #{i:06}"),
            "",
            &EnqueuePolicy::default(),
        )
        .await
        .expect("enqueue");
    }
    // Let the last interactive tasks be claimed.
    for _ in 0..10_000 {
        if waits.lock().await.len() >= interactive {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let served_bg = bg_claims.load(std::sync::atomic::Ordering::Relaxed);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for s in slots {
        let _ = s.await;
    }
    let mut w = waits.lock().await.clone();
    w.sort_unstable();
    let pct = |p: f64| {
        w.get(((w.len() as f64 * p).ceil() as usize).saturating_sub(1))
            .copied()
            .unwrap_or(-1)
    };
    println!(
        "interactive waits (ms): p50 {} p95 {} p99 {} max {} over {}; background tasks claimed meanwhile: {served_bg}",
        pct(0.5),
        pct(0.95),
        pct(0.99),
        w.last().copied().unwrap_or(-1),
        w.len()
    );
    println!(
        "RESULT peer=repoll phase=priority backlog={backlog} n={} p95_wait_ms={} p50_wait_ms={} bg_claimed={served_bg}",
        w.len(),
        pct(0.95),
        pct(0.5)
    );
}
