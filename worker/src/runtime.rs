//! The worker: a claim loop bounded by a semaphore of C permits, woken by the queue's wake-up
//! list (one idle worker per unit of new work: [`crate::wake`]) or at the next due time, with
//! graceful shutdown.
//!
//! The loop claims at most as many tasks as it has free permits (one `claim` round trip per
//! batch), hands each to [`crate::task::run`], and then waits for whichever comes first: a
//! wake-up, the earliest due time (`next_due_ms`), a finished task freeing a permit, the
//! safety cap (1 s by default, for a missed wake-up), or shutdown. It never sleeps a fixed tick
//! and never spins: when something is due but cannot be claimed (a paused queue), the wait grows
//! from 10 ms up to the cap.
//!
//! On shutdown it stops claiming, gives in-flight calls the grace period, then aborts the rest
//! and releases their leases with their tokens so they are due again at once.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use queue::{Queue, QueueError};
use rand::Rng;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::policy::PolicyArgs;
use crate::telemetry as m;
use crate::upstream::Upstream;
use crate::{task, upkeep, wake};

/// Shortest wait when work is due but none could be claimed (e.g. the queue is paused).
const MIN_IDLE: Duration = Duration::from_millis(10);

/// Worker settings: flags, each with a `REPOLL_*` variable.
#[derive(clap::Args, Clone, Debug, PartialEq)]
pub struct WorkerArgs {
    /// Calls in flight at once (C).
    #[arg(long = "concurrency", env = "REPOLL_CONCURRENCY", default_value_t = 16)]
    pub concurrency: usize,
    /// Lease of a claimed task, in ms: if the worker dies, the task comes back after this.
    /// Calls running longer than a third of it renew it.
    #[arg(long = "lease-ms", env = "REPOLL_LEASE_MS", default_value_t = 30_000)]
    pub lease_ms: u64,
    /// On shutdown, how long in-flight calls may finish before their leases are released.
    #[arg(long = "grace-ms", env = "REPOLL_GRACE_MS", default_value_t = 10_000)]
    pub grace_ms: u64,
    /// Heartbeat period into the worker registry, in ms (the entry lives 3 periods).
    #[arg(
        long = "heartbeat-ms",
        env = "REPOLL_HEARTBEAT_MS",
        default_value_t = 5_000
    )]
    pub heartbeat_ms: u64,
    /// Worker id (default host-pid-random).
    #[arg(long = "worker-id", env = "REPOLL_WORKER_ID")]
    pub worker_id: Option<String>,
    /// How often this worker's reaper looks for expired leases, in ms.
    #[arg(
        long = "reap-interval-ms",
        env = "REPOLL_REAP_INTERVAL_MS",
        default_value_t = 1_000
    )]
    pub reap_interval_ms: u64,
    /// Most expired leases one reap handles (keeps each reap cheap).
    #[arg(long = "reap-batch", env = "REPOLL_REAP_BATCH", default_value_t = 100)]
    pub reap_batch: usize,
    /// How often queue depth gauges are refreshed from `stats()`, in ms (0 = never).
    #[arg(
        long = "stats-interval-ms",
        env = "REPOLL_STATS_INTERVAL_MS",
        default_value_t = 5_000
    )]
    pub stats_interval_ms: u64,
    /// Longest sleep without a wake-up, in ms: the safety net for a missed wake-up entry.
    #[arg(
        long = "max-idle-ms",
        env = "REPOLL_MAX_IDLE_MS",
        default_value_t = 1_000
    )]
    pub max_idle_ms: u64,
}

impl Default for WorkerArgs {
    /// The flags' defaults (their `#[arg]` attributes are the one place a default is written), without reading the environment.
    fn default() -> Self {
        crate::clap_defaults()
    }
}

/// What one run did, returned when it stops.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct WorkerReport {
    pub worker_id: String,
    pub claimed: u64,
    pub completed: u64,
    pub rescheduled: u64,
    pub retried: u64,
    pub dead: u64,
    pub stale: u64,
    /// Lease renewals of long calls (each one moved the lease deadline).
    pub renewed: u64,
    /// Leases given back on shutdown.
    pub released: u64,
}

/// Why a worker could not run.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("queue: {0}")]
    Queue(#[from] QueueError),
    #[error("config: {0}")]
    Config(String),
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub claimed: AtomicU64,
    pub completed: AtomicU64,
    pub rescheduled: AtomicU64,
    pub retried: AtomicU64,
    pub dead: AtomicU64,
    pub stale: AtomicU64,
    pub renewed: AtomicU64,
}

/// What the claim loop, the tasks and the upkeep loops share.
pub(crate) struct Ctx {
    pub queue: Queue,
    pub upstream: Upstream,
    pub policy: PolicyArgs,
    pub id: String,
    pub lease_ms: u64,
    /// Redis `TIME` minus the local clock, measured at start: task times are Redis times.
    pub clock_offset_ms: i64,
    pub counters: Counters,
    /// Set when shutdown begins: finishing tasks stop asking for their next one.
    pub stopping: AtomicBool,
    /// Leases this worker holds: task id -> token, for release on shutdown.
    leases: Mutex<HashMap<String, u64>>,
}

impl Ctx {
    /// Now, in Redis time.
    pub fn now_ms(&self) -> i64 {
        local_ms() + self.clock_offset_ms
    }

    pub fn hold(&self, id: &str, token: u64) {
        self.lock().insert(id.to_string(), token);
    }

    pub fn forget(&self, id: &str) {
        self.lock().remove(id);
    }

    pub fn in_flight(&self) -> usize {
        self.lock().len()
    }

    fn take_all(&self) -> Vec<(String, u64)> {
        self.lock().drain().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, u64>> {
        self.leases.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A configured worker; [`Worker::run`] drives it.
pub struct Worker {
    queue: Queue,
    pubsub: redis::Client,
    upstream: Upstream,
    policy: PolicyArgs,
    args: WorkerArgs,
    id: String,
}

impl Worker {
    /// `pubsub` opens the dedicated connection an idle worker blocks on for wake-ups
    /// (`redis::Client::open(REDIS_URL)`; on a cluster, any node).
    pub fn new(
        queue: Queue,
        pubsub: redis::Client,
        upstream: Upstream,
        policy: PolicyArgs,
        args: WorkerArgs,
    ) -> Worker {
        let id = args.worker_id.clone().unwrap_or_else(default_worker_id);
        Worker {
            queue,
            pubsub,
            upstream,
            policy,
            args,
            id,
        }
    }

    /// This worker's id, as written to leases, history and the worker registry.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Runs until `shutdown` completes, then drains within the grace period, releases what is
    /// left, removes itself from the registry and reports. Fails only at start (Redis
    /// unreachable, bad settings); later Redis errors are logged and retried.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()>,
    ) -> Result<WorkerReport, WorkerError> {
        let args = self.args;
        if args.concurrency == 0 {
            return Err(WorkerError::Config("concurrency must be >= 1".into()));
        }
        if args.lease_ms < 3 {
            return Err(WorkerError::Config("the lease must be >= 3 ms".into()));
        }
        self.policy.validate().map_err(WorkerError::Config)?;
        let clock_offset_ms = self.queue.now_ms().await? - local_ms();
        let ctx = Arc::new(Ctx {
            queue: self.queue.clone(),
            upstream: self.upstream,
            policy: self.policy,
            id: self.id.clone(),
            lease_ms: args.lease_ms,
            clock_offset_ms,
            counters: Counters::default(),
            stopping: AtomicBool::new(false),
            leases: Mutex::new(HashMap::new()),
        });
        let started_ms = ctx.now_ms();
        tracing::info!(worker = %ctx.id, concurrency = args.concurrency, "worker started");

        // Background loops live in a JoinSet owned by this future: if the future is dropped
        // (the process is killed, a test aborts it), they stop with it.
        let wake = wake::Wake::new();
        let max_idle = Duration::from_millis(args.max_idle_ms.max(1));
        let mut background = JoinSet::new();
        background.spawn(wake::listen(
            wake.clone(),
            self.queue.wakeups(self.pubsub),
            max_idle,
        ));
        background.spawn(upkeep::heartbeat(
            ctx.clone(),
            started_ms,
            args.heartbeat_ms,
        ));
        background.spawn(upkeep::reaper(
            ctx.clone(),
            wake.clone(),
            args.reap_interval_ms,
            args.reap_batch,
        ));
        if args.stats_interval_ms > 0 {
            background.spawn(upkeep::queue_depth(ctx.clone(), args.stats_interval_ms));
        }

        let permits = Arc::new(Semaphore::new(args.concurrency));
        let mut tasks: JoinSet<()> = JoinSet::new();
        let mut idle = MIN_IDLE;
        tokio::pin!(shutdown);

        loop {
            while let Some(done) = tasks.try_join_next() {
                log_join(done);
            }
            let free = permits.available_permits();
            let mut wait = max_idle;
            if free > 0 {
                let woken = wake.take_woken();
                match ctx
                    .queue
                    .claim_woken(&ctx.id, free, args.lease_ms, woken)
                    .await
                {
                    Ok(batch) => {
                        let n = batch.len();
                        if n > 0 {
                            metrics::counter!(m::CLAIMS).increment(n as u64);
                            ctx.counters.claimed.fetch_add(n as u64, Ordering::Relaxed);
                            idle = MIN_IDLE;
                        }
                        for c in batch {
                            match permits.clone().try_acquire_owned() {
                                Ok(permit) => {
                                    ctx.hold(&c.id, c.token);
                                    tasks.spawn(task::run(ctx.clone(), c, permit));
                                }
                                // Cannot happen (only this loop takes permits, and it asked
                                // for `free`); give the task back rather than exceed C.
                                Err(_) => {
                                    release(&ctx, &c.id, c.token).await;
                                }
                            }
                        }
                        if n == free {
                            // Full batch: there may be more due; claim again as permits free.
                            continue;
                        }
                        wait = match ctx.queue.next_due_ms().await {
                            Ok(Some(due)) => {
                                let until = due - ctx.now_ms();
                                if until > 0 {
                                    Duration::from_millis(until.unsigned_abs()).min(max_idle)
                                } else if n > 0 {
                                    // Became due while we claimed: claim again.
                                    continue;
                                } else {
                                    // Due yet unclaimable (paused): back off, never spin.
                                    let w = idle;
                                    idle = (idle * 2).min(max_idle);
                                    w
                                }
                            }
                            Ok(None) => max_idle,
                            Err(e) => {
                                tracing::warn!(error = %e, "next_due_ms failed");
                                max_idle
                            }
                        };
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "claim failed; backing off");
                        wait = idle;
                        idle = (idle * 2).min(max_idle);
                    }
                }
            }
            // Idle (free slots): the listener may take a wake-up entry for this process.
            wake.set_idle(free > 0);
            tokio::select! {
                biased;
                () = &mut shutdown => break,
                Some(done) = tasks.join_next(), if !tasks.is_empty() => log_join(done),
                () = wake.notified(), if free > 0 => {}
                () = tokio::time::sleep(wait) => {}
            }
            wake.set_idle(false);
        }

        // Shutdown: no more claims (finishing tasks stop asking for their next one); in-flight
        // calls get the grace period.
        ctx.stopping.store(true, Ordering::Relaxed);
        tracing::info!(worker = %ctx.id, in_flight = tasks.len(), "stopping: draining in-flight calls");
        let grace = Duration::from_millis(args.grace_ms);
        let drained = tokio::time::timeout(grace, async {
            while let Some(done) = tasks.join_next().await {
                log_join(done);
            }
        })
        .await;
        if drained.is_err() {
            tasks.shutdown().await;
        }
        let mut released = 0;
        for (id, token) in ctx.take_all() {
            if release(&ctx, &id, token).await {
                released += 1;
            }
        }
        background.shutdown().await;
        if let Err(e) = ctx.queue.remove_worker(&ctx.id).await {
            tracing::warn!(error = %e, "could not remove the worker from the registry");
        }
        let c = &ctx.counters;
        let report = WorkerReport {
            worker_id: ctx.id.clone(),
            claimed: c.claimed.load(Ordering::Relaxed),
            completed: c.completed.load(Ordering::Relaxed),
            rescheduled: c.rescheduled.load(Ordering::Relaxed),
            retried: c.retried.load(Ordering::Relaxed),
            dead: c.dead.load(Ordering::Relaxed),
            stale: c.stale.load(Ordering::Relaxed),
            renewed: c.renewed.load(Ordering::Relaxed),
            released,
        };
        tracing::info!(?report, "worker stopped");
        Ok(report)
    }
}

/// Gives a lease back (due now). False if it was not ours any more.
async fn release(ctx: &Ctx, id: &str, token: u64) -> bool {
    match ctx.queue.release(id, Some(token), &ctx.id).await {
        Ok(true) => {
            metrics::counter!(m::RELEASES).increment(1);
            true
        }
        Ok(false) | Err(QueueError::StaleToken) | Err(QueueError::NotFound) => false,
        Err(e) => {
            tracing::warn!(%id, error = %e, "release failed; the lease will expire instead");
            false
        }
    }
}

fn log_join(done: Result<(), tokio::task::JoinError>) {
    if let Err(e) = done {
        if e.is_panic() {
            tracing::error!(error = %e, "a task panicked; its lease will expire and it comes back");
        }
    }
}

fn local_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// `host-pid-random`: unique across hosts, processes and restarts of one pid.
pub fn default_worker_id() -> String {
    let host = gethostname::gethostname().to_string_lossy().into_owned();
    let host = if host.is_empty() {
        "host".to_string()
    } else {
        host
    };
    let suffix: u16 = rand::thread_rng().gen();
    format!("{host}-{}-{suffix:04x}", std::process::id())
}
