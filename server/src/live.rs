//! Live updates: one Redis Pub/Sub subscription per process, fanned out to every open
//! Server-Sent-Events stream.
//!
//! Why one subscription: a Pub/Sub connection per browser tab would cost Redis a client per
//! viewer. The queue publishes every state change of every task on its dashboard channel
//! (`{"kind", "id", "at_ms"}`; a batch adds `"ids"`, turned into one event per id), so this
//! process subscribes once and each stream filters what it needs (one task id, or everything
//! for the dashboard).
//!
//! Pub/Sub is only a wake-up: a message carries no state, and a subscriber that lagged or
//! missed messages (Redis reconnect, slow client) gets [`LiveEvent::Resync`] and re-reads
//! everything from Redis. So nothing is ever lost, only coalesced.

use std::{sync::Arc, time::Duration};

use futures::StreamExt;
use serde::Deserialize;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

/// What a stream learns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LiveEvent {
    /// A task changed (`kind` as published by the queue, e.g. "completed").
    Task { id: String, kind: String },
    /// A queue-wide change without a task (pause, purge, ...).
    Queue { kind: String },
    /// Messages may have been missed: re-read all state.
    Resync,
}

#[derive(Deserialize)]
struct Wire {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    id: String,
    /// Batch messages (claim, complete_many) list every task id here; `id` is the first.
    #[serde(default)]
    ids: Vec<String>,
}

/// The process-wide hub. Cheap to clone.
#[derive(Clone)]
pub struct Live {
    tx: broadcast::Sender<Arc<LiveEvent>>,
}

impl Live {
    /// Starts the subscriber task on `client` for `channel`; it reconnects with a capped
    /// backoff until `stop` is cancelled, and announces [`LiveEvent::Resync`] after every
    /// (re)connection.
    pub fn start(client: queue::redis::Client, channel: String, stop: CancellationToken) -> Live {
        let (tx, _) = broadcast::channel(4096);
        let hub = Live { tx: tx.clone() };
        tokio::spawn(async move {
            let mut delay = Duration::from_millis(100);
            while !stop.is_cancelled() {
                match subscribe(&client, &channel, &tx, &stop).await {
                    Ok(()) => break,
                    Err(e) => {
                        tracing::warn!(error = %e, ?delay, "live: pub/sub connection lost; reconnecting");
                        tokio::select! {
                            _ = tokio::time::sleep(delay) => {}
                            _ = stop.cancelled() => break,
                        }
                        delay = (delay * 2).min(Duration::from_secs(5));
                    }
                }
            }
        });
        hub
    }

    /// A new receiver of every event from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<LiveEvent>> {
        self.tx.subscribe()
    }
}

async fn subscribe(
    client: &queue::redis::Client,
    channel: &str,
    tx: &broadcast::Sender<Arc<LiveEvent>>,
    stop: &CancellationToken,
) -> Result<(), queue::redis::RedisError> {
    let mut pubsub = client.get_async_pubsub().await?;
    pubsub.subscribe(channel).await?;
    // Anything published while we were disconnected is gone: tell streams to re-read.
    let _ = tx.send(Arc::new(LiveEvent::Resync));
    let mut messages = pubsub.on_message();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            msg = messages.next() => {
                let Some(msg) = msg else {
                    return Err(queue::redis::RedisError::from(std::io::Error::new(
                        std::io::ErrorKind::ConnectionReset,
                        "pub/sub stream ended",
                    )));
                };
                let payload: String = msg.get_payload().unwrap_or_default();
                let events = match serde_json::from_str::<Wire>(&payload) {
                    Ok(w) if !w.ids.is_empty() => w
                        .ids
                        .into_iter()
                        .map(|id| LiveEvent::Task { id, kind: w.kind.clone() })
                        .collect(),
                    Ok(w) if !w.id.is_empty() => vec![LiveEvent::Task { id: w.id, kind: w.kind }],
                    Ok(w) => vec![LiveEvent::Queue { kind: w.kind }],
                    Err(_) => vec![LiveEvent::Resync],
                };
                for event in events {
                    // No receivers is fine: nobody is watching right now.
                    let _ = tx.send(Arc::new(event));
                }
            }
        }
    }
}
