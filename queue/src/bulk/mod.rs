//! Bulk actions by filter: pick the tasks of one state whose last error, query text and age
//! match, count them, then retry / cancel / purge them chunk by chunk in the background, with
//! progress in Redis and a way to stop.
//!
//! No new script: selection is plain reads (pages of the state's zset or lists, then one
//! pipelined HMGET of the short record fields per page), and each chunk goes through the
//! per-task admin scripts (retry.lua, cancel.lua, purge.lua), which re-check every task's
//! state, so a task that moved on since it was selected is left alone. The filter's text
//! parts are therefore evaluated once, when the run starts (a snapshot of ids, at most the
//! per-action limit); the state is re-checked per task when it is acted on.
//!
//! One run at a time per queue: `{q}:bulk:lock` (SET NX with a TTL renewed every chunk, so a
//! web process that dies mid-run frees it within [`LOCK_MS`]); `{q}:bulk` holds the current or
//! last run's progress (a hash, kept [`KEEP_MS`] after the end) and its stop request, so any
//! web process can show the progress bar and stop the run. The lock is taken *before* the
//! tasks are selected (a large selection takes a while): from the operator's click on, the
//! run exists, and a Stop sent while it still selects is kept in `{q}:bulk:stop` (naming the
//! run's lock) and ends the run before its first chunk.
//!
//! Here the filter and the run's types; `select` reads the candidates slot after slot, `run`
//! starts, works through and stops a run.

mod run;
pub(crate) mod select;

use serde::{Deserialize, Serialize};

use crate::model::TaskId;
use crate::queue::Queue;

/// Tasks one bulk action may touch unless configured otherwise (`REPOLL_BULK_LIMIT`).
pub const DEFAULT_BULK_LIMIT: u64 = 10_000;
/// Tasks per chunk: one retry/purge script call (or this many cancel calls) between two
/// progress updates and stop checks.
pub const BULK_CHUNK: usize = 100;
/// Candidates (members of the state's set) a selection looks at, at most. Past it the count is
/// a lower bound and says so ([`BulkSelection::complete`] is false).
pub const BULK_SCAN_MAX: u64 = 200_000;
/// Members read per page while selecting.
const SCAN_PAGE: usize = 500;
/// The run lock's time to live, renewed with every chunk.
pub const LOCK_MS: u64 = 60_000;
/// How long the last run's progress stays readable after it ended.
pub const KEEP_MS: u64 = 24 * 3600 * 1000;

/// The state a bulk action selects from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BulkState {
    /// Dead: out of attempts, past its deadline, or failed for good (the dead zset).
    #[default]
    Dead,
    /// Due later: waiting for the next poll or a retry (the due zset).
    Waiting,
    /// In a ready list.
    Ready,
    /// Held by a worker under a lease (the lease zset).
    Leased,
}

impl BulkState {
    /// Every state, in the order the dashboard offers them.
    pub const ALL: [BulkState; 4] = [
        BulkState::Dead,
        BulkState::Waiting,
        BulkState::Ready,
        BulkState::Leased,
    ];

    /// The state named `s` ([`BulkState::as_str`]), or None for any other text.
    pub fn parse(s: &str) -> Option<BulkState> {
        BulkState::ALL.into_iter().find(|x| x.as_str() == s)
    }

    /// The state's name in forms, URLs and the audit log ("dead", "waiting", …).
    pub fn as_str(self) -> &'static str {
        match self {
            BulkState::Dead => "dead",
            BulkState::Waiting => "waiting",
            BulkState::Ready => "ready",
            BulkState::Leased => "leased",
        }
    }

    /// The record's `s` field of a task in this state.
    fn record_state(self) -> &'static str {
        match self {
            BulkState::Dead => "dead",
            BulkState::Waiting | BulkState::Ready => "due",
            BulkState::Leased => "leased",
        }
    }
}

/// What a bulk run does to each selected task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BulkAction {
    /// Dead: run again (attempts reset). Waiting: make due now.
    Retry,
    /// Remove a live task for good (its history stays for the result TTL).
    Cancel,
    /// Remove a dead or waiting task with its history.
    Purge,
}

impl BulkAction {
    /// Every action, in the order the dashboard offers them.
    pub const ALL: [BulkAction; 3] = [BulkAction::Retry, BulkAction::Cancel, BulkAction::Purge];

    /// The action named `s` ([`BulkAction::as_str`]), or None for any other text.
    pub fn parse(s: &str) -> Option<BulkAction> {
        BulkAction::ALL.into_iter().find(|x| x.as_str() == s)
    }

    /// The action's name in forms, URLs and the audit log ("retry", "cancel", "purge").
    pub fn as_str(self) -> &'static str {
        match self {
            BulkAction::Retry => "retry",
            BulkAction::Cancel => "cancel",
            BulkAction::Purge => "purge",
        }
    }

    /// Whether the action means anything for tasks in `state` (retry: dead or waiting; purge:
    /// dead or waiting; cancel: every live state).
    pub fn applies_to(self, state: BulkState) -> bool {
        match self {
            BulkAction::Retry | BulkAction::Purge => {
                matches!(state, BulkState::Dead | BulkState::Waiting)
            }
            BulkAction::Cancel => true,
        }
    }
}

/// Which time of a task the window looks at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TimeField {
    /// The last state change (for a dead task: when it died).
    #[default]
    Updated,
    /// When the task was enqueued.
    Created,
}

/// Which tasks a bulk action selects. Text matches are case-insensitive substrings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkFilter {
    /// The state the tasks are selected from.
    pub state: BulkState,
    /// Part of the last error's text.
    pub error: Option<String>,
    /// Part of the query text.
    pub query: Option<String>,
    /// Only tasks whose `time_field` lies within this many ms before now.
    pub within_ms: Option<u64>,
    /// Which time `within_ms` looks at.
    pub time_field: TimeField,
    /// Exactly this tenant (who asked first); `Some("")`: tasks of no tenant.
    #[serde(default)]
    pub tenant: Option<String>,
    /// Only these tasks (the rows an operator ticked), instead of the state's whole set: the
    /// same run, bounded by the same limit, each task's state still checked (the record's
    /// state: `waiting` and `ready` are both "due" there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ids: Option<Vec<TaskId>>,
    /// Only tasks whose last error is of this class (`model::error_class::ErrorClass::slug`,
    /// e.g. "http-503").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// Only tasks whose last error is of this group (`model::error_class::group_of`'s key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
}

impl BulkFilter {
    /// [`BulkFilter::describe`], with an error group named by its class and message pattern as
    /// `sample` (a task of the group) shows them, and that task named — never a group by its
    /// hash alone (a purge's audit entry must say what it removed): `dead, error group HTTP
    /// 503 "simulated outage" (158b78473f23f9c4), e.g. task 1a2b3c4d5e6f`.
    pub fn describe_with(&self, sample: Option<&BulkSample>) -> String {
        let mut text = self.describe();
        let Some(s) = sample else { return text };
        if let Some(g) = &self.group {
            let group = model::error_class::group_of(s.error.as_deref(), s.dead_reason.as_deref());
            if group.key == *g {
                let message: String = group.message.chars().take(120).collect();
                text = text.replace(
                    &format!("error group {g}"),
                    &format!("error group {} {message:?} ({g})", group.class.label()),
                );
            }
        }
        if self.group.is_some() || self.class.is_some() {
            let id = s.id.to_string();
            text.push_str(&format!(", e.g. task {}", &id[..id.len().min(12)]));
        }
        text
    }

    /// The filter in words, for the audit log: `dead, error contains "HTTP 503", updated in
    /// the last 2 h`.
    pub fn describe(&self) -> String {
        let mut parts = vec![self.state.as_str().to_string()];
        if let Some(ids) = &self.ids {
            parts.push(format!(
                "{} chosen by id",
                if ids.len() == 1 {
                    "1 task".to_string()
                } else {
                    format!("{} tasks", ids.len())
                }
            ));
        }
        if let Some(e) = self.error.as_deref().filter(|s| !s.is_empty()) {
            parts.push(format!("error contains {e:?}"));
        }
        if let Some(q) = self.query.as_deref().filter(|s| !s.is_empty()) {
            parts.push(format!("query contains {q:?}"));
        }
        if let Some(c) = &self.class {
            parts.push(format!("error class {c}"));
        }
        if let Some(g) = &self.group {
            parts.push(format!("error group {g}"));
        }
        match self.tenant.as_deref() {
            Some("") => parts.push("no tenant".to_string()),
            Some(t) => parts.push(format!("tenant {t:?}")),
            None => {}
        }
        if let Some(ms) = self.within_ms {
            let field = match self.time_field {
                TimeField::Updated => "updated",
                TimeField::Created => "created",
            };
            let span = if ms % 3_600_000 == 0 {
                format!("{} h", ms / 3_600_000)
            } else if ms % 60_000 == 0 {
                format!("{} min", ms / 60_000)
            } else {
                format!("{ms} ms")
            };
            parts.push(format!("{field} in the last {span}"));
        }
        parts.join(", ")
    }

    /// Whether a record (its `q`, `e`, `c`, `u`, `s`, `tn`, `dr` fields) matches; `cutoff` =
    /// now − window.
    fn matches(&self, f: &[Option<String>], cutoff: Option<i64>) -> bool {
        let field = |i: usize| f.get(i).and_then(|v| v.as_deref());
        if let Some(class) = &self.class {
            if model::error_class::classify(field(1), field(6)).slug() != *class {
                return false;
            }
        }
        if let Some(group) = &self.group {
            if model::error_class::group_of(field(1), field(6)).key != *group {
                return false;
            }
        }
        if let Some(t) = self.tenant.as_deref() {
            if f.get(5).cloned().flatten().unwrap_or_default() != t {
                return false;
            }
        }
        let contains = |field: &Option<String>, needle: &Option<String>| match needle
            .as_deref()
            .filter(|n| !n.is_empty())
        {
            None => true,
            Some(n) => field
                .as_deref()
                .is_some_and(|v| v.to_lowercase().contains(&n.to_lowercase())),
        };
        if !contains(&f[0], &self.query) || !contains(&f[1], &self.error) {
            return false;
        }
        match cutoff {
            None => true,
            Some(cutoff) => {
                let created = f[2].as_deref().and_then(|s| s.parse::<i64>().ok());
                let at = match self.time_field {
                    TimeField::Created => created,
                    // `u` omitted means "never changed since created".
                    TimeField::Updated => f[3]
                        .as_deref()
                        .and_then(|s| s.parse::<i64>().ok())
                        .or(created),
                };
                at.is_some_and(|at| at >= cutoff)
            }
        }
    }
}

/// What a filter selects right now.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkSelection {
    /// The matching ids, at most the `keep` asked for, in the state's order.
    pub ids: Vec<TaskId>,
    /// Matching tasks (all of them, also past `keep`).
    pub matched: u64,
    /// Members of the state's set looked at.
    pub scanned: u64,
    /// Every member was looked at (false past [`BULK_SCAN_MAX`]: `matched` is a lower bound).
    pub complete: bool,
    /// The first matching task, to name what a filter by error group means in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample: Option<BulkSample>,
}

/// One task a selection matched: its id, last error and dead reason as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkSample {
    /// The task.
    pub id: TaskId,
    /// Its last error (record field `e`).
    pub error: Option<String>,
    /// Why it died, if dead (record field `dr`).
    pub dead_reason: Option<String>,
}

/// A run's progress, as stored in `{q}:bulk` and shown by the dashboard (a shared type: the
/// page shows it as the queue wrote it).
pub use model::BulkProgress;

/// Why [`Queue::bulk_begin`] did not start a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BulkRefused {
    /// The action does not apply to the filter's state (e.g. retry leased tasks).
    NotApplicable,
    /// Nothing matches.
    Nothing,
    /// More tasks match than one action may touch.
    OverLimit {
        /// Tasks that match.
        matched: u64,
        /// The most one action may touch.
        limit: u64,
    },
    /// More tasks match than the count the operator confirmed.
    CountGrew {
        /// The count the operator was shown and confirmed.
        confirmed: u64,
        /// Tasks that match now.
        matched: u64,
    },
    /// Another run is in progress.
    Busy(Box<BulkProgress>),
}

/// A started run: the selected ids, acted on by [`BulkJob::run`].
#[derive(Debug)]
pub struct BulkJob {
    queue: Queue,
    /// The value this run holds `{q}:bulk:lock` with (its run id, action and operator).
    lock: String,
    action: BulkAction,
    state: BulkState,
    ids: Vec<TaskId>,
    progress: BulkProgress,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(q: &str, e: Option<&str>, c: i64, u: Option<i64>) -> Vec<Option<String>> {
        vec![
            Some(q.into()),
            e.map(String::from),
            Some(c.to_string()),
            u.map(|u| u.to_string()),
            Some("dead".into()),
        ]
    }

    #[test]
    fn filter_matches_text_case_insensitively_and_the_window() {
        let f = BulkFilter {
            error: Some("http 503".into()),
            query: Some("Order-".into()),
            within_ms: Some(3_600_000),
            ..BulkFilter::default()
        };
        let cutoff = Some(1_000_000);
        assert!(f.matches(
            &rec("order-7", Some("HTTP 503 x"), 0, Some(1_000_000)),
            cutoff
        ));
        assert!(!f.matches(
            &rec("order-7", Some("HTTP 500"), 0, Some(2_000_000)),
            cutoff
        ));
        assert!(!f.matches(&rec("report", Some("HTTP 503"), 0, Some(2_000_000)), cutoff));
        assert!(!f.matches(&rec("order-7", Some("HTTP 503"), 0, Some(999_999)), cutoff));
        assert!(!f.matches(&rec("order-7", None, 0, Some(2_000_000)), cutoff));
        // `u` omitted: the creation time counts.
        assert!(f.matches(&rec("order-7", Some("HTTP 503"), 1_500_000, None), cutoff));
        let created = BulkFilter {
            time_field: TimeField::Created,
            ..f.clone()
        };
        assert!(!created.matches(
            &rec("order-7", Some("HTTP 503"), 0, Some(2_000_000)),
            cutoff
        ));
        assert!(BulkFilter::default().matches(&rec("x", None, 0, None), None));
    }

    #[test]
    fn describe_and_applies() {
        let f = BulkFilter {
            error: Some("HTTP 503".into()),
            within_ms: Some(7_200_000),
            ..BulkFilter::default()
        };
        assert_eq!(
            f.describe(),
            "dead, error contains \"HTTP 503\", updated in the last 2 h"
        );
        assert!(BulkAction::Retry.applies_to(BulkState::Dead));
        assert!(!BulkAction::Retry.applies_to(BulkState::Leased));
        assert!(BulkAction::Cancel.applies_to(BulkState::Ready));
        assert!(!BulkAction::Purge.applies_to(BulkState::Ready));
        assert_eq!(BulkState::parse("waiting"), Some(BulkState::Waiting));
        assert_eq!(BulkAction::parse("nope"), None);
    }
}
