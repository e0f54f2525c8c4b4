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

use std::{
    collections::{BTreeMap, HashMap},
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use futures::{stream, StreamExt};
use rand::{rngs::StdRng, Rng, SeedableRng};
use redis::aio::ConnectionManager;
use serde::Deserialize;
use tokio::sync::{Mutex, Semaphore};

use crate::{
    common::{fmt_ms, log_dir, repoll_cmd, wait_http},
    procs::{self, Proc},
    redis_server::{self, RedisServer},
};

/// The queue name: the default, so the keys are `{repoll}:...` as in ARCHITECTURE.md.
const QUEUE_NAME: &str = "repoll";

/// The run's partition count (`--partitions`), set once at its start.
static PARTITIONS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();

/// Key `kind` (`t` record, `r` result, `h` history) of task `id`: under `{repoll}`, or its
/// partition's tag in a partitioned queue.
fn task_key(kind: &str, id: &str) -> String {
    let p = PARTITIONS.get().copied().unwrap_or(1);
    format!(
        "{}:{kind}:{id}",
        queue::partition::task_tag(QUEUE_NAME, id, p)
    )
}
/// Lease of the chaos workers: short, so a killed worker's tasks come back within seconds.
const LEASE_MS: u64 = 3000;
/// Worker processes.
const WORKERS: usize = 3;
/// Time between worker kills.
const KILL_EVERY: Duration = Duration::from_secs(2);
/// Length of the Redis stall.
const STALL: Duration = Duration::from_secs(3);

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
    /// Where logs go (default target/chaos/run-<time>).
    #[arg(long)]
    pub log_dir: Option<PathBuf>,
}

/// What the API said when it accepted a submit.
#[derive(Debug, Clone)]
struct Accepted {
    id: String,
    /// The normalised query: the simulator's key.
    query: String,
}

#[derive(Deserialize)]
struct View {
    id: String,
    query: String,
    status: String,
    error: Option<String>,
}

#[derive(Default)]
struct SubmitStats {
    accepted: u64,
    rejected: u64,
    /// Answers that were retried, by kind (429, 503, transport error, ...).
    retried: BTreeMap<String, u64>,
    /// Same query, different id: would break joining.
    id_mismatch: u64,
}

/// One worker kill.
#[derive(Debug, Clone)]
struct Kill {
    n: usize,
    /// Since the first submit.
    at: Duration,
    /// Wall clock in ms since the epoch: the same clock as Redis `TIME` on this host, which
    /// stamps the task histories the recovery is read from.
    at_ms: i64,
    worker: String,
}

/// What the task histories say about one kill (see [`Histories::recovery`]).
#[derive(Debug, Default)]
struct Recovery {
    /// Tasks the worker held when it died: their lease expired from it after the kill.
    held: usize,
    /// Kill → the last of them reaped.
    reaped_ms: Option<i64>,
    /// Kill → the last of them claimed again or dead; None when one never was.
    recovered_ms: Option<i64>,
}

/// The three worker slots; a killed or crashed worker is replaced under a new id.
struct Workers {
    bin: PathBuf,
    env: Vec<(String, String)>,
    log_dir: PathBuf,
    slots: Vec<Option<(Proc, String)>>,
    generation: Vec<u32>,
    /// Workers that exited without being killed by the suite.
    self_exits: Vec<String>,
}

impl Workers {
    fn spawn(&mut self, slot: usize) -> Result<(), String> {
        self.generation[slot] += 1;
        let id = format!("chaos-w{slot}-g{}", self.generation[slot]);
        let mut env = self.env.clone();
        env.push(("REPOLL_WORKER_ID".into(), id.clone()));
        let log = self.log_dir.join(format!("worker-{slot}.log"));
        let cmd = repoll_cmd(&self.bin, &["worker"], &env);
        let p = Proc::spawn(&id, cmd, &log).map_err(|e| format!("worker {id}: {e}"))?;
        self.slots[slot] = Some((p, id));
        Ok(())
    }

    /// Replaces workers that exited on their own (and remembers them: that is a finding).
    fn respawn_exited(&mut self) -> Result<(), String> {
        for slot in 0..self.slots.len() {
            let gone = match self.slots[slot].as_mut() {
                Some((p, id)) => p.exited().map(|s| format!("{id}: {s}")),
                None => None,
            };
            if let Some(why) = gone {
                eprintln!("chaos: worker exited on its own: {why}");
                self.self_exits.push(why);
                self.spawn(slot)?;
            }
        }
        Ok(())
    }
}

/// Runs the suite; Ok(true) when every gate passed.
pub async fn run(args: RunArgs) -> Result<bool, String> {
    let short = args.short;
    let n = args.queries.unwrap_or(if short { 1500 } else { 20_000 });
    let rate = args.rate.unwrap_or(if short { 75.0 } else { 150.0 });
    let drain = Duration::from_secs(args.drain_secs.unwrap_or(if short { 60 } else { 300 }));
    let seed = args.seed.unwrap_or_else(rand::random);
    let bin = args.repoll_bin.clone();
    if !bin.exists() {
        return Err(format!(
            "{} not found: build it with `cargo build --release -p server --bin repoll` or pass --repoll-bin",
            bin.display()
        ));
    }
    let logs = log_dir(args.log_dir.clone(), "run")?;
    println!(
        "chaos run: {n} queries at {rate}/s, seed {seed}, appendfsync {}, logs in {}",
        args.appendfsync,
        logs.display()
    );

    let mut redis = RedisServer::start(&args.appendfsync, &logs).await?;
    let url = redis.url();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .map_err(|e| e.to_string())?;

    // The simulated upstream with every fault on. The rates sum to 12.5 % of calls; a hang
    // outlasts the workers' upstream timeout, so it is seen as a timeout.
    let sim_port = procs::free_port().map_err(|e| e.to_string())?;
    let sim_addr = format!("127.0.0.1:{sim_port}");
    let sim_env: Vec<(String, String)> = [
        ("REPOLL_SIM_ADDR", sim_addr.clone()),
        ("REPOLL_SIM_POLLS", "3".into()),
        ("REPOLL_SIM_ERROR_RATE", "0.05".into()),
        ("REPOLL_SIM_429_RATE", "0.03".into()),
        ("REPOLL_SIM_RETRY_AFTER", "1".into()),
        ("REPOLL_SIM_MALFORMED_RATE", "0.02".into()),
        ("REPOLL_SIM_HANG_RATE", "0.005".into()),
        ("REPOLL_SIM_HANG_MS", "4000".into()),
        ("REPOLL_SIM_RESET_RATE", "0.02".into()),
        // Latency makes every worker hold leases most of the time, so a kill has victims.
        ("REPOLL_SIM_LATENCY_MS", "20".into()),
        ("REPOLL_SIM_LATENCY_JITTER_MS", "80".into()),
        ("REPOLL_SIM_SEED", seed.to_string()),
        // Per-key counters for every query of the run (the simulator forgets the oldest keys
        // past its cap, and the completed-twice count reads them).
        ("REPOLL_SIM_MAX_KEYS", "100000".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let sim_log = logs.join("sim.log");
    let mut sim = Proc::spawn("repoll sim", repoll_cmd(&bin, &["sim"], &sim_env), &sim_log)
        .map_err(|e| format!("repoll sim: {e}"))?;
    let sim_url = format!("http://{sim_addr}");
    wait_http(
        &http,
        &format!("{sim_url}/_sim/stats"),
        Duration::from_secs(20),
        &mut sim,
        &sim_log,
    )
    .await?;

    // The web process, without embedded workers, with the rate limit out of the way (one
    // client address submits everything) and no first-answer wait (it would only slow the
    // submitter; the queue path is the same).
    let web_port = procs::free_port().map_err(|e| e.to_string())?;
    let web_addr = format!("127.0.0.1:{web_port}");
    let partitions = args.partitions.to_string();
    let _ = PARTITIONS.set(usize::from(args.partitions));
    let web_env: Vec<(String, String)> = [
        ("REPOLL_RATE_PER_MIN", "1000000"),
        ("REPOLL_RATE_BURST", "100000"),
        ("REPOLL_FIRST_ANSWER_MS", "0"),
        ("REPOLL_ADMIN_PASSWORD", "chaos-admin-not-used"),
        ("REPOLL_PARTITIONS", partitions.as_str()),
        // Every claim in the histories: recovery and "completed once" are read from them.
        ("REPOLL_HISTORY", "full"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let web_log = logs.join("serve.log");
    let mut web = Proc::spawn(
        "repoll serve",
        repoll_cmd(
            &bin,
            &[
                "serve",
                "--workers",
                "0",
                "--redis-url",
                &url,
                "--addr",
                &web_addr,
            ],
            &web_env,
        ),
        &web_log,
    )
    .map_err(|e| format!("repoll serve: {e}"))?;
    let base = format!("http://{web_addr}");
    wait_http(
        &http,
        &format!("{base}/readyz"),
        Duration::from_secs(30),
        &mut web,
        &web_log,
    )
    .await?;

    let worker_env: Vec<(String, String)> = [
        ("REDIS_URL", url.clone()),
        (
            "REPOLL_UPSTREAM_URL",
            format!("{sim_url}/api/query?q={{key}}"),
        ),
        ("REPOLL_LEASE_MS", LEASE_MS.to_string()),
        ("REPOLL_HISTORY", "full".into()),
        ("REPOLL_CONCURRENCY", "32".into()),
        ("REPOLL_UPSTREAM_TIMEOUT_MS", "2000".into()),
        ("REPOLL_POLL_INTERVAL_MS", "100".into()),
        ("REPOLL_POLL_MAX_INTERVAL_MS", "1000".into()),
        ("REPOLL_BACKOFF_BASE_MS", "100".into()),
        ("REPOLL_BACKOFF_MAX_MS", "2000".into()),
        ("REPOLL_REAP_INTERVAL_MS", "250".into()),
        ("REPOLL_MAX_IDLE_MS", "250".into()),
        ("REPOLL_HEARTBEAT_MS", "1000".into()),
        ("REPOLL_GRACE_MS", "500".into()),
        ("REPOLL_PARTITIONS", partitions.clone()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let workers = Arc::new(Mutex::new(Workers {
        bin: bin.clone(),
        env: worker_env,
        log_dir: logs.clone(),
        slots: (0..WORKERS).map(|_| None).collect(),
        generation: vec![0; WORKERS],
        self_exits: Vec::new(),
    }));
    {
        let mut w = workers.lock().await;
        for slot in 0..WORKERS {
            w.spawn(slot)?;
        }
    }
    let mut con = redis_server::connect(&url).await?;

    // The query mix: new queries, ~25 % repeats of earlier ones, ~1 % that the simulator
    // answers "failed" (override in the key itself).
    let mut rng = StdRng::seed_from_u64(seed);
    let tag = format!("{:06x}", seed & 0xff_ffff);
    let mut distinct: Vec<String> = Vec::new();
    let mut failing = 0usize;
    let plan: Vec<String> = (0..n)
        .map(|_| {
            if !distinct.is_empty() && rng.gen_bool(args.repeat.clamp(0.0, 1.0)) {
                return distinct[rng.gen_range(0..distinct.len())].clone();
            }
            let mut q = format!("chaos-{tag}-{}", distinct.len());
            if rng.gen_bool(args.failing.clamp(0.0, 1.0)) {
                q.push_str(" status=failed");
                failing += 1;
            }
            distinct.push(q.clone());
            q
        })
        .collect();

    // Chaos schedule, relative to the first submit.
    let submit_for = Duration::from_secs_f64(n as f64 / rate);
    let kill_until = if short {
        Duration::from_secs(20)
    } else {
        submit_for
    };
    let restart_at = if short {
        Duration::from_secs(8)
    } else {
        submit_for.mul_f64(0.4)
    };
    let stall_at = if short {
        Duration::from_secs(14)
    } else {
        submit_for.mul_f64(0.7)
    };

    let t0 = Instant::now();
    let kills: Arc<Mutex<Vec<Kill>>> = Arc::default();
    let supervisor = {
        let workers = workers.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(200)).await;
                if let Err(e) = workers.lock().await.respawn_exited() {
                    eprintln!("chaos: {e}");
                }
            }
        })
    };
    let killer = {
        let workers = workers.clone();
        let kills = kills.clone();
        tokio::spawn(async move {
            let mut k = 0usize;
            loop {
                let at = KILL_EVERY * (k as u32 + 1);
                if at > kill_until {
                    break;
                }
                tokio::time::sleep_until((t0 + at).into()).await;
                let slot = k % WORKERS;
                k += 1;
                let victim = workers.lock().await.slots[slot].take();
                let Some((proc, id)) = victim else { continue };
                let at_ms = epoch_ms();
                let at = t0.elapsed();
                proc.kill().await;
                if let Err(e) = workers.lock().await.spawn(slot) {
                    eprintln!("chaos: restart after kill: {e}");
                }
                kills.lock().await.push(Kill {
                    n: k,
                    at,
                    at_ms,
                    worker: id,
                });
            }
        })
    };

    // Redis restart and stall run on this task, between the submits (the submitter is a
    // spawned task), so `redis` needs no sharing.
    let submitted: Arc<Mutex<Vec<Option<Accepted>>>> = Arc::new(Mutex::new(vec![None; n]));
    let stats: Arc<Mutex<SubmitStats>> = Arc::default();
    let submitter = {
        let http = http.clone();
        let base = base.clone();
        let submitted = submitted.clone();
        let stats = stats.clone();
        let concurrency = args.concurrency.max(1);
        tokio::spawn(async move {
            let sem = Arc::new(Semaphore::new(concurrency));
            let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut tasks = Vec::with_capacity(plan.len());
            for (i, q) in plan.into_iter().enumerate() {
                tick.tick().await;
                let Ok(permit) = sem.clone().acquire_owned().await else {
                    break;
                };
                let http = http.clone();
                let base = base.clone();
                let submitted = submitted.clone();
                let stats = stats.clone();
                tasks.push(tokio::spawn(async move {
                    let r = submit(&http, &base, &q, &stats).await;
                    drop(permit);
                    let mut s = stats.lock().await;
                    match r {
                        Some(a) => {
                            s.accepted += 1;
                            submitted.lock().await[i] = Some(a);
                        }
                        None => s.rejected += 1,
                    }
                }));
            }
            for t in tasks {
                let _ = t.await;
            }
        })
    };

    tokio::time::sleep_until((t0 + restart_at).into()).await;
    let restart_report = {
        // aof_delayed_fsync > 0 means everysec postponed a write() behind a slow fsync at
        // least once: only then can a SIGKILL lose writes Redis had already acknowledged.
        let delayed = redis_server::info_field(&mut con, "persistence", "aof_delayed_fsync").await;
        let down = redis.kill_and_restart().await?;
        let mut keys_after: Option<u64> = None;
        for _ in 0..40 {
            keys_after = redis::cmd("DBSIZE").query_async(&mut con).await.ok();
            if keys_after.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let restart_report = format!(
            "at {:.1} s, down {} ({} keys after the AOF replay; aof_delayed_fsync before the kill: {})",
            restart_at.as_secs_f64(),
            fmt_ms(down.as_millis()),
            keys_after.map_or("?".into(), |k| k.to_string()),
            delayed.unwrap_or_else(|| "?".into()),
        );
        println!("chaos: redis restarted {restart_report}");
        restart_report
    };
    tokio::time::sleep_until((t0 + stall_at).into()).await;
    redis.stall(STALL).await;
    let stall_report = format!(
        "at {:.1} s, SIGSTOP for {} s",
        stall_at.as_secs_f64(),
        STALL.as_secs()
    );
    println!("chaos: redis stalled {stall_report}");

    submitter.await.map_err(|e| format!("submitter: {e}"))?;
    let submit_took = t0.elapsed();
    println!(
        "chaos: submitted {n} in {:.1} s; waiting for every query to be final",
        submit_took.as_secs_f64()
    );
    killer.await.map_err(|e| format!("killer: {e}"))?;

    // Every accepted id, once.
    let accepted: Vec<Accepted> = submitted.lock().await.iter().flatten().cloned().collect();
    let mut by_query: HashMap<String, String> = HashMap::new();
    let mut ids: Vec<String> = Vec::new();
    {
        let mut s = stats.lock().await;
        for a in &accepted {
            match by_query.get(&a.query) {
                Some(id) if *id != a.id => s.id_mismatch += 1,
                Some(_) => {}
                None => {
                    by_query.insert(a.query.clone(), a.id.clone());
                    ids.push(a.id.clone());
                }
            }
        }
    }

    let drain_started = Instant::now();
    let mut pending: Vec<String> = ids.clone();
    while !pending.is_empty() && drain_started.elapsed() < drain {
        match unfinished(&mut con, &pending).await {
            Ok(left) => pending = left,
            Err(e) => eprintln!("chaos: reading states: {e}"),
        }
        if pending.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let drain_took = drain_started.elapsed();
    supervisor.abort();

    // The verdict comes from the public API, for every accepted id.
    let finals: Vec<(String, Result<View, String>)> = stream::iter(ids.clone())
        .map(|id| {
            let http = http.clone();
            let base = base.clone();
            async move {
                let r = read_view(&http, &base, &id).await;
                (id, r)
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let mut done = 0u64;
    let mut lost: Vec<String> = Vec::new();
    let mut dead_ids: Vec<(String, Option<String>)> = Vec::new();
    for (id, r) in finals {
        match r {
            Ok(v) if v.id == id && v.status == "done" => done += 1,
            // A record must exist: "failed" with nothing but history left means it vanished.
            Ok(v) if v.status == "failed" && !v.query.is_empty() => dead_ids.push((id, v.error)),
            Ok(v) => lost.push(format!("{id}: {} {:?}", v.status, v.error)),
            Err(e) => lost.push(format!("{id}: {e}")),
        }
    }
    let mut dead_by: BTreeMap<String, u64> = BTreeMap::new();
    for (id, error) in &dead_ids {
        let reason: Option<String> = redis::cmd("HGET")
            .arg(task_key("t", id))
            .arg("dr")
            .query_async(&mut con)
            .await
            .ok()
            .flatten();
        let reason = reason.unwrap_or_else(|| format!("? ({})", error.as_deref().unwrap_or("")));
        *dead_by.entry(reason).or_default() += 1;
    }

    // Completed twice: the simulator's per-key done counts against each task's lease losses.
    let sim_stats: SimStats = http
        .get(format!("{sim_url}/_sim/stats"))
        .send()
        .await
        .map_err(|e| format!("sim stats: {e}"))?
        .json()
        .await
        .map_err(|e| format!("sim stats: {e}"))?;
    let histories = Histories::read(&mut con, &ids).await?;
    let mut twice = 0u64;
    let mut twice_excused = 0u64;
    let mut unexcused: Vec<String> = Vec::new();
    let mut unknown_keys = 0u64;
    for (key, ks) in &sim_stats.keys {
        if ks.done <= 1 {
            continue;
        }
        twice += 1;
        let Some(id) = by_query.get(key) else {
            unknown_keys += 1;
            unexcused.push(format!("{key}: done {} (no such query)", ks.done));
            continue;
        };
        let losses = histories.lease_losses(id);
        if ks.done <= 1 + losses {
            twice_excused += 1;
        } else {
            unexcused.push(format!(
                "{key} ({id}): done {} times, {losses} lease losses",
                ks.done
            ));
        }
    }
    let total_losses: u64 = ids.iter().map(|id| histories.lease_losses(id)).sum();

    let mut kills = kills.lock().await.clone();
    kills.sort_by_key(|k| k.n);
    let self_exits = workers.lock().await.self_exits.clone();
    let s = stats.lock().await;

    // Shut everything down before printing, so the table is the last thing on screen.
    {
        let mut w = workers.lock().await;
        for slot in w.slots.iter_mut() {
            if let Some((p, _)) = slot.take() {
                p.kill().await;
            }
        }
    }
    web.kill().await;
    sim.kill().await;
    redis.stop().await;

    println!();
    println!("── chaos run ─────────────────────────────────────────────────────────────");
    println!(
        "submitted            {n} ({} distinct, {failing} answered `failed` by the upstream) in {:.1} s",
        distinct.len(),
        submit_took.as_secs_f64()
    );
    println!(
        "accepted / rejected  {} / {} (retried answers: {})",
        s.accepted,
        s.rejected,
        fmt_map(&s.retried)
    );
    println!(
        "unique tasks         {} — done {done}, dead {}; all final {:.1} s after the last submit",
        ids.len(),
        dead_ids.len(),
        drain_took.as_secs_f64()
    );
    println!(
        "LOST                 {}{}",
        lost.len(),
        if lost.is_empty() { "" } else { "   <-- FAIL" }
    );
    println!(
        "completed twice      {twice} keys (bound: each within its task's lease losses — {twice_excused} were; {} not){}",
        unexcused.len(),
        if unexcused.is_empty() { "" } else { "   <-- FAIL" }
    );
    println!(
        "dead by reason       {} (expected fatal: {failing})",
        fmt_map(&dead_by)
    );
    println!("same query, new id   {}", s.id_mismatch);
    println!(
        "upstream calls       {} over {} keys",
        sim_stats.calls,
        sim_stats.keys.len()
    );
    println!(
        "redis restart        {restart_report} (appendfsync {})",
        args.appendfsync
    );
    println!("redis stall          {stall_report}");
    println!(
        "worker self-exits    {}{}",
        self_exits.len(),
        if self_exits.is_empty() {
            String::new()
        } else {
            format!(" ({})", self_exits.join("; "))
        }
    );
    let killed: Vec<(&Kill, Recovery)> = kills
        .iter()
        .map(|k| (k, histories.recovery(&k.worker, k.at_ms)))
        .collect();
    let from_kills: usize = killed.iter().map(|(_, r)| r.held).sum();
    let measured: Vec<i64> = killed
        .iter()
        .filter(|(_, r)| r.held > 0)
        .filter_map(|(_, r)| r.recovered_ms)
        .collect();
    let unrecovered = killed
        .iter()
        .filter(|(_, r)| r.held > 0 && r.recovered_ms.is_none())
        .count();
    println!(
        "lease losses         {total_losses} (`lease_expired` in the task histories): {from_kills} from kills, {} from the stall/restart",
        total_losses.saturating_sub(from_kills as u64)
    );
    println!(
        "kills                {} (every {} s; {} held leases, {unrecovered} not recovered){}",
        kills.len(),
        KILL_EVERY.as_secs(),
        killed.iter().filter(|(_, r)| r.held > 0).count(),
        if unrecovered > 0 {
            "   <-- see below"
        } else {
            ""
        }
    );
    if !measured.is_empty() {
        let mut sorted = measured.clone();
        sorted.sort_unstable();
        let pct = |p: f64| sorted[((sorted.len() - 1) as f64 * p).round() as usize];
        let ms = |v: i64| fmt_ms(u128::try_from(v.max(0)).unwrap_or(0));
        println!(
            "recovery             min {} · median {} · p90 {} · max {} (lease {LEASE_MS} ms; SIGKILL → every task it held claimed again or dead)",
            ms(sorted[0]),
            ms(pct(0.5)),
            ms(pct(0.9)),
            ms(*sorted.last().unwrap_or(&0))
        );
    }
    println!("  kill      at  worker          held    reaped  recovered");
    for (k, r) in &killed {
        let ms = |v: Option<i64>| match v {
            _ if r.held == 0 => "-".to_string(),
            Some(v) => fmt_ms(u128::try_from(v.max(0)).unwrap_or(0)),
            None => "never".to_string(),
        };
        println!(
            "  {:>4}  {:>6.1}s  {:<14}  {:>4}  {:>8}  {:>9}",
            k.n,
            k.at.as_secs_f64(),
            k.worker,
            r.held,
            ms(r.reaped_ms),
            ms(r.recovered_ms)
        );
    }
    for l in lost.iter().take(20) {
        println!("lost: {l}");
    }
    for u in unexcused.iter().take(20) {
        println!("completed twice without a lease loss: {u}");
    }
    if unknown_keys > 0 {
        println!("{unknown_keys} simulator keys match no submitted query");
    }
    println!("logs: {}", logs.display());
    let pass = lost.is_empty() && unexcused.is_empty();
    println!("{}", if pass { "PASS" } else { "FAIL" });
    Ok(pass)
}

fn fmt_map(m: &BTreeMap<String, u64>) -> String {
    if m.is_empty() {
        return "none".into();
    }
    m.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[derive(Deserialize)]
struct SimStats {
    calls: u64,
    keys: BTreeMap<String, KeyStats>,
}

#[derive(Deserialize)]
struct KeyStats {
    done: u64,
}

/// Submits one query as a client would: retries 429 (after its Retry-After), 5xx and transport
/// errors for up to 60 s. None when it was never accepted.
async fn submit(
    http: &reqwest::Client,
    base: &str,
    query: &str,
    stats: &Mutex<SubmitStats>,
) -> Option<Accepted> {
    let started = Instant::now();
    let mut backoff = Duration::from_millis(100);
    // Two queries in three ask as one of four tenants (chosen by the text, so a duplicate asks
    // as the same one), the rest as nobody: the fair-share path (the fair zset, promotions of
    // polls, lease counts) goes through the same kills and restarts as the untenanted one.
    let tenant = match query.bytes().map(u64::from).sum::<u64>() % 6 {
        0 | 1 => None,
        n => Some(format!("chaos-t{n}")),
    };
    let body = match &tenant {
        Some(t) => serde_json::json!({ "query": query, "tenant": t }),
        None => serde_json::json!({ "query": query }),
    };
    loop {
        let r = http
            .post(format!("{base}/api/v1/queries"))
            .json(&body)
            .send()
            .await;
        let (kind, wait) = match r {
            Ok(r) if r.status().is_success() => match r.json::<View>().await {
                Ok(v) => {
                    return Some(Accepted {
                        id: v.id,
                        query: v.query,
                    })
                }
                Err(_) => ("unreadable 2xx".to_string(), backoff),
            },
            Ok(r) if r.status().as_u16() == 429 || r.status().is_server_error() => {
                let after = r
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<u64>().ok())
                    .map(Duration::from_secs);
                (r.status().as_u16().to_string(), after.unwrap_or(backoff))
            }
            Ok(r) => {
                eprintln!("chaos: {query:?} refused: {}", r.status());
                return None;
            }
            Err(e) if e.is_timeout() => ("timeout".to_string(), backoff),
            Err(_) => ("connection".to_string(), backoff),
        };
        *stats.lock().await.retried.entry(kind).or_default() += 1;
        if started.elapsed() > Duration::from_secs(60) {
            return None;
        }
        tokio::time::sleep(wait).await;
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

async fn read_view(http: &reqwest::Client, base: &str, id: &str) -> Result<View, String> {
    for _ in 0..5 {
        match http.get(format!("{base}/api/v1/queries/{id}")).send().await {
            Ok(r) if r.status().is_success() => return r.json().await.map_err(|e| e.to_string()),
            Ok(r) if r.status().as_u16() == 404 => return Err("404 unknown id".into()),
            Ok(_) | Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
    Err("no answer".into())
}

/// The ids among `ids` that are neither done (result stored) nor dead.
async fn unfinished(con: &mut ConnectionManager, ids: &[String]) -> Result<Vec<String>, String> {
    let mut left = Vec::new();
    for chunk in ids.chunks(500) {
        let mut p = redis::pipe();
        for id in chunk {
            p.cmd("EXISTS").arg(task_key("r", id));
            p.cmd("HGET").arg(task_key("t", id)).arg("s");
        }
        let answers: Vec<redis::Value> = p.query_async(con).await.map_err(|e| e.to_string())?;
        for (i, id) in chunk.iter().enumerate() {
            let result = matches!(answers.get(2 * i), Some(redis::Value::Int(1)));
            let state: Option<String> = answers
                .get(2 * i + 1)
                .and_then(|v| redis::from_redis_value(v.clone()).ok());
            if !(result || state.as_deref() == Some("dead")) {
                left.push(id.clone());
            }
        }
    }
    Ok(left)
}

fn epoch_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// One history entry, `at|kind|detail`.
struct Entry {
    at: i64,
    kind: String,
    detail: String,
}

/// Every task's history (`{q}:h:<id>`, kept for the result TTL after the task finished),
/// oldest entry first.
///
/// Recovery is read from here rather than by watching leases live: a SIGKILLed worker never
/// ends a lease itself, so exactly the tasks it held when it died carry a `lease_expired
/// from <worker>` entry stamped after the kill, followed by the next `claimed` (or `dead`).
/// That needs no snapshot racing the reaper, and works through a Redis stall at kill time.
struct Histories(HashMap<String, Vec<Entry>>);

impl Histories {
    async fn read(con: &mut ConnectionManager, ids: &[String]) -> Result<Histories, String> {
        let mut all = HashMap::new();
        for chunk in ids.chunks(500) {
            let mut p = redis::pipe();
            for id in chunk {
                p.cmd("LRANGE").arg(task_key("h", id)).arg(0).arg(-1);
            }
            let lists: Vec<Vec<String>> = p
                .query_async(con)
                .await
                .map_err(|e| format!("reading histories: {e}"))?;
            for (id, list) in chunk.iter().zip(lists) {
                all.insert(id.clone(), parse_history(&list));
            }
        }
        Ok(Histories(all))
    }

    fn lease_losses(&self, id: &str) -> u64 {
        self.0.get(id).map_or(0, |h| {
            h.iter().filter(|e| e.kind == "lease_expired").count() as u64
        })
    }

    /// The tasks `worker` held when it was killed at `kill_ms`, and when they came back.
    fn recovery(&self, worker: &str, kill_ms: i64) -> Recovery {
        let from = format!("from {worker} ");
        let mut r = Recovery::default();
        let mut all_back = true;
        let mut latest_back = 0i64;
        let mut latest_reap = 0i64;
        for h in self.0.values() {
            for (i, e) in h.iter().enumerate() {
                if e.kind != "lease_expired" || e.at < kill_ms || !e.detail.starts_with(&from) {
                    continue;
                }
                r.held += 1;
                latest_reap = latest_reap.max(e.at - kill_ms);
                match h[i + 1..]
                    .iter()
                    .find(|n| n.kind == "claimed" || n.kind == "dead")
                {
                    Some(n) => latest_back = latest_back.max(n.at - kill_ms),
                    None => all_back = false,
                }
            }
        }
        if r.held > 0 {
            r.reaped_ms = Some(latest_reap);
            r.recovered_ms = all_back.then_some(latest_back);
        }
        r
    }
}

/// A history list as stored (newest first, `at|kind|detail`) into entries, oldest first.
fn parse_history(list: &[String]) -> Vec<Entry> {
    let mut entries: Vec<Entry> = list
        .iter()
        .filter_map(|e| {
            let mut parts = e.splitn(3, '|');
            Some(Entry {
                at: parts.next()?.parse().ok()?,
                kind: parts.next()?.to_string(),
                detail: parts.next().unwrap_or_default().to_string(),
            })
        })
        .collect();
    entries.reverse();
    entries
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history(newest_first: &[&str]) -> Vec<Entry> {
        parse_history(
            &newest_first
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>(),
        )
    }

    #[test]
    fn recovery_is_the_next_claim_after_the_expiry_from_the_killed_worker() {
        let mut h = HashMap::new();
        // Held by w0-g1 at its kill (t=1000), reaped at 3900, claimed again at 4000.
        h.insert(
            "a".to_string(),
            history(&[
                "4100|completed|",
                "4000|claimed|by w1-g1 token 9",
                "3900|lease_expired|from w0-g1 token 7",
                "900|claimed|by w0-g1 token 7",
                "800|enqueued|",
            ]),
        );
        // Expired from w0-g1 *before* the kill (a stall): not the kill's doing.
        h.insert(
            "b".to_string(),
            history(&[
                "700|claimed|by w2-g1 token 5",
                "600|lease_expired|from w0-g1 token 3",
                "100|claimed|by w0-g1 token 3",
            ]),
        );
        // Held by w0-g1 at its kill and dead as poison in the same reap.
        h.insert(
            "c".to_string(),
            history(&[
                "4500|dead|poison: 3 lease losses",
                "4500|lease_expired|from w0-g1 token 8",
                "950|claimed|by w0-g1 token 8",
            ]),
        );
        // Same worker name as a prefix of another: w0-g10 must not count for w0-g1.
        h.insert(
            "d".to_string(),
            history(&["5000|lease_expired|from w0-g10 token 4"]),
        );
        let hs = Histories(h);
        let r = hs.recovery("w0-g1", 1000);
        assert_eq!(r.held, 2);
        assert_eq!(r.reaped_ms, Some(3500));
        assert_eq!(r.recovered_ms, Some(3500));
        assert_eq!(hs.lease_losses("b"), 1);
        assert_eq!(hs.recovery("w9", 0).held, 0);
    }

    #[test]
    fn a_held_task_never_claimed_again_is_not_recovered() {
        let mut h = HashMap::new();
        h.insert(
            "a".to_string(),
            history(&["3900|lease_expired|from w0-g1 token 7"]),
        );
        let r = Histories(h).recovery("w0-g1", 1000);
        assert_eq!((r.held, r.recovered_ms), (1, None));
    }
}
