//! The chaos run: the web process, three worker processes and the faulty simulator on a
//! private Redis; queries submitted over HTTP while workers are SIGKILLed every 2 s, Redis is
//! SIGKILLed and restarted once and stalled once; then every accepted query must end done or
//! dead, and the upstream may have been driven to `done` twice only for a task that lost a
//! lease.
//!
//! Why the bound on "completed twice" is per task and not a global tolerance: a worker that got
//! the upstream's `done` and died (or was stalled past its lease) before `complete` was written
//! leaves a task that the reaper hands to another worker, which polls the upstream again. The
//! queue records each such loss as a `lease_expired` entry in the task's history, so for every
//! key the simulator's `done` count may exceed 1 by at most the task's number of
//! `lease_expired` entries. Anything beyond that is a duplicate without an excuse.

//!
//! One file per phase: `stack` starts and stops the processes (the one user of
//! `redis_server`), `schedule` runs the faults and the submits, `checks` reads the outcome,
//! `report` prints it.

mod checks;
mod report;
mod schedule;
mod stack;

use std::{
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use tokio::sync::Mutex;

use crate::common::log_dir;
use checks::Histories;
use report::Report;
use schedule::{Schedule, Submissions};
use stack::Stack;

/// Lease of the chaos workers: short, so a killed worker's tasks come back within seconds.
const LEASE_MS: u64 = 3000;
/// Worker processes.
const WORKERS: usize = 3;
/// Time between worker kills.
const KILL_EVERY: Duration = Duration::from_secs(2);
/// Length of the Redis stall.
const STALL: Duration = Duration::from_secs(3);

// What more than one phase uses lives here, not in a phase's file: in `checks` it made
// `schedule`, `stack` and `checks` name each other in a circle.

/// The run's partition count (`--partitions`), set once at its start (`stack`), read by the
/// checks' key names.
static PARTITIONS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();

/// A query as the public API shows it: read by the submits (`schedule`) and the checks.
#[derive(serde::Deserialize)]
struct View {
    id: String,
    query: String,
    status: String,
    error: Option<String>,
}

/// This process's clock in ms since the Unix epoch (when a kill or a submit happened).
fn epoch_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Options of `chaos run`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// Queries to submit (default 20000, or 1500 with --short).
    #[arg(long)]
    pub queries: Option<usize>,
    /// The short version: 1500 queries, kills for ~20 s, one Redis restart and one stall.
    #[arg(long)]
    pub short: bool,
    /// The queue's partitions (`REPOLL_PARTITIONS` of every process): the same faults on a
    /// queue spread over this many hash tags.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub partitions: u16,
    /// The repoll binary under test.
    #[arg(long, default_value = "target/release/repoll")]
    pub repoll_bin: PathBuf,
    /// Redis `appendfsync` for the run: `everysec` (Redis's default and what the managed
    /// Redis of `repoll serve` uses) or `always`.
    #[arg(long, default_value = "everysec", value_parser = ["everysec", "always"])]
    pub appendfsync: String,
    /// Submits per second (default 150, or 75 with --short).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Submits in flight at most.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// Fraction of submits that repeat an earlier query.
    #[arg(long, default_value_t = 0.25)]
    pub repeat: f64,
    /// Fraction of new queries the simulator answers `failed` (they must end dead `fatal`).
    #[arg(long, default_value_t = 0.01)]
    pub failing: f64,
    /// Seed of the query mix and of the simulator's fault dice.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Seconds to wait after the last submit for every query to be final (default 60 with
    /// --short, else 300).
    #[arg(long)]
    pub drain_secs: Option<u64>,
    /// The upstream as a job API: the simulator's predictions (submit once, follow the job),
    /// with an idempotency key. One more gate: no query's job paid for twice (jobs per query
    /// within its task's lives).
    #[arg(long)]
    pub job_api: bool,
    /// Where logs go (default target/chaos/run-<time>).
    #[arg(long)]
    pub log_dir: Option<PathBuf>,
}

/// Runs the suite; Ok(true) when every gate passed.
pub async fn run(args: RunArgs) -> Result<bool, String> {
    let short = args.short;
    let n = args.queries.unwrap_or(if short { 1500 } else { 20_000 });
    let rate = args.rate.unwrap_or(if short { 75.0 } else { 150.0 });
    let drain = Duration::from_secs(args.drain_secs.unwrap_or(if short { 60 } else { 300 }));
    let seed = args.seed.unwrap_or_else(rand::random);
    if !args.repoll_bin.exists() {
        return Err(format!(
            "{} not found: build it with `cargo build --release -p server --bin repoll` or pass --repoll-bin",
            args.repoll_bin.display()
        ));
    }
    let logs = log_dir(args.log_dir.clone(), "run")?;
    println!(
        "chaos run: {n} queries at {rate}/s, seed {seed}, appendfsync {}, logs in {}",
        args.appendfsync,
        logs.display()
    );
    let mut stack = Stack::start(&args, seed, &logs).await?;
    let plan = schedule::query_plan(n, seed, args.repeat, args.failing);
    let when = Schedule::new(n, rate, short);

    let t0 = Instant::now();
    let kills = Arc::new(Mutex::new(Vec::new()));
    let supervisor = schedule::spawn_supervisor(stack.workers.clone());
    let killer = schedule::spawn_killer(stack.workers.clone(), kills.clone(), t0, when.kill_until);
    let submissions = Submissions {
        accepted: Arc::new(Mutex::new(vec![None; n])),
        stats: Arc::default(),
    };
    // Redis restart and stall run on this task, between the submits (the submitter is a
    // spawned task), so the Redis server needs no sharing.
    let submitter = schedule::spawn_submitter(
        stack.http.clone(),
        stack.base.clone(),
        plan.queries,
        rate,
        args.concurrency.max(1),
        submissions.clone(),
    );
    tokio::time::sleep_until((t0 + when.restart_at).into()).await;
    let restart_report = stack.restart_redis(when.restart_at).await?;
    tokio::time::sleep_until((t0 + when.stall_at).into()).await;
    let stall_report = stack.stall_redis(when.stall_at, STALL).await;

    submitter.await.map_err(|e| format!("submitter: {e}"))?;
    let submit_took = t0.elapsed();
    println!(
        "chaos: submitted {n} in {:.1} s; waiting for every query to be final",
        submit_took.as_secs_f64()
    );
    killer.await.map_err(|e| format!("killer: {e}"))?;

    let accepted: Vec<_> = submissions
        .accepted
        .lock()
        .await
        .iter()
        .flatten()
        .cloned()
        .collect();
    let mut stats = submissions.stats.lock().await;
    let (by_query, ids) = checks::unique_ids(&accepted, &mut stats);
    let drain_took = checks::wait_until_final(&mut stack.con, &ids, drain).await;
    supervisor.abort();
    // The verdict comes from the public API, for every accepted id.
    let finals = checks::read_finals(&stack.http, &stack.base, &mut stack.con, &ids).await;
    let mut sim = checks::sim_stats(&stack.http, &stack.sim_url).await?;
    let histories = Histories::read(&mut stack.con, &ids).await?;
    let jobs = match args.job_api {
        true => {
            let jobs = checks::sim_jobs(&stack.http, &stack.sim_url).await?;
            // The simulator counts a job's polls under the job's id: counted per query here.
            sim = sim.by_query_of(&jobs);
            Some(checks::jobs_paid(&jobs, &histories, &by_query))
        }
        false => None,
    };
    let twice = checks::completed_twice(&sim, &histories, &by_query);
    let total_losses: u64 = ids.iter().map(|id| histories.lease_losses(id)).sum();

    let mut kills = kills.lock().await.clone();
    kills.sort_by_key(|k| k.n);
    let self_exits = stack.workers.lock().await.self_exits.clone();
    // Shut everything down before printing, so the table is the last thing on screen.
    stack.stop().await;
    Ok(report::print(&Report {
        n,
        distinct: plan.distinct,
        failing: plan.failing,
        submit_took,
        stats: &stats,
        unique: ids.len(),
        finals: &finals,
        drain_took,
        twice: &twice,
        jobs: jobs.as_ref(),
        sim: &sim,
        total_losses,
        restart_report: &restart_report,
        stall_report: &stall_report,
        appendfsync: &args.appendfsync,
        self_exits: &self_exits,
        kills: &kills,
        histories: &histories,
        logs: &logs,
    }))
}
