//! The public data types of the queue (docs/queue-api.md): its settings, the arguments and
//! outcomes of its calls, and (re-exported from the `model` crate) the views of tasks, results
//! and the queue that the server and the browser share.

use serde::{Deserialize, Serialize};

// The types the browser shows too live in the shared `model` crate; the queue's own API types
// (settings, call arguments and outcomes) stay here.
pub use model::{
    failed_body_start, AuditEntry, BreakerInfo, BreakerState, DeadReason, Event, FailedCall,
    Histogram, HistoryEntry, LeaseInfo, ListState, Notice, Order, Page, PauseInfo, Percentiles,
    PollSummary, Priority, PurgeTarget, ResultStory, Stats, StoredResult, Task, TaskDetail, TaskId,
    TaskState, TaskTrace, TenantCount, ThroughputBucket, WorkerCommand, WorkerInfo, WorkerMode,
    FAILED_BODY_MAX,
};

/// Queue settings. Everything that scripts need besides the call's own arguments.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QueueConfig {
    /// Queue name; every key lives under the hash tag `{name}`. No `{`, `}` allowed.
    pub name: String,
    /// How long a stored result is fresh: answered from the store with no upstream call
    /// (`REPOLL_RESULT_TTL_MS` / `fresh_for_ms`). The result itself is kept for
    /// [`QueueConfig::result_life_ms`], the end of its last window ([`FreshnessWindows`]).
    pub result_ttl_ms: u64,
    /// What happens after the fresh window: stale while refreshing, stale if the refresh
    /// fails, failed answers cached, refresh-ahead of hot results.
    #[serde(default)]
    pub freshness: FreshnessWindows,
    /// Per-task history entries kept.
    pub history_cap: u32,
    /// Global event stream length (approximate, `MAXLEN ~`).
    pub events_cap: u32,
    /// Lease expiries before a task is dead as "poison" (0 = never).
    pub max_lease_losses: u32,
    /// What goes into per-task histories (`REPOLL_HISTORY`).
    #[serde(default)]
    pub history: HistoryLevel,
    /// When the upstream's circuit breaker opens by itself, and for how long.
    #[serde(default)]
    pub breaker: BreakerConfig,
    /// The named upstream this queue serves ("" = the default one). Each upstream has a queue
    /// of its own (its own hash tag, breaker and rate limit); the name goes into the task ids
    /// (`TaskId::of_upstream_query`), so one query text sent to two APIs is two tasks with
    /// two ids, and an id names its upstream's task only.
    #[serde(default)]
    pub upstream: String,
    /// Per-tenant limits on this queue's claims (fair shares between callers).
    #[serde(default)]
    pub tenants: TenantLimits,
    /// Partitions of the queue (`REPOLL_PARTITIONS`; 1 = one hash tag `{name}`, the layout of
    /// a queue that fits one Redis node). With P > 1 each task lives in partition
    /// hash(id) mod P under its own tag `{name#i…}`, so the tasks and results spread over every
    /// node of a Redis Cluster; the control keys (sessions, audit, workers, the upstream's rate
    /// limit) stay under `{name}`. See the `partition` module.
    #[serde(default = "one_partition")]
    pub partitions: u16,
}

fn one_partition() -> u16 {
    1
}

impl QueueConfig {
    /// How long a stored result (and a finished task's history) is kept: to the end of its
    /// last window, fresh + stale + stale-if-error.
    pub fn result_life_ms(&self) -> u64 {
        self.result_ttl_ms
            .saturating_add(self.freshness.stale_ms)
            .saturating_add(self.freshness.stale_if_error_ms)
    }

    /// How long before the end of the fresh window a hot result is refreshed ahead: a quarter
    /// of the window, at most ten minutes (enough for a slow upstream's chain of polls; a
    /// refresh that takes longer is answered stale, at once, meanwhile).
    pub fn refresh_ahead_lead_ms(&self) -> u64 {
        (self.result_ttl_ms / 4).min(REFRESH_AHEAD_LEAD_MAX_MS)
    }
}

/// The longest lead of a refresh-ahead ([`QueueConfig::refresh_ahead_lead_ms`]).
pub const REFRESH_AHEAD_LEAD_MAX_MS: u64 = 10 * 60_000;

/// The most asks counted per stored result for refresh-ahead (two decimal digits inside the
/// stored value: `hot_asks` is at most this).
pub const MAX_HOT_ASKS: u32 = 99;

/// The windows of a stored result after its fresh window (`QueueConfig::result_ttl_ms`), as a
/// caching front has them (RFC 5861 `stale-while-revalidate` / `stale-if-error`, Varnish grace
/// and keep, nginx `proxy_cache_use_stale`), and refresh-ahead of hot results.
///
/// ```text
/// completed ── fresh ──▶ ── stale ──▶ ── stale-if-error ──▶ gone
///              answered    answered at    answered only while the refresh
///              as it is    once; one      has failed, the breaker is open
///                          refresh runs   or the upstream is paused
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FreshnessWindows {
    /// After the fresh window, how long the result is still answered at once (marked stale)
    /// while one refresh runs.
    pub stale_ms: u64,
    /// After the stale window, how long the result is still answered when its refresh failed
    /// (dead, breaker open, upstream paused).
    pub stale_if_error_ms: u64,
    /// Negative caching: how long a query whose task died for good (the upstream answered
    /// `failed`, a permanent 4xx) is answered from its dead record before a new ask starts a
    /// new task. Also how long a failed refresh waits before the next ask may start another.
    pub failed_ms: u64,
    /// Asks within its fresh window that make a result hot: it is refreshed in the background
    /// shortly before it would go stale. 0 = no refresh-ahead. At most [`MAX_HOT_ASKS`].
    pub hot_asks: u32,
    /// Refreshes ahead started per minute, per upstream: a partitioned queue's partitions
    /// share it so that their shares of any one minute sum to exactly this (enqueue.lua).
    pub refresh_ahead_per_min: u32,
}

impl Default for FreshnessWindows {
    fn default() -> Self {
        FreshnessWindows {
            stale_ms: 24 * 3600 * 1000,
            stale_if_error_ms: 24 * 3600 * 1000,
            failed_ms: 60_000,
            hot_asks: 3,
            refresh_ahead_per_min: 60,
        }
    }
}

/// Limits per tenant (who asked: [`EnqueuePolicy::tenant`]) on one queue, so one caller's
/// backlog cannot take every slot of the upstream. Claims go round between the tenants with
/// ready work whatever these are (prelude/fair.lua); these cap a tenant further.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TenantLimits {
    /// Leases one tenant may hold at once (calls in flight); 0 = no cap.
    pub concurrency: u32,
    /// Claims (upstream calls, polls included) a second one tenant may start; 0 = no limit.
    pub rate_per_sec: f64,
    /// Claims a tenant may start at once above its rate (at least 1).
    pub burst: u32,
}

/// The upstream's circuit breaker (ARCHITECTURE.md, "Circuit breaker"): it opens when, over the
/// last minute, the upstream's errors (timeouts, refused connections, 5xx, 429, bad bodies —
/// not a permanent 4xx, not an answer "failed") number at least `failures` and are at least
/// `error_percent` of the calls. While open, claims take nothing and an error of a call still
/// out costs its task no attempt; after `cooldown_ms` one task goes as the probe: its success
/// closes the breaker, its error opens it again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BreakerConfig {
    /// Errors within a minute that open the breaker; 0 = it never opens by itself (an admin
    /// may still open it).
    pub failures: u32,
    /// Least share of the minute's calls, in percent, that must have failed (0..=100).
    pub error_percent: u32,
    /// How long it stays open before a probe, in ms.
    pub cooldown_ms: u64,
}

impl Default for BreakerConfig {
    /// Off by itself; 50 % and 30 s once `failures` is set.
    fn default() -> Self {
        BreakerConfig {
            failures: 0,
            error_percent: 50,
            cooldown_ms: 30_000,
        }
    }
}

/// How much of a task's life is written to its history list. Whatever the level, the enqueue,
/// the live lease and the completion are shown from the record and the result themselves, so
/// they cost no history write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HistoryLevel {
    /// Also every claim and every "still processing" poll (a list entry per poll).
    Full,
    /// Transitions an operator needs later: errors (with the claim they ended), lost leases,
    /// deaths, admin actions. A task that goes enqueue -> polls -> done writes nothing.
    #[default]
    Transitions,
    /// Nothing stored; the derived entries only.
    Off,
}

impl HistoryLevel {
    /// The name scripts and settings use.
    pub fn as_str(self) -> &'static str {
        match self {
            HistoryLevel::Full => "full",
            HistoryLevel::Transitions => "transitions",
            HistoryLevel::Off => "off",
        }
    }
}

impl std::fmt::Display for HistoryLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for HistoryLevel {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "full" => Ok(HistoryLevel::Full),
            "transitions" => Ok(HistoryLevel::Transitions),
            "off" => Ok(HistoryLevel::Off),
            other => Err(format!(
                "unknown history level {other:?} (full, transitions or off)"
            )),
        }
    }
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            name: "repoll".into(),
            result_ttl_ms: 24 * 3600 * 1000,
            history_cap: 100,
            events_cap: 10_000,
            max_lease_losses: 3,
            history: HistoryLevel::Transitions,
            freshness: FreshnessWindows::default(),
            breaker: BreakerConfig::default(),
            upstream: String::new(),
            tenants: TenantLimits::default(),
            partitions: 1,
        }
    }
}

/// How a new task is to be run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnqueuePolicy {
    /// Whole-life deadline from creation in ms; 0 = none.
    pub deadline_ms: u64,
    /// Errors allowed before the task is dead; 0 = unlimited.
    pub max_attempts: u32,
    /// Joining a live task with a higher priority raises it.
    #[serde(default)]
    pub priority: Priority,
    /// Who asked ("" = nobody in particular): tenants share the upstream fairly and each may
    /// be capped ([`TenantLimits`]). At most 64 bytes of `[A-Za-z0-9._:@-]`
    /// ([`crate::is_valid_tenant`]). A join keeps the task's own tenant.
    #[serde(default)]
    pub tenant: String,
    /// The oldest stored result this caller takes as fresh, in ms (`Cache-Control: max-age`);
    /// None = the queue's fresh window; `Some(0)` = none (`no-cache`: a refresh starts now, or
    /// the running one is joined). It can only shorten the queue's window.
    #[serde(default)]
    pub max_age_ms: Option<u64>,
    /// Never start a task (`only-if-cached`): answer what is stored or running, or
    /// [`Enqueued::NotCached`].
    #[serde(default)]
    pub only_if_cached: bool,
}

impl Default for EnqueuePolicy {
    fn default() -> Self {
        EnqueuePolicy {
            deadline_ms: 0,
            max_attempts: 5,
            priority: Priority::Interactive,
            tenant: String::new(),
            max_age_ms: None,
            only_if_cached: false,
        }
    }
}

/// Outcome of [`crate::Queue::enqueue`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Enqueued {
    /// A new task, due now.
    Created(Task),
    /// The task already existed (due or leased); the caller shares it.
    Joined(Task),
    /// A fresh result is stored for this query; no task was created. (A refresh-ahead may
    /// have started in the background.)
    Stored(StoredResult),
    /// A stored result that is not fresh for this caller, and its refresh: the one created or
    /// joined now, or one that died within the failed window (`refresh.state == Dead`: the
    /// result is served stale-if-error and no new refresh starts yet), or None when the caller
    /// asked only for what is cached.
    Stale {
        /// The stored result.
        result: StoredResult,
        /// Its refresh, when there is one.
        refresh: Option<Task>,
        /// The refresh was created by this call.
        created: bool,
    },
    /// Negative caching: the query's task died for good (reason `fatal`) within the failed
    /// window; it is answered from its dead record and nothing starts.
    Negative(Task),
    /// Only what is cached was asked for, and nothing is stored or running.
    NotCached,
}

/// A task handed to a worker by [`crate::Queue::claim`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claimed {
    /// The task's id.
    pub id: TaskId,
    /// The normalised query to send upstream.
    pub query: String,
    /// The producer's payload, as enqueued.
    pub payload: String,
    /// Fencing token: pass it back to every call about this lease.
    pub token: u64,
    /// Errors recorded so far (each failed call is one attempt).
    pub attempts: u32,
    /// "Still processing" answers so far (polls are not attempts).
    pub polls: u32,
    /// Attempts allowed before the task is dead.
    pub max_attempts: u32,
    /// When the task was enqueued (Redis time, ms).
    pub created_ms: i64,
    /// Whole-life deadline, 0 = none.
    pub deadline_ms: i64,
    /// When this lease ends unless renewed (Redis time, ms).
    pub lease_deadline_ms: i64,
    /// A refresh of a stored result (record field `rf`): its outcome is a refresh done or
    /// failed (the worker's `repoll_refreshes_total`).
    #[serde(default)]
    pub refresh: bool,
    /// The trace contexts of whoever made and joined the task (only while tracing is on):
    /// the worker's `process` span links to them.
    #[serde(default)]
    pub trace: TaskTrace,
    /// The tenant that made the task ("" = none): its `process` span says it.
    #[serde(default)]
    pub tenant: String,
    /// A job API's job for this life of the task (record field `j`): its id or the URL to
    /// follow, stored by the reschedule after the submit. `None`: not submitted yet (or the
    /// repeating kind).
    #[serde(default)]
    pub job: Option<String>,
}

/// One item of [`crate::Queue::complete_many`] (an addition to the contract: a worker that
/// finishes many tasks acks them in one script call).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Completion {
    /// The task.
    pub id: TaskId,
    /// The lease's fencing token.
    pub token: u64,
    /// The final result to store.
    pub result: String,
    /// How long the upstream call took (for the latency charts).
    pub latency_ms: u64,
}

/// One item of [`crate::Queue::reschedule_many`]: "still processing, poll again in
/// `delay_ms`", with the latest partial data if the upstream sent some.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reschedule {
    /// The task.
    pub id: TaskId,
    /// The lease's fencing token.
    pub token: u64,
    /// How long until the next poll.
    pub delay_ms: u64,
    /// The latest partial data to keep, if the upstream sent some.
    pub partial: Option<String>,
    /// How long the upstream call took (for the latency charts).
    pub latency_ms: u64,
    /// The job a job API's submit made, stored with this reschedule (under the same fencing
    /// token) unless the task has one already; at most [`MAX_JOB_BYTES`].
    pub job: Option<String>,
}

/// Longest job reference a task stores (a job API's id or URL).
pub const MAX_JOB_BYTES: usize = 2048;

/// What to do after an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Retry {
    /// Retry after this many ms (if attempts and deadline allow).
    After(u64),
    /// Give up now (reason "fatal").
    Dead,
}

/// Outcome of [`crate::Queue::fail`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Failed {
    /// Due again later.
    Retrying {
        /// When it is due again (Redis time, ms).
        due_at: i64,
        /// Attempts so far, this one included.
        attempts: u32,
    },
    /// Gave up: max attempts, deadline or fatal.
    Dead {
        /// Why it died.
        reason: DeadReason,
    },
}

/// Outcome of [`crate::Queue::reap`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reaped {
    /// Tasks whose lease expired, due again now.
    pub requeued: Vec<TaskId>,
    /// Tasks dead for a lost lease: too many lost (`poison`), or lost after their whole-life
    /// deadline (`deadline`).
    pub dead: Vec<TaskId>,
}

/// Pub/Sub channel names. Messages are JSON `{"kind","id","at_ms"}` (plus `ids` for a batch):
/// notices that something changed, never state. (Workers are woken through the wake-up list,
/// not Pub/Sub: `queue::Wakeups`.)
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Channels {
    /// Every state change of any task, and queue-wide admin actions.
    pub dashboard: String,
}

impl Channels {
    pub(crate) fn new(name: &str) -> Channels {
        Channels {
            dashboard: format!("{{{name}}}:dashboard"),
        }
    }
}
