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
//! and releases their leases with their tokens so they are due again at once. Shutdown is the
//! `run` future's, or an admin's `stop` read on a heartbeat ([`crate::control`]); an admin's
//! `quiet` only stops the claims (the loop's and the finishing tasks' next ones).

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use queue::{Queue, QueueError};
use rand::Rng;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::callback::Callbacks;
use crate::control::Control;
use crate::ctx::{local_ms, Counters, Ctx};
// Defined in ctx so the upkeep loops (which runtime starts) can use it without naming runtime;
// re-exported here, where it has always been public.
pub use crate::ctx::host_name;
use crate::policy::PolicyArgs;
use crate::telemetry;
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
    /// Heartbeat period into the process registry, in ms: a worker's entry, and a `serve`'s
    /// web process's (an entry lives 3 periods).
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

/// A configured worker; [`Worker::run`] drives it.
pub struct Worker {
    queue: Queue,
    pubsub: redis::Client,
    upstream: Upstream,
    callbacks: Option<Callbacks>,
    policy: PolicyArgs,
    args: WorkerArgs,
    id: String,
    control: Control,
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
            callbacks: None,
            policy,
            args,
            id,
            control: Control::new(),
        }
    }

    /// Shares `control` with the other workers of this process, so an admin's quiet or stop
    /// read by any of them acts on all ([`crate::control`]). Without it a worker has a switch
    /// of its own.
    pub fn with_control(mut self, control: Control) -> Worker {
        self.control = control;
        self
    }

    /// Signs callback URLs with `callbacks` (needed when the upstream's URL template holds
    /// `{callback_url}`; see [`crate::callback`]).
    pub fn with_callbacks(mut self, callbacks: Option<Callbacks>) -> Worker {
        self.callbacks = callbacks;
        self
    }

    /// This worker's id, as written to leases, history and the worker registry.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The settings this worker cannot run without: its slots, its lease, its policy, and a
    /// callback signer when the upstream URL template holds `{callback_url}`. [`Worker::run`]
    /// checks them first; a process calls this for every worker before it starts any of them
    /// or listens, so a setting it cannot work with stops the start instead of leaving a
    /// process that answers and never polls.
    pub fn check(&self) -> Result<(), WorkerError> {
        if self.args.concurrency == 0 {
            return Err(WorkerError::Config("concurrency must be >= 1".into()));
        }
        if self.args.lease_ms < 3 {
            return Err(WorkerError::Config("the lease must be >= 3 ms".into()));
        }
        self.policy.validate().map_err(WorkerError::Config)?;
        if self.upstream.wants_callback()
            && !self.callbacks.as_ref().is_some_and(|c| c.can_sign_urls())
        {
            let upstream = match self.queue.config().upstream.as_str() {
                "" => String::new(),
                named => format!("upstream {named:?}: "),
            };
            return Err(WorkerError::Config(format!(
                "{upstream}the upstream URL template holds {{callback_url}}: set \
                 REPOLL_CALLBACK_SECRET and REPOLL_CALLBACK_BASE_URL"
            )));
        }
        Ok(())
    }

    /// Runs until `shutdown` completes, then drains within the grace period, releases what is
    /// left, removes itself from the registry and reports. Fails only at start (Redis
    /// unreachable, the settings [`Worker::check`] refuses); later Redis errors are logged and
    /// retried.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()>,
    ) -> Result<WorkerReport, WorkerError> {
        self.check()?;
        let args = self.args;
        let clock_offset_ms = self.queue.now_ms().await? - local_ms();
        let label = telemetry::upstream_label(self.queue.config());
        telemetry::register_upstream(&label);
        let ctx = Arc::new(Ctx {
            upstream: self.upstream.labelled(&label),
            label,
            queue: self.queue.clone(),
            callbacks: self.callbacks,
            policy: self.policy,
            id: self.id.clone(),
            lease_ms: args.lease_ms,
            clock_offset_ms,
            counters: Counters::default(),
            stopping: AtomicBool::new(false),
            control: self.control.clone(),
            leases: Mutex::new(HashMap::new()),
        });
        // Stopped by the caller (a signal) or by an admin's `stop` (read on a heartbeat).
        let control = self.control;
        let shutdown = async move {
            tokio::select! {
                () = shutdown => {}
                () = control.stopped() => {}
            }
        };
        tracing::info!(worker = %ctx.id, concurrency = args.concurrency, "worker started");

        let wake = wake::Wake::new();
        let mut background = start_background(
            &ctx,
            &wake,
            self.queue.partition_wakeups(&self.pubsub),
            &args,
        );
        let mut tasks = JoinSet::new();
        claim_loop(&ctx, &wake, &args, &mut tasks, shutdown).await;
        let released = drain(&ctx, tasks, Duration::from_millis(args.grace_ms)).await;
        background.shutdown().await;
        if let Err(e) = ctx.queue.remove_worker(&ctx.id).await {
            tracing::warn!(error = %e, "could not remove the worker from the registry");
        }
        let report = report(&ctx, released);
        tracing::info!(?report, "worker stopped");
        Ok(report)
    }
}

/// The loops beside the claim loop: the wake-up listener, the heartbeat, the reaper and the
/// queue-depth gauge. They live in a JoinSet owned by the run: if it is dropped (the process
/// is killed, a test aborts it), they stop with it.
fn start_background(
    ctx: &Arc<Ctx>,
    wake: &Arc<wake::Wake>,
    wakeups: Vec<queue::Wakeups>,
    args: &WorkerArgs,
) -> JoinSet<()> {
    let mut background = JoinSet::new();
    let max_idle = Duration::from_millis(args.max_idle_ms.max(1));
    for (partition, w) in wakeups.into_iter().enumerate() {
        background.spawn(wake::listen(wake.clone(), partition, w, max_idle));
    }
    background.spawn(upkeep::heartbeat(
        ctx.clone(),
        ctx.now_ms(),
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
    if ctx.upstream.is_job_api() {
        // Jobs of cancelled or purged tasks, cancelled upstream at the reaper's pace.
        background.spawn(crate::cancels::upstream_cancels(
            ctx.clone(),
            args.reap_interval_ms,
        ));
    }
    background
}

/// Claims while there are free slots, then waits for whichever comes first: a wake-up, a
/// slot freed, the next due time (or the idle cap), or `shutdown`, which ends the loop.
async fn claim_loop(
    ctx: &Arc<Ctx>,
    wake: &wake::Wake,
    args: &WorkerArgs,
    tasks: &mut JoinSet<()>,
    shutdown: impl Future<Output = ()>,
) {
    let permits = Arc::new(Semaphore::new(args.concurrency));
    let max_idle = Duration::from_millis(args.max_idle_ms.max(1));
    let mut backoff = idle_delays(max_idle);
    let mut modes = ctx.control.subscribe();
    tokio::pin!(shutdown);
    loop {
        while let Some(done) = tasks.try_join_next() {
            log_join(done);
        }
        // Quiet: no claim, and no wake-up entry taken (it is another worker's to act on).
        let free = match ctx.control.claims() {
            true => permits.available_permits(),
            false => 0,
        };
        let wait = if free > 0 {
            match claim_batch(ctx, wake, args, &permits, tasks, free).await {
                Claimed::Full => {
                    backoff = idle_delays(max_idle);
                    continue;
                }
                Claimed::Some => next_wait(ctx, max_idle, &mut backoff, true).await,
                Claimed::None => next_wait(ctx, max_idle, &mut backoff, false).await,
                Claimed::Failed => Some(backoff.next().unwrap_or(max_idle)),
            }
        } else {
            Some(max_idle)
        };
        // Became due while we claimed: claim again.
        let Some(wait) = wait else { continue };
        // Idle (free slots): the listener may take a wake-up entry for this process.
        wake.set_idle(free > 0);
        tokio::select! {
            biased;
            () = &mut shutdown => break,
            Some(done) = tasks.join_next(), if !tasks.is_empty() => log_join(done),
            () = wake.notified(), if free > 0 => {}
            Ok(()) = modes.changed() => {}
            () = tokio::time::sleep(wait) => {}
        }
        wake.set_idle(false);
    }
}

/// What one claim call gave.
enum Claimed {
    /// As many tasks as free slots: there may be more due.
    Full,
    /// Fewer.
    Some,
    /// Nothing (nothing due, or the queue is paused).
    None,
    /// The call failed (logged).
    Failed,
}

/// One claim of up to `free` tasks, each started in its own task with a slot.
async fn claim_batch(
    ctx: &Arc<Ctx>,
    wake: &wake::Wake,
    args: &WorkerArgs,
    permits: &Arc<Semaphore>,
    tasks: &mut JoinSet<()>,
    free: usize,
) -> Claimed {
    let woken = wake.take_woken();
    let batch = match ctx
        .queue
        .claim_woken_at(&ctx.id, free, args.lease_ms, woken)
        .await
    {
        Ok(batch) => batch,
        Err(e) => {
            tracing::warn!(error = %e, "claim failed; backing off");
            return Claimed::Failed;
        }
    };
    let n = batch.len();
    if n > 0 {
        metrics::counter!(telemetry::CLAIMS, "upstream" => ctx.label.clone()).increment(n as u64);
        ctx.counters.claimed.fetch_add(n as u64, Ordering::Relaxed);
    }
    for c in batch {
        match permits.clone().try_acquire_owned() {
            Ok(permit) => {
                ctx.hold(&c.id, c.token);
                tasks.spawn(task::run(ctx.clone(), c, permit));
            }
            // Cannot happen (only this loop takes permits, and it asked for `free`); give the
            // task back rather than exceed C.
            Err(_) => {
                release(ctx, &c.id, c.token).await;
            }
        }
    }
    match n {
        0 => Claimed::None,
        n if n == free => Claimed::Full,
        _ => Claimed::Some,
    }
}

/// The waits of an idle loop that finds nothing it can claim (or cannot reach Redis): from
/// [`MIN_IDLE`], doubling, up to the idle cap. No jitter: the cap is a promise (a lost wake-up
/// costs at most that long).
fn idle_delays(max_idle: Duration) -> ExponentialBackoff {
    ExponentialBuilder::default()
        .with_min_delay(MIN_IDLE.min(max_idle))
        .with_max_delay(max_idle)
        .without_max_times()
        .build()
}

/// How long to wait after a claim that left slots free: until the earliest due time, capped
/// at the idle cap. `None`: something became due while we claimed (after a claim that got
/// work), so claim again now. Due yet unclaimable after an empty claim (a paused queue):
/// back off from 10 ms up to the cap, never spin.
async fn next_wait(
    ctx: &Ctx,
    max_idle: Duration,
    backoff: &mut ExponentialBackoff,
    got_work: bool,
) -> Option<Duration> {
    if got_work {
        *backoff = idle_delays(max_idle);
    }
    match ctx.queue.next_due_ms().await {
        Ok(Some(due)) => {
            let until = due - ctx.now_ms();
            if until > 0 {
                Some(Duration::from_millis(until.unsigned_abs()).min(max_idle))
            } else if got_work {
                None
            } else {
                Some(backoff.next().unwrap_or(max_idle))
            }
        }
        Ok(None) => Some(max_idle),
        Err(e) => {
            tracing::warn!(error = %e, "next_due_ms failed");
            Some(max_idle)
        }
    }
}

/// Shutdown: no more claims (finishing tasks stop asking for their next one); in-flight calls
/// get the grace period, the rest are aborted and their leases given back (returns how many).
async fn drain(ctx: &Ctx, mut tasks: JoinSet<()>, grace: Duration) -> u64 {
    ctx.stopping.store(true, Ordering::Relaxed);
    // The heartbeat says "stopping" at once, and this process's other workers stop too (their
    // shutdown is the same signal, or the same admin's stop).
    ctx.control.stop();
    tracing::info!(worker = %ctx.id, in_flight = tasks.len(), "stopping: draining in-flight calls");
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
        if release(ctx, &id, token).await {
            released += 1;
        }
    }
    released
}

fn report(ctx: &Ctx, released: u64) -> WorkerReport {
    let c = &ctx.counters;
    WorkerReport {
        worker_id: ctx.id.clone(),
        claimed: c.claimed.load(Ordering::Relaxed),
        completed: c.completed.load(Ordering::Relaxed),
        rescheduled: c.rescheduled.load(Ordering::Relaxed),
        retried: c.retried.load(Ordering::Relaxed),
        dead: c.dead.load(Ordering::Relaxed),
        stale: c.stale.load(Ordering::Relaxed),
        renewed: c.renewed.load(Ordering::Relaxed),
        released,
    }
}

/// Gives a lease back (due now). False if it was not ours any more.
async fn release(ctx: &Ctx, id: &str, token: u64) -> bool {
    match ctx.queue.release(id, Some(token), &ctx.id).await {
        Ok(true) => {
            metrics::counter!(telemetry::RELEASES, "upstream" => ctx.label.clone()).increment(1);
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

/// `host-pid-random`: unique across hosts, processes and restarts of one pid.
pub fn default_worker_id() -> String {
    let host = host_name();
    let host = if host.is_empty() {
        "host".to_string()
    } else {
        host
    };
    let suffix: u16 = rand::thread_rng().gen();
    format!("{host}-{}-{suffix:04x}", std::process::id())
}
