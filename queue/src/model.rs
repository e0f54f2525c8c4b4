//! The public data types of the queue (docs/queue-api.md). All of them are plain data that
//! cross the Leptos server-function boundary, hence serde on everything.

use crate::id::TaskId;
use serde::{Deserialize, Serialize};

/// Queue settings. Everything that scripts need besides the call's own arguments.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueConfig {
    /// Queue name; every key lives under the hash tag `{name}`. No `{`, `}` allowed.
    pub name: String,
    /// How long a final result (and the finished task's history) is kept.
    pub result_ttl_ms: u64,
    /// Per-task history entries kept.
    pub history_cap: u32,
    /// Global event stream length (approximate, `MAXLEN ~`).
    pub events_cap: u32,
    /// Lease expiries before a task is dead as "poison" (0 = never).
    pub max_lease_losses: u32,
    /// What goes into per-task histories (`REPOLL_HISTORY`).
    #[serde(default)]
    pub history: HistoryLevel,
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

/// Who is waiting for a task. Workers claim interactive work first, but while background work
/// waits at least one claim in ten goes to it, so it never starves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    /// A person is waiting (the query page, and the API by default).
    #[default]
    Interactive,
    /// Nobody is waiting right now (e.g. refreshing popular queries).
    Background,
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
}

impl Default for EnqueuePolicy {
    fn default() -> Self {
        EnqueuePolicy {
            deadline_ms: 0,
            max_attempts: 5,
            priority: Priority::Interactive,
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
    /// A fresh result is stored for this query; no task was created.
    Stored(StoredResult),
}

/// A task handed to a worker by [`crate::Queue::claim`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claimed {
    pub id: TaskId,
    pub query: String,
    pub payload: String,
    /// Fencing token: pass it back to every call about this lease.
    pub token: u64,
    pub attempts: u32,
    pub polls: u32,
    pub max_attempts: u32,
    pub created_ms: i64,
    /// Whole-life deadline, 0 = none.
    pub deadline_ms: i64,
    pub lease_deadline_ms: i64,
}

/// One item of [`crate::Queue::complete_many`] (an addition to the contract: a worker that
/// finishes many tasks acks them in one script call).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Completion {
    pub id: TaskId,
    pub token: u64,
    pub result: String,
    pub latency_ms: u64,
}

/// One item of [`crate::Queue::reschedule_many`]: "still processing, poll again in
/// `delay_ms`", with the latest partial data if the upstream sent some.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reschedule {
    pub id: TaskId,
    pub token: u64,
    pub delay_ms: u64,
    pub partial: Option<String>,
    pub latency_ms: u64,
}

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
    Retrying {
        due_at: i64,
        attempts: u32,
    },
    /// reason: "max_attempts", "deadline" or "fatal".
    Dead {
        reason: String,
    },
}

/// Outcome of [`crate::Queue::reap`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reaped {
    pub requeued: Vec<TaskId>,
    pub dead: Vec<TaskId>,
}

/// State of a task. `Done` is a stored result (the live record is gone).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskState {
    Due,
    Leased,
    Dead,
    Done,
}

/// A live task record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Task {
    pub id: TaskId,
    pub query: String,
    pub payload: String,
    pub state: TaskState,
    #[serde(default)]
    pub priority: Priority,
    pub created_ms: i64,
    pub updated_ms: i64,
    /// Errors so far (reset by an admin retry of a dead task).
    pub attempts: u32,
    /// "Still processing" answers so far.
    pub polls: u32,
    pub max_attempts: u32,
    /// Token of the current or last lease (0 = never leased).
    pub token: u64,
    /// Lease holder while leased.
    pub worker: Option<String>,
    pub last_error: Option<String>,
    pub partial: Option<String>,
    /// Whole-life deadline, 0 = none.
    pub deadline_ms: i64,
    /// When it is next due (state Due only).
    pub due_ms: Option<i64>,
    /// Lease deadline (state Leased only).
    pub lease_deadline_ms: Option<i64>,
    /// "max_attempts", "deadline", "poison" or "fatal" (state Dead only).
    pub dead_reason: Option<String>,
}

/// A final result, kept for result_ttl_ms.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredResult {
    pub id: TaskId,
    pub query: String,
    pub data: String,
    pub completed_ms: i64,
    pub created_ms: i64,
    pub polls: u32,
}

/// Everything known about one id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskDetail {
    pub task: Option<Task>,
    pub result: Option<StoredResult>,
    /// Newest first.
    pub history: Vec<HistoryEntry>,
}

/// One per-task history entry, e.g. kind "claimed", detail "by w1 token 7".
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryEntry {
    pub at_ms: i64,
    pub kind: String,
    pub detail: String,
}

/// One entry of the global event stream. `id` is empty for queue-wide events (pause, purge).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub stream_id: String,
    pub at_ms: i64,
    pub kind: String,
    pub id: TaskId,
    pub detail: String,
}

/// A worker's heartbeat record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerInfo {
    pub id: String,
    pub host: String,
    pub pid: u32,
    pub started_ms: i64,
    pub in_flight: u32,
    pub processed: u64,
    pub failed: u64,
    /// Set by Redis on heartbeat (the value passed in is ignored).
    pub last_seen_ms: i64,
}

/// A lease that is past its deadline or close to it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseInfo {
    pub id: TaskId,
    pub query: String,
    pub worker: String,
    pub token: u64,
    pub deadline_ms: i64,
    /// now - deadline: positive when past the deadline.
    pub overdue_ms: i64,
}

/// Queue counts, each computed in O(log n).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// Due now (both priorities).
    pub ready: u64,
    /// Of `ready`, background tasks waiting in their list.
    #[serde(default)]
    pub ready_background: u64,
    /// Due later and never failed (waiting for the next poll).
    pub waiting: u64,
    /// Due later after at least one error (in backoff).
    pub retrying: u64,
    pub leased: u64,
    /// Leases past their deadline, not yet reaped.
    pub stuck: u64,
    pub dead: u64,
    /// Fresh stored results.
    pub results: u64,
    /// now - earliest due time among ready tasks (0 if none ready).
    pub oldest_ready_age_ms: i64,
    pub paused: bool,
    pub now_ms: i64,
    /// Last 60 minutes, oldest first.
    pub throughput: Vec<ThroughputBucket>,
}

/// Counters of one minute.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThroughputBucket {
    pub minute_ms: i64,
    pub completed: u64,
    pub failed: u64,
    pub polled: u64,
    /// Sum of time-to-result (completion - creation) of tasks completed in this minute.
    pub ttr_sum_ms: u64,
    pub ttr_count: u64,
}

/// Which set [`crate::Queue::list`] pages through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ListState {
    Ready,
    /// Due later (polls and retries).
    Waiting,
    Leased,
    Dead,
    Results,
}

/// Direction of a [`crate::Queue::list`]: by the set's score (due time, lease deadline, time of
/// death, completion), oldest first or newest first. A cursor belongs to the order it came from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Order {
    #[default]
    OldestFirst,
    NewestFirst,
}

/// One page of a listing. `items` is filled for task states, `results` for `Results`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Page {
    pub items: Vec<Task>,
    pub results: Vec<StoredResult>,
    /// Pass back to get the next page; None at the end.
    pub next_cursor: Option<String>,
    /// Members of the listed set right now.
    pub total: u64,
}

/// What [`crate::Queue::purge`] removes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PurgeTarget {
    /// Dead tasks (record and history).
    Dead,
    /// Stored results.
    Results,
    /// History lists of every known task and result (records stay).
    History,
    /// Every due task, ready or waiting (leased tasks are left to their workers).
    Queued,
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
