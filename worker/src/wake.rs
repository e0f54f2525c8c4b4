//! Wake-ups from the queue's Pub/Sub `wake` channel.
//!
//! A dedicated connection subscribes (Pub/Sub cannot share the queue's multiplexed
//! `ConnectionManager`); every message is turned into one stored [`Notify`] permit, so a
//! message that arrives while the worker is busy claiming is not lost, and a burst of
//! enqueues costs one extra claim, not one per message. The connection is re-made with a
//! capped backoff if it drops; the worker's 1 s sleep cap covers the gap.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::Notify;

/// Listens on `channel` forever, signalling `wake` per message (and once per (re)subscription,
/// since messages may have been missed while disconnected).
pub(crate) async fn listen(client: redis::Client, channel: String, wake: Arc<Notify>) {
    let mut backoff = Duration::from_millis(100);
    loop {
        match client.get_async_pubsub().await {
            Ok(mut pubsub) => match pubsub.subscribe(&channel).await {
                Ok(()) => {
                    backoff = Duration::from_millis(100);
                    wake.notify_one();
                    let mut messages = pubsub.on_message();
                    while messages.next().await.is_some() {
                        wake.notify_one();
                    }
                    tracing::warn!(%channel, "wake subscription ended; reconnecting");
                }
                Err(e) => tracing::warn!(error = %e, %channel, "subscribe failed"),
            },
            Err(e) => tracing::warn!(error = %e, "pub/sub connection failed"),
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}
