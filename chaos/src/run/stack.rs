//! The processes of a chaos run: a private Redis, the faulty simulator, the web process and
//! the three worker processes (replaced when killed), started and stopped here. Every use of
//! `redis_server` is in this file, so replacing it touches one place.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use redis::aio::ConnectionManager;
use tokio::sync::Mutex;

use super::{RunArgs, LEASE_MS, PARTITIONS, WORKERS};
use crate::{
    common::{fmt_ms, repoll_cmd, wait_http},
    procs::{self, Proc},
    redis_server::{self, RedisServer},
};

/// Everything a run starts, with the Redis connection the checks read through.
pub(super) struct Stack {
    redis: RedisServer,
    pub(super) http: reqwest::Client,
    sim: Proc,
    pub(super) sim_url: String,
    web: Proc,
    /// The web process's address, `http://…`.
    pub(super) base: String,
    pub(super) workers: Arc<Mutex<Workers>>,
    pub(super) con: ConnectionManager,
}

impl Stack {
    /// Starts Redis, the simulator, the web process and the workers, in that order, each
    /// waited for before the next.
    pub(super) async fn start(args: &RunArgs, seed: u64, logs: &Path) -> Result<Stack, String> {
        let bin = &args.repoll_bin;
        let redis = RedisServer::start(&args.appendfsync, logs).await?;
        let url = redis.url();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(20))
            .build()
            .map_err(|e| e.to_string())?;
        let (sim, sim_url) = start_sim(bin, seed, logs, &http).await?;
        let partitions = args.partitions.to_string();
        let _ = PARTITIONS.set(usize::from(args.partitions));
        let (web, base) = start_web(bin, &url, &partitions, logs, &http).await?;
        let workers = start_workers(
            bin,
            &url,
            &upstream_env(&sim_url, args.job_api),
            &partitions,
            logs,
        )?;
        let con = redis_server::connect(&url).await?;
        Ok(Stack {
            redis,
            http,
            sim,
            sim_url,
            web,
            base,
            workers,
            con,
        })
    }

    /// SIGKILLs Redis and restarts it on its append-only file; the report says how long it
    /// was down and how many keys the replay brought back.
    pub(super) async fn restart_redis(&mut self, restart_at: Duration) -> Result<String, String> {
        let con = &mut self.con;
        // aof_delayed_fsync > 0 means everysec postponed a write() behind a slow fsync at
        // least once: only then can a SIGKILL lose writes Redis had already acknowledged.
        let delayed = redis_server::info_field(con, "persistence", "aof_delayed_fsync").await;
        let down = self.redis.kill_and_restart().await?;
        let mut keys_after: Option<u64> = None;
        for _ in 0..40 {
            keys_after = redis::cmd("DBSIZE").query_async(con).await.ok();
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
        Ok(restart_report)
    }

    /// SIGSTOPs Redis for `stall`; the report says when and how long.
    pub(super) async fn stall_redis(&self, stall_at: Duration, stall: Duration) -> String {
        self.redis.stall(stall).await;
        let stall_report = format!(
            "at {:.1} s, SIGSTOP for {} s",
            stall_at.as_secs_f64(),
            stall.as_secs()
        );
        println!("chaos: redis stalled {stall_report}");
        stall_report
    }

    /// Stops every process, workers first, Redis last.
    pub(super) async fn stop(self) {
        {
            let mut w = self.workers.lock().await;
            for slot in w.slots.iter_mut() {
                if let Some((p, _)) = slot.take() {
                    p.kill().await;
                }
            }
        }
        self.web.kill().await;
        self.sim.kill().await;
        self.redis.stop().await;
    }
}

/// The simulated upstream with every fault on. The rates sum to 12.5 % of calls; a hang
/// outlasts the workers' upstream timeout, so it is seen as a timeout.
async fn start_sim(
    bin: &Path,
    seed: u64,
    logs: &Path,
    http: &reqwest::Client,
) -> Result<(Proc, String), String> {
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
    let mut sim = Proc::spawn("repoll sim", repoll_cmd(bin, &["sim"], &sim_env), &sim_log)
        .map_err(|e| format!("repoll sim: {e}"))?;
    let sim_url = format!("http://{sim_addr}");
    wait_http(
        http,
        &format!("{sim_url}/_sim/stats"),
        Duration::from_secs(20),
        &mut sim,
        &sim_log,
    )
    .await?;
    Ok((sim, sim_url))
}

/// The web process, without embedded workers, with the rate limit out of the way (one client
/// address submits everything) and no first-answer wait (it would only slow the submitter;
/// the queue path is the same).
async fn start_web(
    bin: &Path,
    url: &str,
    partitions: &str,
    logs: &Path,
    http: &reqwest::Client,
) -> Result<(Proc, String), String> {
    let web_port = procs::free_port().map_err(|e| e.to_string())?;
    let web_addr = format!("127.0.0.1:{web_port}");
    let web_env: Vec<(String, String)> = [
        ("REPOLL_RATE_PER_MIN", "1000000"),
        ("REPOLL_RATE_BURST", "100000"),
        ("REPOLL_FIRST_ANSWER_MS", "0"),
        ("REPOLL_ADMIN_PASSWORD", "chaos-admin-not-used"),
        ("REPOLL_PARTITIONS", partitions),
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
            bin,
            &[
                "serve",
                "--workers",
                "0",
                "--redis-url",
                url,
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
        http,
        &format!("{base}/readyz"),
        Duration::from_secs(30),
        &mut web,
        &web_log,
    )
    .await?;
    Ok((web, base))
}

/// How the workers reach the simulator: its repeating API, or (`--job-api`) its predictions
/// as a job API with an idempotency key.
fn upstream_env(sim_url: &str, job_api: bool) -> Vec<(String, String)> {
    let pairs: Vec<(&str, String)> = if job_api {
        vec![
            (
                "REPOLL_UPSTREAM_SUBMIT_URL",
                format!("{sim_url}/v1/predictions"),
            ),
            (
                "REPOLL_UPSTREAM_SUBMIT_BODY",
                r#"{"input": {"q": "{key}"}}"#.into(),
            ),
            ("REPOLL_UPSTREAM_POLL_URL", "body:/urls/get".into()),
            ("REPOLL_UPSTREAM_DATA_POINTER", "/output".into()),
            (
                "REPOLL_UPSTREAM_IDEMPOTENCY_HEADER",
                "Idempotency-Key".into(),
            ),
        ]
    } else {
        vec![(
            "REPOLL_UPSTREAM_URL",
            format!("{sim_url}/api/query?q={{key}}"),
        )]
    };
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// The worker processes: a short lease and quick polls and reaps, so a killed worker's tasks
/// come back within seconds.
fn start_workers(
    bin: &Path,
    url: &str,
    upstream: &[(String, String)],
    partitions: &str,
    logs: &Path,
) -> Result<Arc<Mutex<Workers>>, String> {
    let mut worker_env: Vec<(String, String)> = upstream.to_vec();
    worker_env.extend(
        [
            ("REDIS_URL", url.to_string()),
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
            ("REPOLL_PARTITIONS", partitions.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v)),
    );
    let mut workers = Workers {
        bin: bin.to_path_buf(),
        env: worker_env,
        log_dir: logs.to_path_buf(),
        slots: (0..WORKERS).map(|_| None).collect(),
        generation: vec![0; WORKERS],
        self_exits: Vec::new(),
    };
    for slot in 0..WORKERS {
        workers.spawn(slot)?;
    }
    Ok(Arc::new(Mutex::new(workers)))
}

/// The three worker slots; a killed or crashed worker is replaced under a new id.
pub(super) struct Workers {
    pub(super) bin: PathBuf,
    pub(super) env: Vec<(String, String)>,
    pub(super) log_dir: PathBuf,
    pub(super) slots: Vec<Option<(Proc, String)>>,
    pub(super) generation: Vec<u32>,
    /// Workers that exited without being killed by the suite.
    pub(super) self_exits: Vec<String>,
}

impl Workers {
    pub(super) fn spawn(&mut self, slot: usize) -> Result<(), String> {
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
    pub(super) fn respawn_exited(&mut self) -> Result<(), String> {
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
