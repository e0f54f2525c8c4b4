//! Throughput through the simulator: a private redis-server, the simulator in process, one
//! worker at C=64. Enqueues N tasks first, then times the worker until every one is done.
//!
//! `cargo run --release -p worker --example throughput_sim -- [tasks=5000] [concurrency=64] [polls=1]`
//! (`polls` = calls per task; with more than 1 the poll interval is 0 so the figure is the
//! worker's, not the policy's.)

use std::time::{Duration, Instant};

use futures::StreamExt;
use queue::{Queue, QueueConfig};
use worker::{PolicyArgs, Upstream, UpstreamArgs, Worker, WorkerArgs};

fn arg(i: usize, default: u64) -> u64 {
    std::env::args()
        .nth(i)
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let tasks = arg(1, 5_000);
    let concurrency = arg(2, 64) as usize;
    let polls = arg(3, 1);

    // The test kit's redis-server (free port, no persistence), killed when this ends.
    let redis = testkit::RedisServer::start_with(testkit::RedisOptions::default())?;
    let redis_url = redis.url();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let sim_addr = listener.local_addr()?;
    let sim_args = sim::SimArgs {
        polls: u32::try_from(polls)?,
        ..sim::SimArgs::default()
    };
    tokio::spawn(sim::serve(listener, sim_args, std::future::pending()));

    let q = Queue::connect(&redis_url, QueueConfig::default()).await?;
    let policy = PolicyArgs {
        poll_interval_ms: 1,
        poll_jitter: 0.0,
        poll_multiplier: 1.0,
        deadline_ms: 0,
        ..PolicyArgs::default()
    };
    let t_enqueue = Instant::now();
    let ep = policy.enqueue_policy();
    let results: Vec<_> = futures::stream::iter(0..tasks)
        .map(|i| {
            let q = q.clone();
            let ep = &ep;
            async move { q.enqueue(&format!("bench-{i}"), "", ep).await }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    for r in results {
        r?;
    }
    println!(
        "enqueued {tasks} in {:.2?} ({:.0}/s)",
        t_enqueue.elapsed(),
        tasks as f64 / t_enqueue.elapsed().as_secs_f64()
    );

    let upstream = Upstream::new(&UpstreamArgs {
        url: format!("http://{sim_addr}/api/query?q={{key}}"),
        timeout_ms: 10_000,
        ..UpstreamArgs::default()
    })?;
    let w = Worker::new(
        q.clone(),
        redis::Client::open(redis_url.as_str())?,
        upstream,
        policy,
        WorkerArgs {
            concurrency,
            stats_interval_ms: 0,
            ..WorkerArgs::default()
        },
    );
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let t0 = Instant::now();
    let running = tokio::spawn(w.run(async move {
        let _ = stop_rx.await;
    }));
    loop {
        let s = q.stats().await?;
        if s.results + s.dead >= tasks && s.leased == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = t0.elapsed();
    let _ = stop_tx.send(());
    let report = running.await??;
    let per_s = tasks as f64 / took.as_secs_f64();
    println!(
        "C={concurrency}: {tasks} tasks x {polls} call(s) in {took:.2?} = {per_s:.0} tasks/s \
         ({:.0} upstream calls/s); {report:?}",
        (tasks * polls) as f64 / took.as_secs_f64()
    );
    Ok(())
}
