//! One shared reader per watched query: however many live streams follow a task, its state is
//! read from Redis once per change and serialised once, and every stream sends that same
//! buffer ([`Shared::record`], reference-counted bytes).
//!
//! Why: each stream used to re-read the task on every wake-up and keep its own copies (the
//! view it last sent, the event it was sending): 32 streams that did not read, on a task with
//! a 3.9 MB partial, took the process from 126 to 382 MB, and the 1,000-stream cap allowed
//! about 8 GB. Now a stream holds a receiver and, at most, the one shared record hyper is
//! writing for it; a reader that stops taking records is dropped (`events.rs`), so an old
//! record is not kept alive by it either.
//!
//! Per watched id, a feed task: it watches the id on the [`Live`] hub (before its first read,
//! so no change is missed), reads, and publishes on a `watch` channel every state a reader
//! would see something new in ([`QueryView::nothing_new_since`]: the start of a poll is not
//! sent, its result is). Streams subscribe to that channel; the last one to go ends the task,
//! and with it the hub's entry for the id.

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
};

use app::{
    context::AppContext,
    query_view::{QueryError, QueryView, TaskId},
};
use axum::body::Bytes;
use tokio::sync::watch;

use crate::live_hub::{Live, TaskWatch};

/// One state of a query as every stream sends it.
#[derive(Debug)]
pub struct Shared {
    /// Grows by one per state published for this id (the first is 1).
    pub seq: u64,
    /// The complete Server-Sent-Events record: `event: state`, `id: <updated_at>`,
    /// `data: <Query as JSON>`.
    pub record: Bytes,
    /// The state is final ([`QueryView::is_final`]: done or failed, and no refresh of a
    /// stored result is live): a stream closes after it.
    pub is_final: bool,
}

/// What a feed says about its id.
#[derive(Clone, Debug)]
pub enum Feed {
    /// The first read is under way.
    Loading,
    /// The latest state worth sending.
    Known(Arc<Shared>),
    /// No such task (never was, or gone: purged, expired).
    Unknown,
    /// The first read failed; `unavailable`: Redis could not be reached (else an internal
    /// error, logged where it happened).
    Failed { unavailable: bool },
}

/// The feeds of this process, by task id. Cheap to clone.
#[derive(Clone, Default)]
pub struct QueryFeeds {
    inner: Arc<Feeds>,
}

#[derive(Default)]
struct Feeds {
    by_id: Mutex<HashMap<TaskId, Arc<watch::Sender<Feed>>>>,
    /// Reads of a task's state made by feeds (for tests: one per change, not per stream).
    reads: AtomicU64,
}

impl QueryFeeds {
    /// Follows `id`: the receiver of its feed, started (with its first read) if none runs.
    /// Wait for something other than [`Feed::Loading`] before the first send.
    pub fn follow(&self, ctx: &AppContext, live: &Live, id: &TaskId) -> watch::Receiver<Feed> {
        let mut by_id = lock(&self.inner.by_id);
        if let Some(tx) = by_id.get(id) {
            return tx.subscribe();
        }
        let tx = Arc::new(watch::Sender::new(Feed::Loading));
        let rx = tx.subscribe();
        by_id.insert(id.clone(), tx.clone());
        // Watch before the first read (the hub's rule), still under the lock: a stream that
        // comes next finds this feed, never a second one.
        let wake = live.watch_task(id.as_str());
        tokio::spawn(run(self.inner.clone(), ctx.clone(), id.clone(), wake, tx));
        rx
    }

    /// Reads of task states made so far by all feeds.
    pub fn reads(&self) -> u64 {
        self.inner.reads.load(Ordering::Relaxed)
    }

    /// Ids with a feed right now.
    pub fn feeds(&self) -> usize {
        lock(&self.inner.by_id).len()
    }
}

/// The feed task of `id` (see the module doc).
async fn run(
    feeds: Arc<Feeds>,
    ctx: AppContext,
    id: TaskId,
    mut wake: TaskWatch,
    tx: Arc<watch::Sender<Feed>>,
) {
    let mut shown: Option<QueryView> = None;
    let mut seq = 0u64;
    let mut first = true;
    loop {
        if !first {
            tokio::select! {
                _ = tx.closed() => {
                    if feeds.remove_if_unwatched(&id, &tx) {
                        return;
                    }
                    // A stream subscribed meanwhile: go on for it.
                    continue;
                }
                alive = wake.changed() => if !alive {
                    feeds.remove(&id, &tx);
                    return;
                },
            }
        }
        feeds.reads.fetch_add(1, Ordering::Relaxed);
        let read = app::query_view::read(&ctx, &id).await;
        match read {
            Ok(Some(view)) => {
                if shown.as_ref().is_some_and(|s| view.nothing_new_since(s)) {
                    continue;
                }
                seq += 1;
                let shared = Shared {
                    seq,
                    record: record_of(&view),
                    is_final: view.is_final(),
                };
                shown = Some(view);
                tx.send_replace(Feed::Known(Arc::new(shared)));
            }
            // Gone without a trace (purged): nothing more will come; a stream opened later
            // starts a feed of its own and answers 404.
            Ok(None) => {
                tx.send_replace(Feed::Unknown);
                feeds.remove(&id, &tx);
                return;
            }
            Err(e) if first => {
                let unavailable = matches!(e, QueryError::Unavailable);
                tx.send_replace(Feed::Failed { unavailable });
                feeds.remove(&id, &tx);
                return;
            }
            // A Redis hiccup: the next wake-up, or the resync after the hub reconnects,
            // reads again.
            Err(_) => {}
        }
        first = false;
    }
}

impl Feeds {
    /// Removes `id`'s feed if it is `tx` and no stream follows it; whether it did.
    fn remove_if_unwatched(&self, id: &TaskId, tx: &Arc<watch::Sender<Feed>>) -> bool {
        let mut by_id = lock(&self.by_id);
        if tx.receiver_count() > 0 {
            return false;
        }
        if by_id.get(id).is_some_and(|t| Arc::ptr_eq(t, tx)) {
            by_id.remove(id);
        }
        true
    }

    /// Removes `id`'s feed if it is still `tx` (a later one may have replaced it).
    fn remove(&self, id: &TaskId, tx: &Arc<watch::Sender<Feed>>) {
        let mut by_id = lock(&self.by_id);
        if by_id.get(id).is_some_and(|t| Arc::ptr_eq(t, tx)) {
            by_id.remove(id);
        }
    }
}

/// The Server-Sent-Events record of `view`, as axum's `Event` writes one. The JSON is compact
/// (no line breaks), so it is one `data:` line.
fn record_of(view: &QueryView) -> Bytes {
    let data = serde_json::to_string(view).unwrap_or_else(|_| "{}".into());
    let mut out = String::with_capacity(data.len() + 48);
    out.push_str("event: state\nid: ");
    out.push_str(&view.updated_at.to_string());
    out.push_str("\ndata: ");
    out.push_str(&data);
    out.push_str("\n\n");
    Bytes::from(out)
}

/// A poisoned lock only means a panic elsewhere while holding it; the map stays usable.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
