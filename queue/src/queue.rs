//! The [`Queue`] handle: configuration, connection, and its slots (one per partition; see
//! `slot` and `partition`). The operations live in `enqueue`, `worker_ops`, `operator_ops`,
//! `callback`, `bulk` and `read`: each routes to the slot(s) concerned.

use crate::conn::RedisConn;
use crate::error::{config, Result};
use crate::keys::Keys;
use crate::model::{Channels, QueueConfig, TaskId};
use crate::slot::Slot;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use std::sync::Arc;
use std::time::Duration;

/// Response timeout used by [`Queue::connect`].
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);

/// Handle to one queue. Cheap to clone: the connection manager multiplexes one connection
/// (concurrent calls are pipelined on it) and the rest is shared.
///
/// It routes: a call about one task goes to that task's slot, a call about the whole queue
/// to every slot (their answers merged), the same way whether the queue has one partition
/// or many (see the `partition` module).
#[derive(Clone)]
pub struct Queue {
    pub(crate) conn: RedisConn,
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub cfg: QueueConfig,
    /// The control slot `{name}`: what belongs to the queue and to no task (meta, audit,
    /// sessions, sign-in limits, worker registry, upstream rate, bulk runs), with the
    /// queue's whole configuration. With one partition its tag `{name}` is also the one
    /// task slot's (a second handle on the same keys).
    pub control: Slot,
    /// The queue's slots, one per partition (`cfg.partitions`, 1 included); a task lives in
    /// `slots[partition_of(id, P)]`. See the `partition` module.
    pub slots: Vec<Slot>,
    /// Where this process's next claim sweep starts (round robin over the partitions).
    pub next_part: std::sync::atomic::AtomicUsize,
    /// Chained claims since this process last sent one to another partition.
    pub chain_hops: std::sync::atomic::AtomicUsize,
    /// The partition count the queue was last seen to have (or be moving to) when it is not
    /// this handle's, else 0: set by a heartbeat or a refused enqueue, cleared by a heartbeat
    /// that finds the layout unchanged (`partition::moved`).
    pub moved_to: std::sync::atomic::AtomicU32,
    /// The hot results this process answers from memory, once
    /// [`Queue::hold_hot_results`] was called (`hot_results`).
    pub hot: std::sync::OnceLock<Arc<crate::hot_results::HotResults>>,
    /// The answers this handle gave, not yet in Redis's counters (`answer_counts`).
    pub counts: crate::answer_counts::AnswerCounts,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("cfg", &self.inner.cfg)
            .finish_non_exhaustive()
    }
}

impl Queue {
    /// Connects with a reconnecting connection manager and loads the scripts.
    ///
    /// The response timeout is raised from redis-rs's 500 ms default: all calls share one
    /// multiplexed connection, so under a burst (thousands of pipelined enqueues on a busy
    /// 2-core machine) a reply can queue behind others for longer than that, and a timeout
    /// there would fail a call whose script may well have run.
    pub async fn connect(redis_url: &str, cfg: QueueConfig) -> Result<Queue> {
        Queue::connect_with_timeout(redis_url, cfg, RESPONSE_TIMEOUT).await
    }

    /// [`Queue::connect`] with another response timeout. The web process uses a short one
    /// for the requests it serves: a user waiting on a page is better told "unavailable" in
    /// two seconds than kept ten while Redis stalls (its script may still run; every
    /// operation a request makes can be repeated safely).
    pub async fn connect_with_timeout(
        redis_url: &str,
        cfg: QueueConfig,
        response_timeout: Duration,
    ) -> Result<Queue> {
        let client = redis::Client::open(redis_url)?;
        let mcfg = ConnectionManagerConfig::new()
            .set_response_timeout(Some(response_timeout))
            .set_connection_timeout(Some(Duration::from_secs(5)));
        let conn = ConnectionManager::new_with_config(client, mcfg).await?;
        Queue::with_connection(conn, cfg).await
    }

    /// Connects to a Redis Cluster through any of `seed_urls` (the client discovers the rest
    /// and follows the queue's slot when it moves). All of a queue's keys share one slot, so
    /// every script runs on the one primary that owns it.
    pub async fn connect_cluster(seed_urls: &[String], cfg: QueueConfig) -> Result<Queue> {
        Queue::connect_cluster_with_timeout(seed_urls, cfg, RESPONSE_TIMEOUT).await
    }

    /// [`Queue::connect_cluster`] with another response timeout (see
    /// [`Queue::connect_with_timeout`]).
    pub async fn connect_cluster_with_timeout(
        seed_urls: &[String],
        cfg: QueueConfig,
        response_timeout: Duration,
    ) -> Result<Queue> {
        let client = redis::cluster::ClusterClient::builder(seed_urls.to_vec())
            .response_timeout(response_timeout)
            .connection_timeout(Duration::from_secs(5))
            .build()?;
        let conn = client.get_async_connection().await?;
        Queue::with_connection(conn, cfg).await
    }

    /// Uses an existing connection (shared with other parts of the app). Checks the
    /// configuration and the Redis version, and loads the Lua library on every primary once
    /// so later calls are plain FCALL.
    pub async fn with_connection(conn: impl Into<RedisConn>, cfg: QueueConfig) -> Result<Queue> {
        let conn = conn.into();
        if cfg.name.is_empty() || cfg.name.contains(['{', '}', '#']) {
            return Err(config(format!(
                "the queue name (REPOLL_QUEUE) {:?} must be non-empty without braces or '#' (it \
                 is the hash tag)",
                cfg.name
            )));
        }
        if !(1..=crate::partition::MAX_PARTITIONS).contains(&cfg.partitions) {
            return Err(config(format!(
                "partitions must be 1 to {}, not {} (REPOLL_PARTITIONS)",
                crate::partition::MAX_PARTITIONS,
                cfg.partitions
            )));
        }
        if cfg.result_ttl_ms == 0 || cfg.history_cap == 0 || cfg.events_cap == 0 {
            return Err(config(
                "the result TTL (REPOLL_RESULT_TTL_MS), history cap and events cap must be > 0",
            ));
        }
        if cfg.freshness.hot_asks > crate::model::MAX_HOT_ASKS {
            return Err(config(format!(
                "hot asks must be 0 to {}, not {} (REPOLL_HOT_ASKS)",
                crate::model::MAX_HOT_ASKS,
                cfg.freshness.hot_asks
            )));
        }
        let q = Queue::layout(conn, cfg);
        crate::library::check_version(&q.conn).await?;
        crate::library::load(&q.conn).await?;
        crate::partition::check_layout(&q).await?;
        Ok(q)
    }

    /// A handle of `cfg.partitions` partitions, not checked against what the queue records
    /// (`with_connection` checks; a repartition reads both layouts).
    pub(crate) fn layout(conn: RedisConn, cfg: QueueConfig) -> Queue {
        let layout = cfg.partitions.max(1);
        let n = usize::from(layout);
        let control = Slot::new(conn.clone(), cfg.clone(), Keys::new(&cfg.name), layout, 0);
        let slot_cfg = crate::partition::part_config(&cfg);
        let slots = (0..layout)
            .map(|i| {
                let keys = Keys::slot(&cfg.name, usize::from(i), n);
                Slot::new(conn.clone(), slot_cfg.clone(), keys, layout, i)
            })
            .collect();
        Queue {
            conn,
            inner: Arc::new(Inner {
                cfg,
                control,
                slots,
                // Each process starts its rotation elsewhere, so idle workers that start
                // together do not all sweep the same partition first.
                next_part: std::sync::atomic::AtomicUsize::new(
                    std::process::id() as usize ^ local_ms().unsigned_abs() as usize,
                ),
                chain_hops: std::sync::atomic::AtomicUsize::new(0),
                moved_to: std::sync::atomic::AtomicU32::new(0),
                hot: std::sync::OnceLock::new(),
                counts: crate::answer_counts::AnswerCounts::new(n),
            }),
        }
    }

    /// The configuration this handle was made with (the queue's, not a partition's share).
    pub fn config(&self) -> &QueueConfig {
        &self.inner.cfg
    }

    /// The id of a normalised query in this queue: it covers the queue's upstream
    /// ([`QueueConfig::upstream`]), so the same text for two upstreams is two tasks.
    pub fn task_id(&self, normalised: &str) -> TaskId {
        TaskId::of_upstream_query(&self.inner.cfg.upstream, normalised)
    }

    /// A clone of the connection (for ad-hoc reads and writes by the app).
    pub fn connection(&self) -> RedisConn {
        self.conn.clone()
    }

    /// The queue's Pub/Sub channel names (the dashboard's live feed).
    pub fn channels(&self) -> Channels {
        self.inner.control.channels().clone()
    }

    /// Redis `TIME` in ms: the clock every script uses. (For this process's own clock, see
    /// [`local_ms`].)
    pub async fn now_ms(&self) -> Result<i64> {
        crate::conn::redis_now_ms(&self.conn).await
    }

    /// The control slot's keys (`{name}`; see [`Inner::control`]).
    pub(crate) fn keys(&self) -> &Keys {
        self.inner.control.keys()
    }

    /// The control slot (see [`Inner::control`]).
    pub(crate) fn control(&self) -> &Slot {
        &self.inner.control
    }
}

/// Durations arrive as u64 but Lua numbers are doubles: cap them (at ~100 years) so scores
/// stay exact integers.
pub(crate) fn clamp_ms(ms: u64) -> u64 {
    ms.min(100 * 365 * 24 * 3600 * 1000)
}

/// This process's clock in ms since the Unix epoch (0 if the clock is before it). Only for
/// what is local by nature (measuring a call, stamping a view with when it was read): every
/// decision about a task uses Redis time inside the scripts, so hosts whose clocks disagree
/// still agree on leases and due times.
pub fn local_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
