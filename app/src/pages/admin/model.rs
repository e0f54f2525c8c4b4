//! What the admin pages show, as plain data that also compiles to wasm.
//!
//! The queue's own types are server-only (the queue crate needs Redis and tokio), so each
//! has a mirror here with a `From` conversion on the server. Upstream data (partials,
//! results, errors) stays `String` and is rendered as text, never as HTML.

use serde::{Deserialize, Serialize};

/// One live task (due, leased or dead).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskRow {
    pub id: String,
    pub query: String,
    pub payload: String,
    /// "due", "leased", "dead" or "done".
    pub state: String,
    pub created_ms: i64,
    pub updated_ms: i64,
    pub attempts: u32,
    pub polls: u32,
    pub max_attempts: u32,
    pub token: u64,
    pub worker: Option<String>,
    pub last_error: Option<String>,
    pub partial: Option<String>,
    pub deadline_ms: i64,
    pub due_ms: Option<i64>,
    pub lease_deadline_ms: Option<i64>,
    pub dead_reason: Option<String>,
    /// Background priority (`"priority": "background"`); interactive otherwise.
    #[serde(default)]
    pub background: bool,
}

/// One stored final result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResultRow {
    pub id: String,
    pub query: String,
    pub data: String,
    pub completed_ms: i64,
    pub created_ms: i64,
    pub polls: u32,
}

/// One history entry of a task.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryRow {
    pub at_ms: i64,
    pub kind: String,
    pub detail: String,
}

/// Counters of one minute.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bucket {
    pub minute_ms: i64,
    pub completed: u64,
    pub failed: u64,
    pub polled: u64,
    pub ttr_sum_ms: u64,
    pub ttr_count: u64,
}

/// Queue counts as the overview shows them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatsView {
    pub ready: u64,
    /// Of `ready`, tasks of background priority.
    #[serde(default)]
    pub ready_background: u64,
    pub waiting: u64,
    pub retrying: u64,
    pub leased: u64,
    pub stuck: u64,
    pub dead: u64,
    pub results: u64,
    pub oldest_ready_age_ms: i64,
    pub paused: bool,
    pub now_ms: i64,
    pub throughput: Vec<Bucket>,
}

/// A worker as the workers table shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerRow {
    pub id: String,
    pub host: String,
    pub pid: u32,
    pub started_ms: i64,
    pub in_flight: u32,
    pub processed: u64,
    pub failed: u64,
    pub last_seen_ms: i64,
    /// Missed its heartbeats: probably dead (its entry expires soon).
    pub gone: bool,
}

/// A lease past its deadline or close to it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRow {
    pub id: String,
    pub query: String,
    pub worker: String,
    pub token: u64,
    pub deadline_ms: i64,
    /// Positive when past the deadline.
    pub overdue_ms: i64,
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

#[cfg(feature = "ssr")]
mod convert {
    use super::*;

    impl From<queue::Task> for TaskRow {
        fn from(t: queue::Task) -> Self {
            let state = match t.state {
                queue::TaskState::Due => "due",
                queue::TaskState::Leased => "leased",
                queue::TaskState::Dead => "dead",
                queue::TaskState::Done => "done",
            };
            TaskRow {
                id: t.id,
                query: t.query,
                payload: t.payload,
                state: state.into(),
                created_ms: t.created_ms,
                updated_ms: t.updated_ms,
                attempts: t.attempts,
                polls: t.polls,
                max_attempts: t.max_attempts,
                token: t.token,
                worker: t.worker,
                last_error: t.last_error,
                partial: t.partial,
                deadline_ms: t.deadline_ms,
                due_ms: t.due_ms,
                lease_deadline_ms: t.lease_deadline_ms,
                dead_reason: t.dead_reason,
                background: t.priority == queue::Priority::Background,
            }
        }
    }

    impl From<queue::StoredResult> for ResultRow {
        fn from(r: queue::StoredResult) -> Self {
            ResultRow {
                id: r.id,
                query: r.query,
                data: r.data,
                completed_ms: r.completed_ms,
                created_ms: r.created_ms,
                polls: r.polls,
            }
        }
    }

    impl From<queue::HistoryEntry> for HistoryRow {
        fn from(h: queue::HistoryEntry) -> Self {
            HistoryRow {
                at_ms: h.at_ms,
                kind: h.kind,
                detail: h.detail,
            }
        }
    }

    impl From<queue::Stats> for StatsView {
        fn from(s: queue::Stats) -> Self {
            StatsView {
                ready: s.ready,
                ready_background: s.ready_background,
                waiting: s.waiting,
                retrying: s.retrying,
                leased: s.leased,
                stuck: s.stuck,
                dead: s.dead,
                results: s.results,
                oldest_ready_age_ms: s.oldest_ready_age_ms,
                paused: s.paused,
                now_ms: s.now_ms,
                throughput: s
                    .throughput
                    .into_iter()
                    .map(|b| Bucket {
                        minute_ms: b.minute_ms,
                        completed: b.completed,
                        failed: b.failed,
                        polled: b.polled,
                        ttr_sum_ms: b.ttr_sum_ms,
                        ttr_count: b.ttr_count,
                    })
                    .collect(),
            }
        }
    }

    impl From<queue::LeaseInfo> for LeaseRow {
        fn from(l: queue::LeaseInfo) -> Self {
            LeaseRow {
                id: l.id,
                query: l.query,
                worker: l.worker,
                token: l.token,
                deadline_ms: l.deadline_ms,
                overdue_ms: l.overdue_ms,
            }
        }
    }

    impl WorkerRow {
        pub fn from_info(w: queue::WorkerInfo, now_ms: i64, gone_after_ms: i64) -> Self {
            WorkerRow {
                gone: now_ms.saturating_sub(w.last_seen_ms) > gone_after_ms,
                id: w.id,
                host: w.host,
                pid: w.pid,
                started_ms: w.started_ms,
                in_flight: w.in_flight,
                processed: w.processed,
                failed: w.failed,
                last_seen_ms: w.last_seen_ms,
            }
        }
    }
}

/// The queue is paused: since when and by whom (from the queue's pause flag, "at|who").
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PauseInfo {
    pub at_ms: i64,
    pub who: String,
}
