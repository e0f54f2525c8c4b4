//! A [`Slot`]: everything of a queue that lives under one hash tag, and the only code that
//! talks to it.
//!
//! A Lua script may touch keys of one cluster slot only, so every script call of a queue goes
//! to exactly one slot: the queue's one tag `{name}` when it has one partition, or the tag of
//! one partition (`{name#i}`) when it has several. The [`Queue`](crate::Queue) handle only
//! routes (by a task's id to its slot, or to every slot and merging the answers; see
//! `partition`), so one partition and many run the same single-slot code.
//!
//! The single-slot operations themselves are `impl Slot` blocks in the module of their job
//! (`worker_ops`, `operator_ops`, `enqueue`, `callback`, `bulk`, `read::*`), next to the
//! `Queue` method that routes to them.

use std::sync::atomic::AtomicI64;
use std::sync::Arc;

use redis::Value;

use crate::conn::RedisConn;
use crate::error::Result;
use crate::keys::Keys;
use crate::library::Invocation;
use crate::model::{Channels, QueueConfig};
use crate::scripts::FunctionDef;

/// One hash tag of a queue: its connection (a clone of the queue's), its key names, the
/// settings its scripts read, and its channels. Cheap to clone (the rest is shared), so a
/// fan-out hands each future a slot of its own.
#[derive(Clone)]
pub(crate) struct Slot {
    pub(crate) conn: RedisConn,
    inner: Arc<SlotInner>,
}

struct SlotInner {
    /// The settings as this slot's scripts must see them: for a partition, the limits checked
    /// inside a script are its share of the queue's (`partition::part_config`).
    cfg: QueueConfig,
    keys: Keys,
    /// The partition count of the queue this slot belongs to, as this process runs it (the
    /// enqueue script checks it against the slot's copy of the queue's: `repartition.rs`).
    layout: u16,
    /// Which of those partitions this slot is (0 for the control slot and a one-partition
    /// queue): the enqueue script takes its turn of the refresh-ahead limit by it.
    part: u16,
    channels: Channels,
    /// When this process last recounted this slot's per-tenant leases (local ms; reap).
    last_fair_sync_ms: AtomicI64,
}

impl Slot {
    /// A slot of `keys` on `conn`, its scripts run with `cfg`: partition `part` of a queue of
    /// `layout` partitions.
    pub(crate) fn new(
        conn: RedisConn,
        cfg: QueueConfig,
        keys: Keys,
        layout: u16,
        part: u16,
    ) -> Slot {
        Slot {
            conn,
            inner: Arc::new(SlotInner {
                channels: Channels::new(&cfg.name),
                cfg,
                keys,
                layout,
                part,
                last_fair_sync_ms: AtomicI64::new(0),
            }),
        }
    }

    /// The settings this slot's scripts run with.
    pub(crate) fn config(&self) -> &QueueConfig {
        &self.inner.cfg
    }

    /// This slot's key names.
    pub(crate) fn keys(&self) -> &Keys {
        &self.inner.keys
    }

    /// The partition count of the queue this slot belongs to, as this process runs it.
    pub(crate) fn layout(&self) -> u16 {
        self.inner.layout
    }

    /// Which partition of the queue this slot is (0 when it has one).
    pub(crate) fn part(&self) -> u16 {
        self.inner.part
    }

    /// The queue's channels (the same for every slot of a queue).
    pub(crate) fn channels(&self) -> &Channels {
        &self.inner.channels
    }

    /// When this process last recounted this slot's per-tenant leases.
    pub(crate) fn last_fair_sync_ms(&self) -> &AtomicI64 {
        &self.inner.last_fair_sync_ms
    }

    /// Redis `TIME` in ms, asked of the node that serves this connection.
    pub(crate) async fn now_ms(&self) -> Result<i64> {
        crate::conn::redis_now_ms(&self.conn).await
    }

    /// A call of a library function with the six common ARGV of the prelude already set.
    pub(crate) fn invocation<'a>(&'a self, function: &'a FunctionDef) -> Invocation<'a> {
        let cfg = &self.inner.cfg;
        let ch = &self.inner.channels;
        let mut inv = Invocation::new(function, Some(&self.inner.keys));
        inv.arg(cfg.history_cap)
            .arg(cfg.events_cap)
            .arg(&ch.dashboard)
            .arg(cfg.history.as_str())
            .arg(crate::wake::WAKE_CAP)
            .arg(&self.inner.keys.prefix);
        inv
    }

    /// Runs a call and returns the raw reply (loading the library again if Redis lost it).
    pub(crate) async fn run(&self, inv: &Invocation<'_>) -> Result<Value> {
        crate::library::call(&self.conn, inv).await
    }
}
