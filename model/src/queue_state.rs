//! Queue-wide views: counts and throughput, workers, the pause flag, the audit log, and the
//! pages a listing returns.

use serde::{Deserialize, Serialize};

use crate::histogram::Percentiles;
use crate::task::{StoredResult, Task};

/// Queue counts, each computed in O(log n).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
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
    /// Time to result of the tasks completed (ms), from their histogram; None when none
    /// completed (or in [`Stats::throughput`], which carries counts only).
    #[serde(default)]
    pub ttr: Option<Percentiles>,
    /// Polls each completed task needed.
    #[serde(default)]
    pub polls: Option<Percentiles>,
    /// Duration of the upstream calls that ended in this span (completions, polls, errors), ms.
    #[serde(default)]
    pub latency: Option<Percentiles>,
    /// Answers by freshness (counted by the queue's enqueue script, `{q}:tp` fields
    /// `<minute>:<name>`): from a fresh stored result, from a stale one, from nothing stored
    /// (a task created or joined, or only-if-cached with nothing), from a remembered failure.
    #[serde(default)]
    pub fresh: u64,
    #[serde(default)]
    pub stale: u64,
    #[serde(default)]
    pub miss: u64,
    #[serde(default)]
    pub negative: u64,
    /// Background refreshes started ahead of a hot result going stale.
    #[serde(default)]
    pub ahead: u64,
    /// Refresh tasks that died (their stored result is then answered stale-if-error).
    #[serde(default)]
    pub refresh_failed: u64,
    /// Tasks that went dead (each once, however many of its calls `failed` counted): read by
    /// `throughput` (the charts); [`Stats::throughput`] leaves it 0.
    #[serde(default)]
    pub dead: u64,
    /// Times the upstream's circuit breaker opened (by itself or by hand; a failed probe's
    /// reopening is not counted): the charts mark the span. Left out of the JSON when 0.
    #[serde(default, skip_serializing_if = "crate::task::is_zero_u64")]
    pub breaker_opened: u64,
}

impl ThroughputBucket {
    /// Every answer counted: fresh, stale, negative and miss.
    pub fn answers(&self) -> u64 {
        self.fresh + self.stale + self.negative + self.miss
    }

    /// Answers served from the store (fresh, stale or negative) without waiting for the
    /// upstream.
    pub fn hits(&self) -> u64 {
        self.fresh + self.stale + self.negative
    }

    /// Hits per answer in percent, None without answers.
    pub fn hit_ratio_pct(&self) -> Option<f64> {
        let all = self.answers();
        (all > 0).then(|| self.hits() as f64 * 100.0 / all as f64)
    }

    /// Adds another span's counters (not its histograms or percentiles) to this one.
    pub fn add_counts(&mut self, o: &ThroughputBucket) {
        self.completed += o.completed;
        self.failed += o.failed;
        self.polled += o.polled;
        self.ttr_sum_ms += o.ttr_sum_ms;
        self.ttr_count += o.ttr_count;
        self.fresh += o.fresh;
        self.stale += o.stale;
        self.miss += o.miss;
        self.negative += o.negative;
        self.ahead += o.ahead;
        self.refresh_failed += o.refresh_failed;
        self.dead += o.dead;
        self.breaker_opened += o.breaker_opened;
    }
}

/// A worker's heartbeat record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerInfo {
    pub id: String,
    pub host: String,
    pub pid: u32,
    pub started_ms: i64,
    pub in_flight: u32,
    /// Tasks this worker completed.
    pub completed: u64,
    /// Tasks this worker gave up on (dead).
    pub dead: u64,
    /// Set by Redis on heartbeat (the value passed in is ignored).
    pub last_seen_ms: i64,
    /// Resident memory of its process in bytes, as the process read it itself at its last
    /// heartbeat (Linux `/proc/self/status`); None where unknown.
    #[serde(default)]
    pub rss_bytes: Option<u64>,
    /// What it said it was doing at its last heartbeat.
    #[serde(default)]
    pub mode: WorkerMode,
    /// The last command an admin sent it (it stays until the entry goes); it has acted on it
    /// once `mode` says so.
    #[serde(default)]
    pub command: Option<WorkerCommand>,
}

/// What a worker is doing, as its heartbeat says. Ordered as a worker moves through them
/// (running, quiet, stopping: never back).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerMode {
    /// Claiming and running tasks.
    #[default]
    Running,
    /// Claims nothing new; finishes (and completes) what it holds, and keeps heartbeating.
    Quiet,
    /// Shutting down: finishing or releasing its calls within its grace, then leaving.
    Stopping,
}

impl WorkerMode {
    /// Its name in the registry and on the page.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerMode::Running => "running",
            WorkerMode::Quiet => "quiet",
            WorkerMode::Stopping => "stopping",
        }
    }

    /// The mode of a name ([`WorkerMode::as_str`]); None for anything else.
    pub fn parse(s: &str) -> Option<WorkerMode> {
        [WorkerMode::Running, WorkerMode::Quiet, WorkerMode::Stopping]
            .into_iter()
            .find(|m| m.as_str() == s)
    }
}

/// What an admin can tell a worker process through Redis (its registry entry), read on its
/// next heartbeat.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerCommand {
    /// Claim nothing new, finish what it holds ([`WorkerMode::Quiet`]).
    Quiet,
    /// Stop gracefully, as on SIGTERM ([`WorkerMode::Stopping`]).
    Stop,
}

impl WorkerCommand {
    /// Its name in the registry.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerCommand::Quiet => "quiet",
            WorkerCommand::Stop => "stop",
        }
    }

    /// The command of a name ([`WorkerCommand::as_str`]); None for anything else.
    pub fn parse(s: &str) -> Option<WorkerCommand> {
        [WorkerCommand::Quiet, WorkerCommand::Stop]
            .into_iter()
            .find(|c| c.as_str() == s)
    }

    /// The mode a worker is in once it has acted on this command.
    pub fn mode(self) -> WorkerMode {
        match self {
            WorkerCommand::Quiet => WorkerMode::Quiet,
            WorkerCommand::Stop => WorkerMode::Stopping,
        }
    }
}

impl WorkerInfo {
    /// Missed its heartbeats for longer than `gone_after_ms`: probably dead (its entry
    /// expires soon).
    pub fn is_gone(&self, now_ms: i64, gone_after_ms: i64) -> bool {
        now_ms.saturating_sub(self.last_seen_ms) > gone_after_ms
    }
}

/// The queue is paused: since when and by whom.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PauseInfo {
    pub at_ms: i64,
    pub who: String,
}

/// One tenant's share of a queue right now (the Upstreams page's busiest tenants).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantCount {
    /// The tenant's name ("" = the tasks of no tenant are not counted here).
    pub tenant: String,
    /// Its interactive tasks ready now, waiting their fair turn.
    pub ready: u64,
    /// Leases it holds (calls in flight), which its concurrency cap bounds.
    pub leased: u64,
}

/// The upstream's circuit breaker when it is not closed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BreakerInfo {
    /// `open` (claims wait) or `half_open` (one probe is out).
    pub state: BreakerState,
    /// When it opened.
    pub since_ms: i64,
    /// Open: when the cool-down ends and a probe may go. Half-open: the probe's lease deadline.
    pub until_ms: i64,
    /// The error that opened it (or "opened by hand").
    pub reason: String,
    /// `auto`, or the admin who opened it.
    pub by: String,
    /// Half-open: the task that is the probe.
    pub probe: Option<String>,
}

/// A breaker that is not closed (closed is the absence of [`BreakerInfo`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakerState {
    Open,
    HalfOpen,
}

/// One audit log entry: who did what, when, to how many.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    pub at_ms: i64,
    pub who: String,
    pub action: String,
    pub target: String,
    pub count: u64,
}

/// Which set a listing pages through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ListState {
    Ready,
    /// Due later (polls and retries).
    Waiting,
    Leased,
    Dead,
    Results,
}

/// Direction of a listing: by the set's score (due time, lease deadline, time of death,
/// completion), oldest first or newest first. A cursor belongs to the order it came from.
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

/// What a purge removes.
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

/// A bulk action's run and its progress, as the queue stores it (`{q}:bulk`) and the
/// dashboard shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkProgress {
    /// Random id of the run.
    pub run: String,
    /// The action's name (`queue::BulkAction::as_str`).
    pub action: String,
    /// The filter in words (`queue::BulkFilter::describe`).
    pub filter: String,
    /// Who started the run (the operator's name, as in the audit log).
    pub who: String,
    /// Tasks selected when the run started.
    pub total: u64,
    /// Tasks gone through so far.
    pub done: u64,
    /// Of those, tasks the action changed (the others had moved on meanwhile).
    pub changed: u64,
    /// `running`, `stopped`, `finished` or `failed`.
    pub state: String,
    /// When the run started (Redis time, ms).
    pub started_ms: i64,
    /// When it ended (Redis time, ms), or None while it runs.
    pub ended_ms: Option<i64>,
    /// Whether someone asked it to stop (`queue::Queue::bulk_stop`).
    pub stop_requested: bool,
}

impl BulkProgress {
    /// Whether the run is still going (state `running`).
    pub fn running(&self) -> bool {
        self.state == "running"
    }

    /// Share gone through, 0..=100.
    pub fn percent(&self) -> f64 {
        if self.total == 0 {
            100.0
        } else {
            (self.done as f64 * 100.0 / self.total as f64).min(100.0)
        }
    }
}

#[cfg(test)]
mod bulk_progress_tests {
    use super::BulkProgress;

    #[test]
    fn percent_of_a_run() {
        let r = BulkProgress {
            total: 2000,
            done: 500,
            ..BulkProgress::default()
        };
        assert_eq!(r.percent(), 25.0);
        assert_eq!(BulkProgress::default().percent(), 100.0);
    }
}
