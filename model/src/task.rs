//! One task: its state, priority and dead reason, the live record, the stored result and the
//! history. Upstream data (partials, results, errors) stays `String`: it is rendered as text,
//! never as HTML, and never parsed here.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::id::TaskId;

/// A name that is not one of an enum's known names (a state, a reason, a priority).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {name:?}")]
pub struct UnknownName {
    pub what: &'static str,
    pub name: String,
}

/// Writes the enum's name table once: `as_str`, `FromStr`, `Display` and `ALL`.
macro_rules! named {
    ($ty:ident, $what:literal, { $($variant:ident => $name:literal),+ $(,)? }) => {
        impl $ty {
            /// Every value, in declaration order.
            pub const ALL: &'static [$ty] = &[$($ty::$variant),+];

            /// The name used in Redis, JSON and URLs.
            pub fn as_str(self) -> &'static str {
                match self { $($ty::$variant => $name),+ }
            }
        }

        impl FromStr for $ty {
            type Err = UnknownName;
            fn from_str(s: &str) -> Result<$ty, UnknownName> {
                match s {
                    $($name => Ok($ty::$variant),)+
                    other => Err(UnknownName { what: $what, name: other.to_owned() }),
                }
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

/// State of a task. `Done` is a stored result (the live record is gone).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskState {
    /// Waiting in the schedule: ready now, or due at its next poll or retry.
    Due,
    /// A worker holds it under a lease.
    Leased,
    /// Gave up (see [`DeadReason`]); kept until purged or retried.
    Dead,
    /// A final result is stored.
    Done,
}

named!(TaskState, "task state", {
    Due => "due",
    Leased => "leased",
    Dead => "dead",
    Done => "done",
});

/// Why a task gave up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeadReason {
    /// Its errors reached the attempt limit.
    MaxAttempts,
    /// Its whole-life deadline passed.
    Deadline,
    /// Workers kept losing its lease (a query that crashes or hangs them).
    Poison,
    /// The upstream refused it for good (an error the policy calls fatal).
    Fatal,
}

named!(DeadReason, "dead reason", {
    MaxAttempts => "max_attempts",
    Deadline => "deadline",
    Poison => "poison",
    Fatal => "fatal",
});

/// Who is waiting for a task. Workers claim interactive work first, but while background work
/// waits at least one claim in ten goes to it, so it never starves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    /// A person is waiting (the query page, and the API by default): claimed first.
    #[default]
    Interactive,
    /// Nobody is waiting right now (e.g. refreshing popular queries): claimed after
    /// interactive work, with at least one claim in ten while both wait; answered at once
    /// without waiting for a first poll. Joining a live task as interactive raises it.
    Background,
}

named!(Priority, "priority", {
    Interactive => "interactive",
    Background => "background",
});

/// A live task record.
///
/// Its JSON (the dashboard's pages carry one per row, sent twice: in the HTML and in the data
/// it hydrates from) leaves out every field at its empty value — no payload, worker, partial,
/// deadline, due or lease time, tenant, refresh, trace or job — and reads it back as that
/// value: most rows have most of them empty, and 50 rows of a dead list are ~10 KB lighter.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Task {
    pub id: TaskId,
    pub query: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub payload: String,
    pub state: TaskState,
    #[serde(default, skip_serializing_if = "Priority::is_interactive")]
    pub priority: Priority,
    pub created_ms: i64,
    pub updated_ms: i64,
    /// Errors so far (reset by an admin retry of a dead task).
    pub attempts: u32,
    /// "Still processing" answers so far.
    pub polls: u32,
    pub max_attempts: u32,
    /// Token of the current or last lease (0 = never leased; a list row's data carries none).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub token: u64,
    /// Lease holder while leased.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial: Option<String>,
    /// Whole-life deadline, 0 = none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub deadline_ms: i64,
    /// When it is next due (state Due only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due_ms: Option<i64>,
    /// Lease deadline (state Leased only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_deadline_ms: Option<i64>,
    /// Why it gave up (state Dead only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_reason: Option<DeadReason>,
    /// Who asked first ("" = no tenant): its fair share and per-tenant limits apply.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tenant: String,
    /// A refresh: a result was stored for the query when this task was made (record field
    /// `rf`), so the old result is still answered (stale) while it runs, and its death is a
    /// failed refresh.
    #[serde(default, skip_serializing_if = "is_false")]
    pub refresh: bool,
    /// The trace contexts of its maker and joiners (record fields `tc` / `tl`); empty while
    /// tracing is off.
    #[serde(default, skip_serializing_if = "crate::TaskTrace::is_empty")]
    pub trace: crate::TaskTrace,
    /// A job API's job for this life of the task (record field `j`) as shown: its id, or the
    /// URL it is followed at without query string or fragment; None before the submit (and
    /// for the repeating kind). Left out of the JSON
    /// when None: every task of every page carries it, most never have one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

fn is_false(b: &bool) -> bool {
    !*b
}

pub(crate) fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

impl Priority {
    /// The default priority (left out of a task's JSON).
    pub fn is_interactive(&self) -> bool {
        *self == Priority::Interactive
    }
}

impl Task {
    /// Waiting or being worked on (not dead).
    pub fn is_live(&self) -> bool {
        matches!(self.state, TaskState::Due | TaskState::Leased)
    }
}

/// A final result, kept to the end of its last window (fresh, stale, stale-if-error).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredResult {
    pub id: TaskId,
    pub query: String,
    pub data: String,
    pub completed_ms: i64,
    pub created_ms: i64,
    pub polls: u32,
}

/// Everything known about one id (the admin's view: `last_call` holds an upstream's answer).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskDetail {
    pub task: Option<Task>,
    pub result: Option<StoredResult>,
    /// Newest first.
    pub history: Vec<HistoryEntry>,
    /// The live task's polls summed up (its record's counters, kept at every history level);
    /// None before its first poll.
    #[serde(default)]
    pub polls: Option<PollSummary>,
    /// The live task's last failed call, beside `task.last_error` (its message).
    #[serde(default)]
    pub last_call: Option<FailedCall>,
    /// What the stored result keeps of the task that made it.
    #[serde(default)]
    pub result_story: Option<ResultStory>,
}

/// A task's "still processing" answers summed up: how many, the first and the last. Kept on
/// the record (and then the result) by the writes each poll makes anyway, so a task's page
/// tells its polls at every history level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PollSummary {
    pub count: u32,
    /// When the first poll's answer came (Redis time, ms).
    pub first_ms: i64,
    /// When the last poll's answer came.
    pub last_ms: i64,
}

impl PollSummary {
    /// The mean time between two polls; None for fewer than two.
    pub fn every_ms(&self) -> Option<i64> {
        (self.count > 1).then(|| (self.last_ms - self.first_ms).max(0) / i64::from(self.count - 1))
    }
}

/// The last failed upstream call of a task, as the worker saw it: stored beside its error
/// message, for the admin (an upstream's body is never the public's).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailedCall {
    /// The answer's HTTP status, when it was an HTTP error (not a timeout, a refused
    /// connection, a bad body).
    pub http_status: Option<u16>,
    /// How long the call took.
    pub took_ms: u64,
    /// The start of the answer's body (at most [`FAILED_BODY_MAX`] bytes, cut on a character
    /// boundary), "" when there was none. Upstream text: shown as text, never HTML.
    pub body: String,
}

/// The most bytes of a failed call's body kept (the queue cuts longer ones to this).
pub const FAILED_BODY_MAX: usize = 512;

/// A failed call's body as a task keeps it: at most [`FAILED_BODY_MAX`] bytes, cut on a
/// character boundary and ending in '…' when cut (fail.lua cuts the same way, for callers
/// that did not), so a megabyte of error page never travels to Redis.
pub fn failed_body_start(body: &str) -> String {
    if body.len() <= FAILED_BODY_MAX {
        return body.to_string();
    }
    let mut end = FAILED_BODY_MAX - '…'.len_utf8();
    while !body.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &body[..end])
}

/// What a stored result keeps of the task that made it, so a done task's page still tells
/// who asked, the claim that finished it and its polls.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResultStory {
    /// Who asked first ("" = no tenant).
    pub tenant: String,
    /// The worker that completed it ("callback" for an upstream's callback).
    pub worker: String,
    /// The fencing token of that lease (0: not leased).
    pub token: u64,
    /// When that lease began (0: unknown, a result stored by an older version).
    pub claimed_ms: i64,
    /// How long the last call took.
    pub latency_ms: u64,
    /// Its polls; None when it had none (or the result is older than this summary).
    pub polls: Option<PollSummary>,
}

/// One per-task history entry, e.g. kind "claimed", detail "by w1 token 7".
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryEntry {
    pub at_ms: i64,
    pub kind: String,
    pub detail: String,
}

/// One entry of the global event stream. `id` is None for queue-wide events (pause, purge).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub stream_id: String,
    pub at_ms: i64,
    pub kind: String,
    pub id: Option<TaskId>,
    pub detail: String,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tasks_json_leaves_out_empty_fields_and_reads_them_back() {
        let mut t = Task {
            id: "0123456789abcdef0123456789abcdef".parse().unwrap(),
            query: "q".into(),
            payload: String::new(),
            state: TaskState::Dead,
            priority: Priority::Interactive,
            created_ms: 1,
            updated_ms: 2,
            attempts: 1,
            polls: 0,
            max_attempts: 5,
            token: 0,
            worker: None,
            last_error: Some("HTTP 500".into()),
            partial: None,
            deadline_ms: 0,
            due_ms: None,
            lease_deadline_ms: None,
            dead_reason: Some(DeadReason::Fatal),
            tenant: String::new(),
            refresh: false,
            trace: crate::TaskTrace::default(),
            job: None,
        };
        let json = serde_json::to_string(&t).unwrap();
        for gone in [
            "token",
            "priority",
            "payload",
            "worker",
            "partial",
            "deadline_ms",
            "due_ms",
            "lease",
            "tenant",
            "refresh",
            "trace",
            "job",
        ] {
            assert!(!json.contains(gone), "{gone} in {json}");
        }
        assert_eq!(serde_json::from_str::<Task>(&json).unwrap(), t);
        t.payload = "p".into();
        t.worker = Some("w".into());
        t.partial = Some("{}".into());
        t.deadline_ms = 9;
        t.due_ms = Some(3);
        t.lease_deadline_ms = Some(4);
        t.tenant = "acme".into();
        t.refresh = true;
        t.trace.joined = vec!["00-a-b-01".into()];
        t.job = Some("j".into());
        t.priority = Priority::Background;
        t.token = 7;
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(serde_json::from_str::<Task>(&json).unwrap(), t, "{json}");
    }

    #[test]
    fn names_round_trip_and_match_serde() {
        for s in TaskState::ALL {
            assert_eq!(s.as_str().parse::<TaskState>().unwrap(), *s);
            assert_eq!(serde_json::to_string(s).unwrap(), format!("\"{s}\""));
        }
        for r in DeadReason::ALL {
            assert_eq!(r.as_str().parse::<DeadReason>().unwrap(), *r);
            assert_eq!(serde_json::to_string(r).unwrap(), format!("\"{r}\""));
        }
        for p in Priority::ALL {
            assert_eq!(p.as_str().parse::<Priority>().unwrap(), *p);
            assert_eq!(serde_json::to_string(p).unwrap(), format!("\"{p}\""));
        }
        let e = "burnt".parse::<DeadReason>().unwrap_err();
        assert_eq!(e.to_string(), "unknown dead reason \"burnt\"");
    }
}
