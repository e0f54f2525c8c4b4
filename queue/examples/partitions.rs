//! A partitioned queue on Redis Cluster: throughput and Redis CPU per task on each master,
//! with P = 1 and P = 12 partitions on 1 and 3 masters (private redis-servers in cluster mode,
//! spawned here; `redis-cli --cluster create` for three).
//!
//! `cargo run --release -p queue --example partitions [N] [WORKERS] [BATCH]`
//!
//! Per layout: N tasks enqueued (1,000 in flight), then WORKERS workers each looping
//! claim(BATCH) + complete_many (as the throughput example's "batched" phase), then N/5 tasks
//! one slot at a time with `complete_and_claim` ("single"). Measured per phase: tasks/s, the
//! CPU each master's redis-server used per task (INFO cpu, user + sys), script calls per task
//! over all masters (INFO commandstats), and the spread (busiest master's CPU / idlest's).
//!
//! On this 2-core machine the three masters, the client and the OS share two cores, so tasks/s
//! cannot grow with the masters here; what carries over to real hosts is the CPU per task on
//! each master and how evenly it spreads (ARCHITECTURE.md, "Scale model"). Each layout prints
//! a machine-readable line for `scripts/bench --only partitions`:
//! `RESULT layout=m<masters>p<partitions> phase=enqueue|batched|single n= secs= tps=
//! cpu_us_total= cpu_us_max_node= spread= scripts=`

#[path = "../tests/common/mod.rs"]
mod common;

use futures::future::join_all;
use queue::{Completion, EnqueuePolicy, Queue, QueueConfig};
use std::process::Command;
use std::time::{Duration, Instant};

const CLUSTER_MODE: &str = "--cluster-enabled yes --cluster-config-file nodes.conf";

/// Per master: (CPU seconds used, script calls).
async fn snap(masters: &[u16]) -> Vec<(f64, u64)> {
    let mut out = Vec::new();
    for port in masters {
        let mut c = redis::Client::open(format!("redis://127.0.0.1:{port}"))
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let cpu: String = redis::cmd("INFO")
            .arg("cpu")
            .query_async(&mut c)
            .await
            .unwrap();
        let field = |k: &str| {
            cpu.lines()
                .find_map(|l| l.strip_prefix(k))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        let stats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut c)
            .await
            .unwrap();
        let calls: u64 = stats
            .lines()
            .filter(|l| l.starts_with("cmdstat_fcall:") || l.starts_with("cmdstat_fcall_ro:"))
            .filter_map(|l| {
                l.split(',')
                    .find_map(|kv| kv.split_once("calls=").map(|(_, n)| n))
                    .and_then(|n| n.parse::<u64>().ok())
            })
            .sum();
        out.push((field("used_cpu_user:") + field("used_cpu_sys:"), calls));
    }
    out
}

fn report(
    layout: &str,
    phase: &str,
    n: usize,
    secs: f64,
    before: &[(f64, u64)],
    after: &[(f64, u64)],
) {
    let t = n.max(1) as f64;
    let per_node: Vec<f64> = before
        .iter()
        .zip(after)
        .map(|(b, a)| (a.0 - b.0) * 1e6 / t)
        .collect();
    let calls: u64 = before.iter().zip(after).map(|(b, a)| a.1 - b.1).sum();
    let total: f64 = per_node.iter().sum();
    let max = per_node.iter().copied().fold(0.0, f64::max);
    let min = per_node.iter().copied().fold(f64::MAX, f64::min);
    let spread = if min > 0.0 { max / min } else { 9999.0 };
    let nodes: Vec<String> = per_node.iter().map(|u| format!("{u:.1}")).collect();
    println!(
        "  {phase:<8} {:>8.0} tasks/s  Redis CPU/task per master [{}] us (sum {total:.1}, \
         spread {spread:.2}), {:.2} script calls/task",
        n as f64 / secs,
        nodes.join(", "),
        calls as f64 / t
    );
    println!(
        "RESULT layout={layout} phase={phase} n={n} secs={secs:.3} tps={:.0} cpu_us_total={total:.2} \
         cpu_us_max_node={max:.2} spread={spread:.3} scripts={:.3}",
        n as f64 / secs,
        calls as f64 / t
    );
}

/// `masters` redis-servers made into a cluster (no replicas); their ports.
async fn cluster(masters: usize) -> Vec<u16> {
    let nodes: Vec<common::Server> = (0..masters)
        .map(|_| common::spawn_redis_with(CLUSTER_MODE))
        .collect();
    let ports: Vec<u16> = nodes.iter().map(|s| s.port).collect();
    if masters == 1 {
        let mut c = redis::Client::open(nodes[0].url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let _: () = redis::cmd("CLUSTER")
            .arg("ADDSLOTSRANGE")
            .arg(0)
            .arg(16383)
            .query_async(&mut c)
            .await
            .unwrap();
    } else {
        let mut create = Command::new("redis-cli");
        create.arg("--cluster").arg("create");
        for p in &ports {
            create.arg(format!("127.0.0.1:{p}"));
        }
        let out = create
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli");
        assert!(
            out.status.success(),
            "redis-cli --cluster create: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    for p in &ports {
        let mut c = redis::Client::open(format!("redis://127.0.0.1:{p}"))
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        for _ in 0..200 {
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query_async(&mut c)
                .await
                .unwrap();
            if info.contains("cluster_state:ok") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    ports
}

async fn enqueue_all(q: &Queue, prefix: &str, n: usize) {
    let policy = EnqueuePolicy::default();
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let texts: Vec<String> = chunk.iter().map(|i| format!("{prefix} {i}")).collect();
        let items: Vec<(&str, &str)> = texts.iter().map(|t| (t.as_str(), "payload")).collect();
        for r in q.enqueue_many(&items, &policy).await.expect("enqueue") {
            r.expect("enqueue");
        }
    }
}

async fn run(masters: usize, partitions: u16, n: usize, workers: usize, batch: usize) {
    let layout = format!("m{masters}p{partitions}");
    let ports = cluster(masters).await;
    let seeds: Vec<String> = ports
        .iter()
        .map(|p| format!("redis://127.0.0.1:{p}"))
        .collect();
    let q = Queue::connect_cluster(
        &seeds,
        QueueConfig {
            name: "bench".into(),
            partitions,
            ..QueueConfig::default()
        },
    )
    .await
    .expect("connect");
    println!("{masters} master(s), {partitions} partition(s):");

    let s0 = snap(&ports).await;
    let t0 = Instant::now();
    enqueue_all(&q, "bench", n).await;
    report(
        &layout,
        "enqueue",
        n,
        t0.elapsed().as_secs_f64(),
        &s0,
        &snap(&ports).await,
    );

    let s0 = snap(&ports).await;
    let t0 = Instant::now();
    let done: usize = join_all((0..workers).map(|w| {
        let q = q.clone();
        async move {
            let me = format!("w{w}");
            let mut done = 0;
            loop {
                let got = q.claim(&me, batch, 30_000).await.expect("claim");
                if got.is_empty() {
                    return done;
                }
                let items: Vec<Completion> = got
                    .iter()
                    .map(|c| Completion {
                        id: c.id.clone(),
                        token: c.token,
                        result: "result".into(),
                        latency_ms: 1,
                    })
                    .collect();
                for r in q.complete_many(&items).await.expect("complete") {
                    r.expect("complete");
                }
                done += got.len();
            }
        }
    }))
    .await
    .into_iter()
    .sum();
    report(
        &layout,
        "batched",
        done,
        t0.elapsed().as_secs_f64(),
        &s0,
        &snap(&ports).await,
    );

    let single_n = (n / 5).max(1);
    enqueue_all(&q, "single", single_n).await;
    let s0 = snap(&ports).await;
    let t0 = Instant::now();
    let mut done1 = 0;
    let mut cur = q.claim("solo", 1, 30_000).await.expect("claim").pop();
    while let Some(c) = cur {
        let item = [Completion {
            id: c.id,
            token: c.token,
            result: "result".into(),
            latency_ms: 1,
        }];
        let (_, next) = q
            .complete_and_claim(&item, "solo", 1, 30_000)
            .await
            .expect("complete");
        cur = match next.into_iter().next() {
            Some(c) => Some(c),
            // This partition is empty: the next claim sweeps the others.
            None => q.claim("solo", 1, 30_000).await.expect("claim").pop(),
        };
        done1 += 1;
    }
    report(
        &layout,
        "single",
        done1,
        t0.elapsed().as_secs_f64(),
        &s0,
        &snap(&ports).await,
    );
    let s = q.stats().await.expect("stats");
    assert_eq!(
        s.results as usize,
        done + done1,
        "every task completed once"
    );
    println!();
}

#[tokio::main]
async fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let n = args.first().copied().unwrap_or(50_000);
    let workers = args.get(1).copied().unwrap_or(4);
    let batch = args.get(2).copied().unwrap_or(100);
    println!("{n} tasks, {workers} workers, batch {batch}; CPU per task in us of each master\n");
    for (masters, partitions) in [(1, 1), (1, 12), (3, 1), (3, 12)] {
        run(masters, partitions, n, workers, batch).await;
    }
}
