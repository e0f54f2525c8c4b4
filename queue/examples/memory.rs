//! Redis memory per task in each state, through the public queue API only, each state on a
//! fresh private redis-server (spawned here, on a free port, as the tests do).
//!
//! `cargo run --release -p queue --example memory [N=10000]`
//!
//! States (the BullMQ peer, `bench/bullmq/memory.mjs`, builds the same ones):
//! - `ready`:   N × `enqueue` (payload "", as the app enqueues);
//! - `delayed`: N × enqueue, `claim`, `reschedule` with an 80-byte partial and a 1 h delay
//!   (a task waiting for its next poll);
//! - `result`:  N × enqueue, `claim`, `complete` with a 129-byte result (kept for
//!   `result_ttl_ms`, 24 h by default).
//!
//! Queries are 33–38 characters (`bench memory query #000123 abcdef…`, the same generator as
//! the peer's). Before each measurement one warm-up task goes the same way (scripts loaded,
//! per-queue keys such as counters and the event stream created), so the figure is the
//! marginal cost of a task. Memory is `INFO memory` `used_memory` after − before, divided by
//! N; it includes the share of the queue's capped event stream that the N tasks fill
//! (`events_cap`, 10,000 entries by default, as BullMQ's event stream). Each state also prints
//! a breakdown by key pattern (`MEMORY USAGE key SAMPLES 0` of every key, ids as `<id>`).
//!
//! Machine-readable, for scripts/bench:
//! `RESULT peer=repoll phase=mem_ready|mem_delayed|mem_result n= bytes= data_bytes=`

#[path = "../tests/common/mod.rs"]
mod common;

use futures::future::join_all;
use queue::{EnqueuePolicy, Enqueued, Queue, QueueConfig};
use std::collections::BTreeMap;
use std::time::Duration;

/// The partial data a "still processing" answer leaves (80 bytes).
const PARTIAL: &str =
    "partial: 40 of 100 rows fetched, eta 12 s; next page cursor c3f9a1b27e04d8a6b5f2";
/// The final result (129 bytes).
const RESULT: &str = "{\"status\":\"done\",\"rows\":100,\"source\":\"upstream\",\"cursor\":null,\"items\":[1,2,3,4,5,6,7,8,9,10],\"note\":\"a complete result payload.\"}";

/// The i-th query: 33–38 characters, identical to bench/bullmq/memory.mjs's.
fn query(i: usize) -> String {
    let tail = "abcdefghijk";
    format!("bench memory query #{i:06} {}", &tail[..6 + i % 6])
}

#[derive(Clone, Copy, PartialEq)]
enum State {
    Ready,
    Delayed,
    Result,
}

impl State {
    fn name(self) -> &'static str {
        match self {
            State::Ready => "ready",
            State::Delayed => "delayed",
            State::Result => "result",
        }
    }
    fn data_bytes(self) -> usize {
        match self {
            State::Ready => 0,
            State::Delayed => PARTIAL.len(),
            State::Result => RESULT.len(),
        }
    }
}

async fn used_memory(c: &mut redis::aio::MultiplexedConnection) -> i64 {
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(c)
        .await
        .expect("INFO memory");
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("used_memory in INFO memory")
}

/// Takes tasks `range` to `state` through the public API, 100 at a time.
async fn build(q: &Queue, state: State, range: std::ops::Range<usize>) {
    let policy = EnqueuePolicy::default();
    let idx: Vec<usize> = range.collect();
    for chunk in idx.chunks(100) {
        let futs = chunk.iter().map(|&i| {
            let (q, p) = (q.clone(), policy.clone());
            async move { q.enqueue(&query(i), "", &p).await }
        });
        for r in join_all(futs).await {
            assert!(
                matches!(r.expect("enqueue"), Enqueued::Created(_)),
                "a fresh query creates a task"
            );
        }
        if state == State::Ready {
            continue;
        }
        let mut claimed = Vec::new();
        while claimed.len() < chunk.len() {
            let got = q
                .claim("mem", chunk.len() - claimed.len(), 3_600_000)
                .await
                .expect("claim");
            assert!(!got.is_empty(), "enqueued tasks are due");
            claimed.extend(got);
        }
        let futs = claimed.iter().map(|c| {
            let q = q.clone();
            async move {
                match state {
                    State::Delayed => q
                        .reschedule(&c.id, c.token, 3_600_000, Some(PARTIAL), 1)
                        .await
                        .map(|due| assert!(due > 0, "rescheduled, not dead")),
                    _ => q.complete(&c.id, c.token, RESULT, 1).await,
                }
            }
        });
        for r in join_all(futs).await {
            r.expect("reschedule/complete");
        }
    }
}

/// Bytes per key pattern (hex ids of 16+ characters shown as `<id>`): (keys, bytes).
async fn breakdown(c: &mut redis::aio::MultiplexedConnection) -> BTreeMap<String, (u64, i64)> {
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query_async(c).await.unwrap();
    let mut out: BTreeMap<String, (u64, i64)> = BTreeMap::new();
    for chunk in keys.chunks(1000) {
        let mut pipe = redis::pipe();
        for k in chunk {
            pipe.cmd("MEMORY").arg("USAGE").arg(k).arg("SAMPLES").arg(0);
        }
        let sizes: Vec<Option<i64>> = pipe.query_async(c).await.unwrap();
        for (k, s) in chunk.iter().zip(sizes) {
            let pattern: Vec<&str> = k
                .split(':')
                .map(|seg| {
                    if seg.len() >= 16 && seg.bytes().all(|b| b.is_ascii_hexdigit()) {
                        "<id>"
                    } else {
                        seg
                    }
                })
                .collect();
            let e = out.entry(pattern.join(":")).or_default();
            e.0 += 1;
            e.1 += s.unwrap_or(0);
        }
    }
    out
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000);
    for state in [State::Ready, State::Delayed, State::Result] {
        let server = common::spawn_redis();
        let mut c = redis::Client::open(server.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        let q = Queue::connect(
            &server.url(),
            QueueConfig {
                name: "mem".into(),
                ..QueueConfig::default()
            },
        )
        .await
        .expect("connect");
        // Warm-up: one task the same way (scripts, per-queue keys), query numbers past N.
        build(&q, state, n..n + 1).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let before = used_memory(&mut c).await;
        build(&q, state, 0..n).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let after = used_memory(&mut c).await;
        let per = (after - before) as f64 / n as f64;
        let version: String = redis::cmd("INFO")
            .arg("server")
            .query_async::<String>(&mut c)
            .await
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("redis_version:").map(str::to_string))
            .unwrap_or_default();
        println!(
            "repoll, {}: {n} tasks, redis-server {version} on port {}: used_memory +{} B = {per:.0} B/task \
             (data of its own: {} B/task)",
            state.name(),
            server.port,
            after - before,
            state.data_bytes()
        );
        for (pattern, (keys, bytes)) in breakdown(&mut c).await {
            println!(
                "  {pattern:<40} {keys:>7} keys {:>9.1} B/task",
                bytes as f64 / (n + 1) as f64
            );
        }
        println!(
            "RESULT peer=repoll phase=mem_{} n={n} bytes={per:.0} data_bytes={}",
            state.name(),
            state.data_bytes()
        );
    }
}
