//! repoll's queue core: unique polling tasks in Redis sorted sets, claimed under leases with
//! fencing tokens, every transition one atomic Lua script timed by Redis `TIME`.
//!
//! A short tour, in reading order:
//!
//! - [`id`]: a task's id is a hash of its normalised query, so the same query is the same task
//!   (the rules, like the views of tasks and the queue, are in the shared `model` crate).
//! - [`model`]: the public data types (settings, call outcomes, and the shared views).
//! - [`error`]: [`QueueError`]; `StaleToken` is the one workers act on.
//! - `keys`: the key layout; every key carries the hash tag `{name}` (Redis Cluster safe).
//! - [`scripts`]: the Lua scripts from `lua/*.lua`, loaded once and run by SHA.
//! - `decode`: Redis replies to model types, never panicking (`Corrupt` instead).
//! - `queue`: the [`Queue`] handle and shared plumbing.
//! - [`partition`]: one logical queue over P hash tags (a Redis Cluster spreads it over its
//!   nodes): routing by id, claims across partitions, merged reads.
//! - `repartition`: moving a drained queue to another partition count.
//! - `conn`: [`RedisConn`], one server or a Redis Cluster behind one connection type.
//! - `enqueue`: enqueue and enqueue_many (create, join, or answer with the stored result).
//! - `worker_ops`: claim, renew, complete, reschedule, fail (each able to claim the next tasks
//!   in the same call), release, reap, heartbeats.
//! - `wake`: [`Wakeups`], an idle worker's blocking wait for work (one worker per unit of work).
//! - `callback`: a task completed at once by the upstream's callback (the token was checked
//!   by the web process).
//! - `operator_ops`: retry, cancel, pause/resume, purge (chunked): what an operator does.
//! - [`bulk`]: bulk actions by filter (select, count, act in chunks in the background, stop).
//! - `read`: stats, list (cursor pages), get, workers, stuck leases, events, the pause flag,
//!   id-prefix search, the Redis server's facts.
//! - `sessions`, `signin`, `audit`: what the admin dashboard keeps next to the queue (its
//!   sessions, the sign-in attempt limit, the audit log), so no other crate builds a key.
//!
//! ARCHITECTURE.md ("Queue core: keys, states, transitions") has the key table and the
//! state machine.

mod audit;
pub mod bulk;
mod callback;
mod conn;
mod decode;
mod enqueue;
pub mod error;
pub mod id;
mod keys;
mod library;
pub mod model;
mod operator_ops;
pub mod partition;
mod queue;
mod read;
mod repartition;
pub mod scripts;
mod sessions;
mod signin;
mod wake;
mod worker_ops;

pub use conn::RedisConn;
pub use error::{QueueError, Result};
pub use id::{
    is_forbidden_char, is_valid_tenant, is_valid_upstream_name, normalise_query, query_pattern,
    InvalidQuery, InvalidTaskId, TaskId, DEFAULT_UPSTREAM, FORBIDDEN_INVISIBLE, MAX_TENANT_LEN,
};
pub use model::*;
pub use partition::{partition_of, MAX_PARTITIONS};
pub use queue::{local_ms, Queue, RESPONSE_TIMEOUT};

pub use audit::AUDIT_CAP;
pub use bulk::{
    BulkAction, BulkFilter, BulkJob, BulkProgress, BulkRefused, BulkSelection, BulkState,
    TimeField, DEFAULT_BULK_LIMIT,
};
pub use operator_ops::{Migrated, CHUNK as PURGE_CHUNK};
pub use read::{is_list_cursor, ServerInfo, MAX_PAGE, STATS_BUCKETS, TENANT_SCAN_MAX};
pub use repartition::Repartitioned;
pub use sessions::{Sessions, MIN_SESSION_TTL_S};
pub use signin::{SignInLimiter, SIGN_IN_WINDOW_MS};
pub use wake::{Wakeups, WAKE_CAP};
pub use worker_ops::{MAX_BATCH, THROUGHPUT_HOURLY_RETENTION_MS, THROUGHPUT_RETENTION_MS};
