//! Wake-up latency: enqueue → upstream called, with idle workers, at a steady arrival rate.
//!
//! `cargo run --release -p worker --example wakeup -- [N=3000] [RATE=1000] [WORKERS=4] [WARMUP=500] [CONCURRENCY=1]`
//!
//! A private redis-server (free port, dies with this process), an in-process upstream (axum on
//! 127.0.0.1:0) that answers `{"status":"done"}` at once and records when each query arrived,
//! and WORKERS workers (`worker::Worker::new(..).run(..)`, CONCURRENCY slots each, otherwise
//! the defaults) started and left idle for a second. Then WARMUP + N tasks are enqueued at RATE
//! per second (task i is issued at t0 + i/RATE; each enqueue runs in its own task so a slow
//! one does not hold back the next). Latency = the query's arrival at the upstream − the
//! moment its `enqueue` call was issued, both on this process's monotonic clock; the first
//! WARMUP tasks are left out of the figures.
//!
//! The BullMQ peer (`bench/bullmq/wakeup.mjs`) does the same with 4 Workers of concurrency 1
//! by default (latency = processor start − `queue.add` call); `scripts/bench` runs both.
//! It also counts Redis script calls per task (`INFO commandstats`, FCALL/FCALL_RO): an enqueue, a
//! claim and a completion are three; with every idle worker woken per enqueue (Pub/Sub, before
//! the wake-up list) it was one more per idle worker.
//! Machine-readable: `RESULT peer=repoll phase=wakeup n= rate= p50_ms= p90_ms= p99_ms= max_ms= mean_ms= scripts_per_task=`

#[path = "../tests/common/mod.rs"]
mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Query, State};
use axum::routing::get;
use axum::{Json, Router};
use queue::{EnqueuePolicy, Queue, QueueConfig};
use worker::{PolicyArgs, UpstreamArgs, WorkerArgs};

fn arg(i: usize, default: usize) -> usize {
    std::env::args()
        .nth(i)
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Query arrival times at the upstream (the first arrival of each).
type Arrivals = Arc<Mutex<HashMap<String, Instant>>>;

async fn upstream(
    State(arrivals): State<Arrivals>,
    Query(params): Query<HashMap<String, String>>,
) -> Json<serde_json::Value> {
    let now = Instant::now();
    if let Some(q) = params.get("q") {
        arrivals.lock().unwrap().entry(q.clone()).or_insert(now);
    }
    Json(serde_json::json!({"status": "done", "data": "ok"}))
}

fn query(i: usize) -> String {
    format!("bench wakeup query #{i:06} abcdef")
}

/// The value at quantile `p` (nearest rank) of sorted `v`, in ms.
fn pct(v: &[Duration], p: f64) -> f64 {
    let rank = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1].as_secs_f64() * 1e3
}

/// Library function calls so far on this server (FCALL and FCALL_RO: every queue operation is
/// one of them).
async fn function_calls(
    c: &mut redis::aio::MultiplexedConnection,
) -> Result<u64, Box<dyn std::error::Error>> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(c)
        .await?;
    Ok(["cmdstat_fcall:calls=", "cmdstat_fcall_ro:calls="]
        .iter()
        .filter_map(|prefix| info.lines().find_map(|l| l.strip_prefix(prefix)))
        .filter_map(|rest| rest.split(',').next()?.parse::<u64>().ok())
        .sum())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n = arg(1, 3000).max(1);
    let rate = arg(2, 1000).max(1);
    let workers = arg(3, 4).max(1);
    let warmup = arg(4, 500);
    let concurrency = arg(5, 1).max(1);
    let total = warmup + n;

    let redis_url = common::redis_url();
    let arrivals: Arrivals = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let app = Router::new()
        .route("/api/query", get(upstream))
        .with_state(arrivals.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let q = Queue::connect(
        &redis_url,
        QueueConfig {
            name: "wakeup".into(),
            ..QueueConfig::default()
        },
    )
    .await?;
    let up = UpstreamArgs {
        url: format!("http://{addr}/api/query?q={{key}}"),
        ..UpstreamArgs::default()
    };
    let running: Vec<_> = (0..workers)
        .map(|i| {
            common::spawn(common::worker(
                &q,
                &up,
                PolicyArgs::default(),
                WorkerArgs {
                    concurrency,
                    worker_id: Some(format!("wakeup-{i}")),
                    ..WorkerArgs::default()
                },
            ))
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await; // started, subscribed, idle
    let mut stats_conn = redis::Client::open(redis_url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let scripts_before = function_calls(&mut stats_conn).await?;

    let issued: Arc<Mutex<Vec<Option<Instant>>>> = Arc::new(Mutex::new(vec![None; total]));
    let policy = EnqueuePolicy::default();
    let step = Duration::from_secs_f64(1.0 / rate as f64);
    let t0 = tokio::time::Instant::now();
    let mut calls = Vec::with_capacity(total);
    for i in 0..total {
        tokio::time::sleep_until(t0 + step * i as u32).await;
        let (q, p, issued) = (q.clone(), policy.clone(), issued.clone());
        calls.push(tokio::spawn(async move {
            let at = Instant::now();
            issued.lock().unwrap()[i] = Some(at);
            q.enqueue(&query(i), "", &p).await
        }));
    }
    let issue_secs = t0.elapsed().as_secs_f64();
    for c in calls {
        c.await??;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while arrivals.lock().unwrap().len() < total {
        if Instant::now() > deadline {
            return Err(format!(
                "only {} of {total} queries reached the upstream in 60 s",
                arrivals.lock().unwrap().len()
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let scripts = function_calls(&mut stats_conn).await? - scripts_before;
    for r in running {
        r.stop().await;
    }
    let scripts_per_task = scripts as f64 / total as f64;

    let arrivals = arrivals.lock().unwrap();
    let issued = issued.lock().unwrap();
    let mut lat: Vec<Duration> = (warmup..total)
        .map(|i| arrivals[&query(i)].saturating_duration_since(issued[i].expect("issued")))
        .collect();
    lat.sort();
    let mean = lat.iter().map(Duration::as_secs_f64).sum::<f64>() / lat.len() as f64 * 1e3;
    println!(
        "repoll wake-up, enqueue -> upstream called: {n} tasks (after {warmup} warm-up) issued at \
         {:.0}/s into {workers} idle workers (concurrency {concurrency}): p50 {:.2} ms, p90 {:.2} ms, \
         p99 {:.2} ms, max {:.2} ms, mean {mean:.2} ms; {scripts_per_task:.2} script calls per task",
        total as f64 / issue_secs,
        pct(&lat, 0.5),
        pct(&lat, 0.9),
        pct(&lat, 0.99),
        pct(&lat, 1.0)
    );
    println!(
        "RESULT peer=repoll phase=wakeup n={n} rate={:.0} p50_ms={:.3} p90_ms={:.3} p99_ms={:.3} \
         max_ms={:.3} mean_ms={mean:.3} scripts_per_task={scripts_per_task:.3}",
        total as f64 / issue_secs,
        pct(&lat, 0.5),
        pct(&lat, 0.9),
        pct(&lat, 0.99),
        pct(&lat, 1.0)
    );
    Ok(())
}
