//! Claim+complete throughput against a private redis-server (spawned here, on a free port).
//!
//! `cargo run --release -p queue --example throughput [N] [WORKERS] [BATCH]`
//!
//! 1. enqueues N tasks (pipelined: many enqueue scripts in flight on one connection);
//! 2. batched: WORKERS concurrent workers each loop claim(BATCH) + complete_many(batch);
//! 3. unbatched: one worker, one task at a time, as a worker slot runs: claim(1) once, then
//!    each completion brings the next task (`complete_and_claim`, one call per task);
//! 4. "still processing": BATCH slots, each going from task to task with
//!    `reschedule_and_claim` (one call per task, as the worker runtime does).
//!
//! Script calls (FCALL/FCALL_RO, each one round trip) are counted from the server's INFO commandstats,
//! as are all commands Redis executed (every `cmdstat_*` but INFO; Redis counts the commands
//! a script runs there too, so that is the work done inside Redis, not what the client sent).
//! Two Redis-side costs are reported per task: `usec` inside the scripts (commandstats; wall
//! clock, so it grows when other processes steal the CPU) and the CPU time Redis itself used
//! (INFO cpu, user + sys; not inflated by waiting for a core, so the better figure on a
//! loaded machine).
//!
//! `REPOLL_BENCH_TRACE_CONTEXT=1`: every task is made as while tracing (issue 27), keeping
//! its maker's `traceparent`.
//!
//! Each phase also prints one machine-readable line, the same as the BullMQ peer's
//! (`bench/bullmq/bench.mjs`); `scripts/bench` runs both and prints the ratios:
//! `RESULT peer=repoll phase=enqueue|batched|single|poll n= secs= tps= cpu_us= script_us= scripts= cmds=`

#[path = "../tests/common/mod.rs"]
mod common;

use futures::future::join_all;
use queue::{Completion, EnqueuePolicy, Queue, Reschedule};
use std::time::Instant;

/// Redis-side counters at one moment: script calls, microseconds inside them, all commands
/// executed but INFO (commandstats) and the CPU seconds the server process used (INFO cpu).
#[derive(Clone, Default)]
struct Snap {
    calls: u64,
    usec: u64,
    cmds: u64,
    cpu: f64,
    /// Per command name (scripts' inner commands included): (calls, usec).
    by_cmd: std::collections::BTreeMap<String, (u64, u64)>,
}

impl std::ops::Sub for Snap {
    type Output = Snap;
    fn sub(self, o: Snap) -> Snap {
        let by_cmd = self
            .by_cmd
            .iter()
            .map(|(k, &(c, u))| {
                let (oc, ou) = o.by_cmd.get(k).copied().unwrap_or((0, 0));
                (k.clone(), (c - oc, u - ou))
            })
            .filter(|(_, (c, _))| *c > 0)
            .collect();
        Snap {
            calls: self.calls - o.calls,
            usec: self.usec - o.usec,
            cmds: self.cmds - o.cmds,
            cpu: self.cpu - o.cpu,
            by_cmd,
        }
    }
}

async fn info(q: &Queue, section: &str) -> String {
    let mut c = q.connection();
    redis::cmd("INFO")
        .arg(section)
        .query_async(&mut c)
        .await
        .unwrap_or_default()
}

async fn snap(q: &Queue) -> Snap {
    let mut s = Snap::default();
    for line in info(q, "commandstats").await.lines() {
        let Some((name, stats)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        if name == "info" {
            continue; // our own measuring
        }
        let field = |key: &str| {
            stats
                .split(',')
                .find_map(|kv| kv.strip_prefix(key))
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0)
        };
        s.cmds += field("calls=");
        s.by_cmd
            .insert(name.to_string(), (field("calls="), field("usec=")));
        // script calls (the commands they run are counted again under their own names)
        if SCRIPT_CMDS.contains(&name) {
            s.calls += field("calls=");
            s.usec += field("usec=");
        }
    }
    for line in info(q, "cpu").await.lines() {
        if let Some((k, v)) = line.trim().split_once(':') {
            if k == "used_cpu_user" || k == "used_cpu_sys" {
                s.cpu += v.parse::<f64>().unwrap_or(0.0);
            }
        }
    }
    s
}

/// The commands that run a script (as the BullMQ bench counts them).
const SCRIPT_CMDS: [&str; 6] = [
    "eval",
    "evalsha",
    "eval_ro",
    "evalsha_ro",
    "fcall",
    "fcall_ro",
];

/// "x.xx script calls per task, n commands/task, y us/task inside scripts, z us/task Redis CPU".
fn redis_cost(d: &Snap, tasks: usize) -> String {
    let t = tasks.max(1) as f64;
    format!(
        "{:.3} script calls (= round trips)/task, {:.2} Redis commands/task (incl. inside scripts), \
         {:.1} us/task inside scripts, {:.1} us/task Redis CPU",
        d.calls as f64 / t,
        d.cmds as f64 / t,
        d.usec as f64 / t,
        d.cpu * 1e6 / t
    )
}

/// Where a phase's Redis time goes, per task: every command's calls and microseconds (a
/// script's own time includes its inner commands'), the costliest first. This is what says
/// which Redis cost stands between a phase and a cheaper one.
fn by_command(d: &Snap, tasks: usize) -> String {
    let t = tasks.max(1) as f64;
    let mut rows: Vec<_> = d.by_cmd.iter().collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.1 .1));
    rows.iter()
        .map(|(name, (c, u))| format!("{name} {:.2}x {:.1}us", *c as f64 / t, *u as f64 / t))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The machine-readable line for scripts/bench (same fields as bench/bullmq/bench.mjs),
/// followed by the per-command breakdown (`BY_COMMAND phase=…`).
fn result_line(phase: &str, tasks: usize, secs: f64, d: &Snap) {
    let t = tasks.max(1) as f64;
    println!("BY_COMMAND phase={phase} {}", by_command(d, tasks));
    println!(
        "RESULT peer=repoll phase={phase} n={tasks} secs={secs:.3} tps={:.0} cpu_us={:.2} \
         script_us={:.2} scripts={:.3} cmds={:.2}",
        tasks as f64 / secs.max(f64::MIN_POSITIVE),
        d.cpu * 1e6 / t,
        d.usec as f64 / t,
        d.calls as f64 / t,
        d.cmds as f64 / t
    );
}

/// Enqueues `n` tasks, 1000 in flight at a time; returns the seconds it took.
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
    t0.elapsed().as_secs_f64()
}

/// Batched claim + complete: `workers` workers, each claiming and completing `batch` at a time
/// until the queue is empty. Returns (tasks done, tasks/s).
async fn batched_phase(q: &Queue, workers: usize, batch: usize) -> (usize, f64) {
    let s0 = snap(q).await;
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
    let d = snap(q).await - s0;
    let batched_rate = done as f64 / secs;
    println!(
        "batched claim+complete:       {batched_rate:>9.0} tasks/s  ({done} tasks in {secs:.2} s, {batches} batches of <= {batch}, {workers} workers)"
    );
    println!("  {}", redis_cost(&d, done));
    result_line("batched", done, secs, &d);
    let cpu_per = d.cpu * 1e6 / done.max(1) as f64;
    println!(
        "  (per batch: peek + claim + complete_many) -> Redis CPU ceiling {:.0} tasks/s on one free core",
        1e6 / cpu_per.max(0.001)
    );

    (done, batched_rate)
}

/// Unbatched: one slot, one task at a time; each completion brings the next task. Returns
/// (tasks done, tasks/s).
async fn single_phase(q: &Queue, single_n: usize) -> (usize, f64) {
    enqueue_all(q, "single", single_n).await;
    let s0 = snap(q).await;
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
        cur = next.into_iter().next();
        done1 += 1;
    }
    let secs = t0.elapsed().as_secs_f64();
    let d = snap(q).await - s0;
    let single_rate = done1 as f64 / secs;
    println!(
        "one at a time (complete+next): {single_rate:>8.0} tasks/s  ({done1} tasks, one slot, sequential)"
    );
    println!("  {}", redis_cost(&d, done1));
    result_line("single", done1, secs, &d);

    (done1, single_rate)
}

/// Reschedule ("still processing"): `batch` slots in flight together, each going from task to
/// task with one reschedule_and_claim call per task, as the worker runtime does. Returns the
/// tasks polled.
async fn poll_phase(q: &Queue, single_n: usize, batch: usize) -> usize {
    enqueue_all(q, "resched", single_n).await;
    let s0 = snap(q).await;
    let t0 = Instant::now();
    let first = q.claim("rs", batch, 30_000).await.expect("claim");
    let slots = first.into_iter().map(|c| {
        let q = q.clone();
        async move {
            let mut done = 0usize;
            let mut cur = Some(c);
            while let Some(c) = cur {
                let item = [Reschedule {
                    id: c.id,
                    token: c.token,
                    delay_ms: 3_600_000,
                    partial: None,
                    latency_ms: 1,
                    job: None,
                }];
                let (_, next) = q
                    .reschedule_and_claim(&item, "rs", 1, 30_000)
                    .await
                    .expect("reschedule");
                cur = next.into_iter().next();
                done += 1;
            }
            done
        }
    });
    let done2: usize = join_all(slots).await.into_iter().sum();
    let secs = t0.elapsed().as_secs_f64();
    let d = snap(q).await - s0;
    println!(
        "reschedule+next ({batch} slots):  {:>9.0} tasks/s  ({done2} tasks)",
        done2 as f64 / secs
    );
    println!("  {}", redis_cost(&d, done2));
    result_line("poll", done2, secs, &d);
    done2
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
    // Issue 27's overhead: with REPOLL_BENCH_TRACE_CONTEXT=1 every task is made as by a
    // process that traces and samples every query (its record keeps the maker's context, each
    // claim hands it back), which is the whole of tracing's cost inside Redis. The spans
    // themselves are the worker's and web's CPU, not measured here.
    if std::env::var("REPOLL_BENCH_TRACE_CONTEXT").is_ok_and(|v| v == "1") {
        queue::trace_context::install(|| {
            Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".to_string())
        });
        println!("trace context: on (every task keeps one)");
    }

    let server = common::spawn_redis();
    let q = Queue::connect(&server.url(), common::cfg("bench"))
        .await
        .expect("connect");
    let version = info(&q, "server")
        .await
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:").map(str::to_string))
        .unwrap_or_else(|| "?".into());
    println!(
        "redis-server {version} on port {}, {n} tasks, {workers} workers, batch {batch}",
        server.port
    );

    let s0 = snap(&q).await;
    let secs = enqueue_all(&q, "bench", n).await;
    let d = snap(&q).await - s0;
    println!(
        "enqueue (pipelined):          {:>9.0} tasks/s  ({})",
        n as f64 / secs,
        redis_cost(&d, n)
    );
    result_line("enqueue", n, secs, &d);

    let (done, batched_rate) = batched_phase(&q, workers, batch).await;

    let (done1, single_rate) = single_phase(&q, single_n).await;

    let done2 = poll_phase(&q, single_n, batch).await;
    println!();
    println!(
        "batched vs unbatched:         {:>9.1} x  (claim+complete tasks/s, same run)",
        batched_rate / single_rate.max(f64::MIN_POSITIVE)
    );
    println!(
        "target (issue 3):                 50000 claim+complete/s batched on this 2-core machine -> {:.0}% reached",
        batched_rate / 500.0
    );
    println!(
        "peers: scripts/bench runs BullMQ on this machine right after this and prints the ratios"
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
    assert_eq!(s.waiting as usize, done2);
}
