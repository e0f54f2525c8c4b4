//! repoll's shared data model: what the queue writes, the server serves and the browser shows,
//! as one set of types that compiles on both sides (serde, no Redis, no tokio).
//!
//! Before this crate the admin pages kept a mirror of the queue's types, with states and dead
//! reasons turned into strings and the task-id check written four times; now the wasm side
//! decodes exactly what the server sends, and a new field cannot be forgotten in a copy.
//!
//! A short tour:
//!
//! - [`id`]: [`TaskId`] (validated when parsed, so an id in a URL, a form or a JSON body is
//!   checked once, at the edge) and the query normalisation the id is derived from;
//!   [`input`]: a structured input (a JSON object), which is its RFC 8785 canonical text.
//! - [`query_chars`]: which characters a query may hold and where (Unicode's own tables: the
//!   invisible ones are refused, save joiners and selectors where writing uses them);
//!   [`shown_chars`]: the same characters marked where a page shows upstream text.
//! - [`task`]: a task's state, priority and dead reason; the task, its stored result and its
//!   history; stuck leases.
//! - [`queue_state`]: queue-wide views: counts and throughput, workers, the pause flag, the
//!   audit log, listing pages.
//! - [`attention`]: what needs an operator now (no worker, a breaker open, a paused queue, an
//!   old ready task), decided once for the dashboard's strip and the user's page.
//! - [`histogram`]: the log-scale buckets the scripts count time to result, polls per task and
//!   upstream latency in, and the percentiles read from them.
//! - [`failure`]: the forms a task's last error is stored in, and the one function that words
//!   a dead task's reason for the public (no internal URL, no upstream body).
//! - [`notice`]: the Pub/Sub message every state change publishes (written by the Lua scripts,
//!   decoded by the web process).

pub mod attention;
pub mod error_class;
pub mod failure;
pub mod histogram;
pub mod id;
pub mod input;
pub mod notice;
pub mod query_chars;
pub mod queue_state;
pub mod shown_chars;
pub mod task;
pub mod trace;

pub use histogram::{Histogram, Percentiles};
pub use id::{
    invisible_kind, is_invisible_char, is_refused_char, is_valid_tenant, is_valid_upstream_name,
    normalise_query, query_pattern, InvalidQuery, InvalidTaskId, TaskId, DEFAULT_UPSTREAM,
    MAX_QUERY_CHARS, MAX_TENANT_LEN,
};
pub use input::{
    canonical_input, parse_input, MAX_INPUT_BYTES, MAX_INPUT_DEPTH, MAX_INPUT_MEMBERS,
};
pub use notice::Notice;
pub use queue_state::{
    AuditEntry, BreakerInfo, BreakerState, BulkProgress, ListState, Order, Page, PauseInfo,
    PurgeTarget, Stats, TenantCount, ThroughputBucket, WorkerCommand, WorkerInfo, WorkerMode,
};
pub use task::{
    failed_body_start, DeadReason, Event, FailedCall, HistoryEntry, LeaseInfo, PollSummary,
    Priority, ResultStory, StoredResult, Task, TaskDetail, TaskState, UnknownName, FAILED_BODY_MAX,
};
pub use trace::TaskTrace;

/// What a request answers when Redis fails it — admin reads and actions, sign-in, the
/// dashboard's pages and event stream: one wording (a form shows it as ours), the details only
/// in the server log.
pub const REDIS_UNREACHABLE: &str = "Redis is unreachable";
