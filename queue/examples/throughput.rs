//! Claim+complete throughput against a private redis-server (spawned here, on a free port).
//!
//! `cargo run --release -p queue --example throughput [N] [WORKERS] [BATCH]`
//!
//! 1. enqueues N tasks (pipelined: many enqueue scripts in flight on one connection);
//! 2. batched: WORKERS concurrent workers each loop claim(BATCH) + complete_many(batch);
//! 3. unbatched: one worker, claim(1) then complete, one after the other.
//!
//! Script calls (EVALSHA, each one round trip) are counted from the server's INFO commandstats.

#[path = "../tests/common/mod.rs"]
mod common;

use futures::future::join_all;
use queue::{Completion, EnqueuePolicy, Queue};
use std::time::Instant;

/// (script calls, microseconds Redis spent inside them) so far.
async fn evalsha_calls(q: &Queue) -> (u64, u64) {
    let mut c = q.connection();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut c)
        .await
        .unwrap_or_default();
    let mut total = 0;
    let mut usec = 0;
    for line in info.lines() {
        // script calls only (commands run inside scripts are counted separately by Redis)
        if line.starts_with("cmdstat_evalsha:") || line.starts_with("cmdstat_evalsha_ro:") {
            let field = |name: &str| {
                line.split(name)
                    .nth(1)
                    .and_then(|r| r.split(',').next())
                    .and_then(|n| n.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            total += field("calls=");
            usec += field("usec=");
        }
    }
    (total, usec)
}

async fn enqueue_all(q: &Queue, prefix: &str, n: usize) -> f64 {
    let t0 = Instant::now();
    let policy = EnqueuePolicy::default();
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let futs = chunk.iter().map(|i| {
            let q = q.clone();
            let p = policy.clone();
            async move { q.enqueue(&format!("{prefix} {i}"), "payload", &p).await }
        });
        for r in join_all(futs).await {
            r.expect("enqueue");
        }
    }
    n as f64 / t0.elapsed().as_secs_f64()
}

#[tokio::main]
async fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let n = args.first().copied().unwrap_or(100_000);
    let workers = args.get(1).copied().unwrap_or(4);
    let batch = args.get(2).copied().unwrap_or(100);
    let single_n = (n / 5).max(1);

    let server = common::spawn_redis();
    let q = Queue::connect(&server.url(), common::cfg("bench"))
        .await
        .expect("connect");
    println!(
        "redis-server on port {}, {n} tasks, {workers} workers, batch {batch}",
        server.port
    );

    let rate = enqueue_all(&q, "bench", n).await;
    println!("enqueue (pipelined):          {rate:>9.0} tasks/s");

    // batched claim + complete
    let calls0 = evalsha_calls(&q).await;
    let t0 = Instant::now();
    let mut hs = Vec::new();
    for w in 0..workers {
        let q = q.clone();
        hs.push(tokio::spawn(async move {
            let me = format!("w{w}");
            let mut done = 0usize;
            let mut batches = 0usize;
            loop {
                let got = q.claim(&me, batch, 30_000).await.expect("claim");
                if got.is_empty() {
                    break;
                }
                batches += 1;
                let items: Vec<Completion> = got
                    .iter()
                    .map(|c| Completion {
                        id: c.id.clone(),
                        token: c.token,
                        result: "result".into(),
                        latency_ms: 1,
                    })
                    .collect();
                for r in q.complete_many(&items).await.expect("complete_many") {
                    r.expect("complete");
                }
                done += got.len();
            }
            (done, batches)
        }));
    }
    let mut done = 0;
    let mut batches = 0;
    for h in hs {
        let (d, b) = h.await.expect("worker");
        done += d;
        batches += b;
    }
    let secs = t0.elapsed().as_secs_f64();
    let (c1, u1) = evalsha_calls(&q).await;
    let (calls, usec) = (c1 - calls0.0, u1 - calls0.1);
    println!(
        "batched claim+complete:       {:>9.0} tasks/s  ({done} tasks in {secs:.2} s, {batches} batches)",
        done as f64 / secs
    );
    println!(
        "  script calls (= round trips) per task: {:.3}  (per batch: peek + claim + complete_many)",
        calls as f64 / done as f64,
    );
    let per = usec as f64 / done as f64;
    println!(
        "  redis time inside scripts: {per:.1} us/task -> ceiling {:.0} tasks/s on one idle Redis core",
        1e6 / per
    );

    // unbatched: one claim(1) + one complete per task, sequential
    enqueue_all(&q, "single", single_n).await;
    let calls0 = evalsha_calls(&q).await;
    let t0 = Instant::now();
    let mut done1 = 0;
    loop {
        let got = q.claim("solo", 1, 30_000).await.expect("claim");
        let Some(c) = got.first() else { break };
        q.complete(&c.id, c.token, "result", 1)
            .await
            .expect("complete");
        done1 += 1;
    }
    let secs = t0.elapsed().as_secs_f64();
    let (c1, u1) = evalsha_calls(&q).await;
    let (calls, usec) = (c1 - calls0.0, u1 - calls0.1);
    println!(
        "unbatched claim(1)+complete:  {:>9.0} tasks/s  ({done1} tasks, {:.2} script calls = round trips per task, {:.1} us/task inside Redis)",
        done1 as f64 / secs,
        calls as f64 / done1 as f64,
        usec as f64 / done1 as f64
    );
    if std::env::var_os("BENCH_CMDSTATS").is_some() {
        let mut c = q.connection();
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut c)
            .await
            .unwrap_or_default();
        println!("{info}");
    }
    let s = q.stats().await.expect("stats");
    assert_eq!(s.results as usize, done + done1);
}
