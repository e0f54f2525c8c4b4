//! Live updates: one Redis Pub/Sub subscription per process, fanned out to the open
//! Server-Sent-Events streams — and the caps that keep those streams from eating the process.
//!
//! Why one subscription: a Pub/Sub connection per browser tab would cost Redis a client per
//! viewer. The queue publishes every state change of every task on its dashboard channel
//! (`{"kind", "id", "at_ms"}`; a batch adds `"ids"`, turned into one event per id), so this
//! process subscribes once and routes each message:
//!
//! - to the watchers of **that task only** ([`Live::watch_task`]): one `watch` channel per
//!   watched id, shared by every stream of that id. A query page is woken by its own task and
//!   nothing else, so CPU grows with events, not with streams × events.
//! - to the dashboard streams ([`Live::subscribe`]), which want everything (coalesced there).
//!
//! Pub/Sub is only a wake-up: a message carries no state, and a subscriber that lagged or
//! missed messages (Redis reconnect, slow client) gets [`LiveEvent::Resync`] (or a bumped
//! task version) and re-reads from Redis. So nothing is ever lost, only coalesced.
//!
//! A query's streams do not read the task themselves: its one feed (`api::query_feed`) is the
//! only watcher of the id here, reads once per wake-up and hands every stream the same bytes.
//!
//! Every stream holds a [`StreamPermit`] from [`Live::admit`]: at most `per_client` streams
//! per client address and `total` in all. An open stream holds a connection (a file
//! descriptor) for as long as the client likes, so without caps one client could take every
//! descriptor the process has and starve `/healthz` and the API.

use std::{
    collections::HashMap,
    net::IpAddr,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use backon::{BackoffBuilder, ExponentialBuilder};
use futures::StreamExt;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;

/// What a dashboard stream learns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LiveEvent {
    /// A task changed (`kind` as published by the queue, e.g. "completed").
    Task { id: String, kind: String },
    /// A queue-wide change without a task (pause, purge, ...).
    Queue { kind: String },
    /// Messages may have been missed: re-read all state.
    Resync,
}

/// Caps on open live streams (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamCaps {
    /// Streams one client address may hold open at once.
    pub per_client: usize,
    /// Streams the process holds open at once.
    pub total: usize,
}

impl Default for StreamCaps {
    fn default() -> Self {
        StreamCaps {
            per_client: 32,
            total: 1_000,
        }
    }
}

/// Why a stream was not admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamRefused {
    /// This client holds its share already (429).
    ClientFull { cap: usize },
    /// The process holds its share already (503).
    ProcessFull { cap: usize },
}

/// The process-wide hub. Cheap to clone.
#[derive(Clone)]
pub struct Live {
    inner: Arc<Hub>,
}

struct Hub {
    all: broadcast::Sender<Arc<LiveEvent>>,
    /// Version counter per watched task id; the entry goes when its last watcher does.
    tasks: Mutex<HashMap<String, watch::Sender<u64>>>,
    caps: StreamCaps,
    open: Mutex<OpenStreams>,
    /// Streams dropped because their reader stopped taking events ([`Live::count_slow_drop`]).
    dropped_slow: AtomicU64,
}

/// The gauge of live streams open.
pub const LIVE_STREAMS_METRIC: &str = "repoll_live_streams";
/// The counter of live streams dropped, by reason (`slow`: the reader stopped reading).
pub const DROPPED_METRIC: &str = "repoll_live_streams_dropped_total";

#[derive(Default)]
struct OpenStreams {
    total: usize,
    per_client: HashMap<Option<IpAddr>, usize>,
}

impl Live {
    /// Starts the subscriber task on `client` for `channel`; it reconnects with a capped
    /// backoff until `stop` is cancelled, and announces a resync after every (re)connection.
    pub fn start(
        client: redis::Client,
        channel: String,
        caps: StreamCaps,
        stop: CancellationToken,
    ) -> Live {
        Live::start_many(client, vec![channel], caps, stop)
    }

    /// [`Live::start`] on several channels at once (one per upstream's queue) over one
    /// connection: ids cover their upstream, so the routing by id stays exact.
    pub fn start_many(
        client: redis::Client,
        channels: Vec<String>,
        caps: StreamCaps,
        stop: CancellationToken,
    ) -> Live {
        Live::start_seeds(vec![client], channels, caps, stop)
    }

    /// [`Live::start_many`] with several nodes to subscribe through (a Redis Cluster's seeds):
    /// each reconnection tries the next one. Why: a cluster broadcasts every PUBLISH to all its
    /// nodes, so any live node serves the subscription, and after a failover the node this
    /// process knew first may be the dead one; staying on it would stop every live page.
    pub fn start_seeds(
        clients: Vec<redis::Client>,
        channels: Vec<String>,
        caps: StreamCaps,
        stop: CancellationToken,
    ) -> Live {
        let hub = Live::new(caps);
        // 0 until a stream is dropped, so an alert on it has a series from the start.
        metrics::counter!(DROPPED_METRIC, "reason" => "slow").increment(0);
        let feed = hub.clone();
        tokio::spawn(async move {
            // 100 ms doubling to 5 s, with jitter: many web processes that lost one Redis
            // do not resubscribe in step.
            let mut delays = ExponentialBuilder::default()
                .with_min_delay(Duration::from_millis(100))
                .with_max_delay(Duration::from_secs(5))
                .with_jitter()
                .without_max_times()
                .build();
            let mut next = 0usize;
            while !stop.is_cancelled() && !clients.is_empty() {
                let client = &clients[next % clients.len()];
                next = next.wrapping_add(1);
                match subscribe(client, &channels, &feed, &stop).await {
                    Ok(()) => break,
                    Err(e) => {
                        let delay = delays.next().unwrap_or(Duration::from_secs(5));
                        tracing::warn!(error = %e, ?delay, "live: pub/sub connection lost; reconnecting");
                        tokio::select! {
                            _ = tokio::time::sleep(delay) => {}
                            _ = stop.cancelled() => break,
                        }
                    }
                }
            }
        });
        hub
    }

    /// A hub without a subscriber (fed by [`Live::publish`]); `start` uses it.
    pub fn new(caps: StreamCaps) -> Live {
        let (all, _) = broadcast::channel(4096);
        Live {
            inner: Arc::new(Hub {
                all,
                tasks: Mutex::new(HashMap::new()),
                caps,
                open: Mutex::new(OpenStreams::default()),
                dropped_slow: AtomicU64::new(0),
            }),
        }
    }

    /// A new receiver of every event from now on (the dashboard's streams).
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<LiveEvent>> {
        self.inner.all.subscribe()
    }

    /// Wakes on changes of task `id` only (and on resyncs). Subscribe before the first read
    /// of the task, so a change between the two is not missed.
    pub fn watch_task(&self, id: &str) -> TaskWatch {
        let mut tasks = lock(&self.inner.tasks);
        let rx = tasks
            .entry(id.to_string())
            .or_insert_with(|| watch::channel(0).0)
            .subscribe();
        TaskWatch {
            rx,
            id: id.to_string(),
            hub: self.inner.clone(),
        }
    }

    /// Ids with at least one watcher right now (for tests and metrics).
    pub fn watched_tasks(&self) -> usize {
        lock(&self.inner.tasks).len()
    }

    /// Admits one more stream for `client`, or says which cap is full.
    pub fn admit(&self, client: Option<IpAddr>) -> Result<StreamPermit, StreamRefused> {
        let caps = self.inner.caps;
        let mut open = lock(&self.inner.open);
        if open.total >= caps.total {
            return Err(StreamRefused::ProcessFull { cap: caps.total });
        }
        let mine = open.per_client.entry(client).or_default();
        if *mine >= caps.per_client {
            return Err(StreamRefused::ClientFull {
                cap: caps.per_client,
            });
        }
        *mine += 1;
        open.total += 1;
        metrics::gauge!(LIVE_STREAMS_METRIC).set(open.total as f64);
        Ok(StreamPermit {
            client,
            hub: self.inner.clone(),
        })
    }

    /// Streams open right now.
    pub fn open_streams(&self) -> usize {
        lock(&self.inner.open).total
    }

    /// Counts a stream dropped because its reader stopped taking events.
    pub fn count_slow_drop(&self) {
        self.inner.dropped_slow.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(DROPPED_METRIC, "reason" => "slow").increment(1);
    }

    /// Streams dropped so far because their reader stopped taking events.
    pub fn slow_drops(&self) -> u64 {
        self.inner.dropped_slow.load(Ordering::Relaxed)
    }

    /// Routes one event (what the Pub/Sub subscriber does with each message).
    pub fn publish(&self, event: LiveEvent) {
        match &event {
            LiveEvent::Task { id, .. } => {
                if let Some(tx) = lock(&self.inner.tasks).get(id) {
                    tx.send_modify(|v| *v = v.wrapping_add(1));
                }
            }
            LiveEvent::Resync => {
                for tx in lock(&self.inner.tasks).values() {
                    tx.send_modify(|v| *v = v.wrapping_add(1));
                }
            }
            LiveEvent::Queue { .. } => {}
        }
        // No receivers is fine: nobody is watching the dashboard right now.
        let _ = self.inner.all.send(Arc::new(event));
    }
}

/// A held place among the open streams; dropping it (the stream ended or the client went)
/// frees the place.
pub struct StreamPermit {
    client: Option<IpAddr>,
    hub: Arc<Hub>,
}

impl Drop for StreamPermit {
    fn drop(&mut self) {
        let mut open = lock(&self.hub.open);
        open.total = open.total.saturating_sub(1);
        if let Some(n) = open.per_client.get_mut(&self.client) {
            *n -= 1;
            if *n == 0 {
                open.per_client.remove(&self.client);
            }
        }
        metrics::gauge!(LIVE_STREAMS_METRIC).set(open.total as f64);
    }
}

/// One stream's view of one task's changes.
pub struct TaskWatch {
    rx: watch::Receiver<u64>,
    id: String,
    hub: Arc<Hub>,
}

impl TaskWatch {
    /// Waits for the next change (several changes meanwhile count as one). `false` when the
    /// hub is gone.
    pub async fn changed(&mut self) -> bool {
        self.rx.changed().await.is_ok()
    }
}

impl Drop for TaskWatch {
    fn drop(&mut self) {
        let mut tasks = lock(&self.hub.tasks);
        // This watcher is still counted: it is the last one when the count is 1.
        if tasks
            .get(&self.id)
            .is_some_and(|tx| tx.receiver_count() <= 1)
        {
            tasks.remove(&self.id);
        }
    }
}

/// A poisoned lock only means a panic elsewhere while holding it; the maps stay usable.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

async fn subscribe(
    client: &redis::Client,
    channels: &[String],
    hub: &Live,
    stop: &CancellationToken,
) -> Result<(), redis::RedisError> {
    let mut pubsub = client.get_async_pubsub().await?;
    pubsub.subscribe(channels).await?;
    // Anything published while we were disconnected is gone: tell streams to re-read.
    hub.publish(LiveEvent::Resync);
    let mut messages = pubsub.on_message();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            msg = messages.next() => {
                let Some(msg) = msg else {
                    return Err(redis::RedisError::from(std::io::Error::new(
                        std::io::ErrorKind::ConnectionReset,
                        "pub/sub stream ended",
                    )));
                };
                let payload: String = msg.get_payload().unwrap_or_default();
                // The queue's notice (model::Notice); one that does not parse may have hidden
                // any change, so every stream re-reads.
                match model::Notice::parse(&payload) {
                    Ok(n) if n.task_ids().next().is_some() => {
                        for id in n.task_ids() {
                            hub.publish(LiveEvent::Task { id: id.to_string(), kind: n.kind.clone() });
                        }
                    }
                    Ok(n) => hub.publish(LiveEvent::Queue { kind: n.kind }),
                    Err(_) => hub.publish(LiveEvent::Resync),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_task_watch_wakes_for_its_own_task_only() {
        let live = Live::new(StreamCaps::default());
        let mut a = live.watch_task("a");
        let mut b = live.watch_task("b");
        live.publish(LiveEvent::Task {
            id: "a".into(),
            kind: "completed".into(),
        });
        assert!(a.changed().await);
        let woke_b = tokio::time::timeout(Duration::from_millis(50), b.changed()).await;
        assert!(woke_b.is_err(), "b must not wake for a's event");
        // A resync wakes everyone.
        live.publish(LiveEvent::Resync);
        assert!(b.changed().await);
        // Entries go with their last watcher.
        let a2 = live.watch_task("a");
        assert_eq!(live.watched_tasks(), 2);
        drop(a);
        assert_eq!(live.watched_tasks(), 2);
        drop(a2);
        drop(b);
        assert_eq!(live.watched_tasks(), 0);
    }

    #[test]
    fn caps_per_client_and_in_total() {
        let live = Live::new(StreamCaps {
            per_client: 2,
            total: 3,
        });
        let one = Some(IpAddr::from([10, 0, 0, 1]));
        let two = Some(IpAddr::from([10, 0, 0, 2]));
        let p1 = live.admit(one).unwrap();
        let _p2 = live.admit(one).unwrap();
        assert_eq!(
            live.admit(one).err(),
            Some(StreamRefused::ClientFull { cap: 2 })
        );
        let _p3 = live.admit(two).unwrap();
        assert_eq!(
            live.admit(two).err(),
            Some(StreamRefused::ProcessFull { cap: 3 })
        );
        drop(p1);
        assert_eq!(live.open_streams(), 2);
        assert!(live.admit(one).is_ok());
    }
}
