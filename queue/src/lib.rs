//! repoll's queue core: unique polling tasks in Redis, claimed under leases with fencing
//! tokens, every transition one atomic Lua script timed by Redis `TIME`.
//!
//! The entry point is [`Queue`]: [`Queue::connect`] (or [`Queue::connect_cluster`]) with a
//! [`QueueConfig`], then [`Queue::enqueue`] from producers, [`Queue::claim`] /
//! [`Queue::complete`] / [`Queue::reschedule`] / [`Queue::fail`] from workers, and the reads
//! and operator actions for the dashboard. Errors are [`QueueError`]; `StaleToken` is the one
//! a worker acts on (its lease was lost, so it must drop the task).
//!
//! # Errors
//!
//! Every `async` method can fail with [`QueueError::Redis`] (Redis unreachable, a timeout, a
//! cluster redirect not followed) and [`QueueError::Corrupt`] (a reply or a stored value that
//! does not decode); a method's own doc names any other error it returns (`StaleToken`,
//! `NotFound`, `InvalidQuery`, and `Config` for a configuration refused at connect or by a
//! repartition). A method that reads or
//! writes every partition returns the first partition's error; what other partitions did
//! before it stays done (each partition's change is atomic, the whole is not).
//!
//! # A tour, in reading order
//!
//! - [`id`]: a task's id is a hash of its normalised query, so the same query is one task (the
//!   shared views and rules live in the `model` crate, re-exported through [`model`]).
//! - `keys`: every key name; each carries a hash tag, so a Redis Cluster keeps what one script
//!   touches in one slot.
//! - `slot`: a `Slot` is everything under one hash tag and the only code that talks to it:
//!   connection, keys, settings, and the script call plumbing (`invocation`, `run`).
//! - `queue`: the [`Queue`] handle. It owns one slot per partition (one slot when the queue
//!   has one partition: the same code either way) and the control slot `{name}`, and only
//!   routes.
//! - [`partition`]: how the queue routes: a task's slot by its id ([`partition_of`]), the one
//!   fan-out to every slot, claims that sweep the slots, chained claims, breaker mirroring.
//! - [`scripts`] and `conn`: the Lua scripts, and one connection type ([`RedisConn`]) for a
//!   server or a cluster.
//! - The operations, each a `Queue` method that routes and a `Slot` method that does the
//!   work: `enqueue`, `worker_ops` (claim, renew, complete, reschedule, fail, release, reap),
//!   `registry` (every running process's heartbeat), `callback`, `operator_ops` (retry, cancel, pause, breaker, purge,
//!   migrate), [`bulk`] (actions by filter, in the background), `read` (stats, cursor pages,
//!   details, throughput, tenants, events; `read::merge` merges the slots' answers).
//! - [`hot_results`] and `hold`: a web process answers the fresh hits of hot results from its
//!   memory, kept true by Redis's client tracking ([`Queue::hold_hot_results`]).
//! - `answer_counts`: the answers a handle gave, by kind, counted in memory and written to the
//!   per-minute counters once a second ([`Queue::flush_answer_counts`]).
//! - `upstream_cancels`: a job API's jobs of cancelled or purged tasks, waiting for a worker
//!   to cancel them upstream ([`UpstreamCancel`]).
//! - `wake`: [`Wakeups`], an idle worker's blocking wait for work (one worker per task).
//! - `repartition`: moving a drained queue to another partition count.
//! - `decode`: Redis replies to model types, never panicking (`Corrupt` instead).
//! - `sessions`, `signin`, `audit`: what the dashboard keeps next to the queue.
//!
//! ARCHITECTURE.md ("Queue core: keys, states, transitions") has the key table and the
//! state machine.

#![deny(missing_docs)]

mod answer_counts;
mod audit;
pub mod bulk;
mod callback;
mod conn;
mod decode;
mod enqueue;
pub mod error;
mod hold;
pub mod hot_results;
pub mod id;
pub mod key_decl;
mod keys;
mod library;
pub mod model;
mod operator_ops;
pub mod partition;
mod queue;
pub(crate) mod read;
mod registry;
mod repartition;
pub mod scripts;
mod sessions;
mod signin;
mod slot;
pub mod trace_context;
mod upstream_cancels;
mod wake;
mod worker_ops;

pub use answer_counts::FLUSH_EVERY as ANSWER_COUNTS_FLUSH_EVERY;
pub use callback::{CallbackEffect, WebhookApplied};
pub use conn::RedisConn;
pub use error::{QueueError, Result};
pub use hot_results::HoldSettings;
pub use id::{
    invisible_kind, is_invisible_char, is_refused_char, is_valid_tenant, is_valid_upstream_name,
    normalise_query, query_pattern, InvalidQuery, InvalidTaskId, TaskId, DEFAULT_UPSTREAM,
    MAX_TENANT_LEN,
};
pub use model::*;
pub use partition::{partition_of, MAX_PARTITIONS};
pub use queue::{local_ms, Queue, RESPONSE_TIMEOUT};

pub use audit::AUDIT_CAP;
pub use bulk::{
    BulkAction, BulkFilter, BulkJob, BulkProgress, BulkRefused, BulkSample, BulkSelection,
    BulkState, TimeField, DEFAULT_BULK_LIMIT,
};
pub use operator_ops::{Migrated, CHUNK as PURGE_CHUNK};
pub use read::facets::{DeadGroup, DeadGroups, FacetCount, Facets, FACET_SCAN_MAX};
pub use read::{is_list_cursor, ServerInfo, MAX_PAGE, STATS_BUCKETS, TENANT_SCAN_MAX};
pub use registry::{registry_ttl_ms, CommandSent, WebProcess, REGISTRY_TTL_PERIODS};
pub use repartition::Repartitioned;
pub use sessions::{Sessions, MIN_SESSION_TTL_S};
pub use signin::{SignInLimiter, SIGN_IN_WINDOW_MS};
pub use upstream_cancels::{CancelOutcome, UpstreamCancel};
pub use wake::{Wakeups, WAKE_CAP};
pub use worker_ops::{MAX_BATCH, THROUGHPUT_HOURLY_RETENTION_MS, THROUGHPUT_RETENTION_MS};
