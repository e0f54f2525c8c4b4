//! What wakes an idle claim loop: an entry of the queue's wake-up list ([`queue::Wakeups`]:
//! one idle worker process per unit of new work), or a nudge from inside the process (the
//! reaper just requeued expired leases).
//!
//! The listener only waits on the list while the claim loop is idle (it has free slots and is
//! about to sleep): a busy worker must leave the entries to idle ones, or it would take a
//! wake-up it cannot act on. An entry taken is remembered (`woken`, with its partition) until
//! the loop's next claim, which then tells the queue it already holds one and claims from that
//! partition (`Queue::claim_woken_at`). A partitioned queue has one list per partition, so
//! one listener per partition.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use tokio::sync::{watch, Notify};

/// Shared by the claim loop, the listener and the reaper.
pub(crate) struct Wake {
    notify: Notify,
    /// Partitions whose wake-up entries were taken and not yet acted on.
    woken: Mutex<Vec<usize>>,
    idle: watch::Sender<bool>,
}

impl Wake {
    pub(crate) fn new() -> Arc<Wake> {
        Arc::new(Wake {
            notify: Notify::new(),
            woken: Mutex::new(Vec::new()),
            idle: watch::Sender::new(false),
        })
    }

    /// Wakes the claim loop from inside the process.
    pub(crate) fn nudge(&self) {
        self.notify.notify_one();
    }

    /// Resolves on the next wake-up (a stored one counts: none is lost between two waits).
    pub(crate) async fn notified(&self) {
        self.notify.notified().await;
    }

    /// The claim loop says whether it is idle (free slots, about to wait) or busy.
    pub(crate) fn set_idle(&self, idle: bool) {
        self.idle
            .send_if_modified(|v| std::mem::replace(v, idle) != idle);
    }

    /// The partition of a wake-up entry taken for the claim about to run (and forgets it).
    pub(crate) fn take_woken(&self) -> Option<usize> {
        let mut w = self.woken.lock().unwrap_or_else(|e| e.into_inner());
        (!w.is_empty()).then(|| w.remove(0))
    }
}

/// Longest wait between two attempts to reach Redis again.
const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(5);

/// Waits before reaching Redis again: 100 ms doubling to [`MAX_RECONNECT_DELAY`], each with up
/// to as much again of random jitter, so the workers of many hosts that lost one Redis do not
/// all come back in the same millisecond.
fn reconnect_delays() -> ExponentialBackoff {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(MAX_RECONNECT_DELAY)
        .with_jitter()
        .without_max_times()
        .build()
}

/// Waits on the wake-up list whenever the claim loop is idle, forever. Connection errors are
/// logged and retried with a capped backoff; the loop's own sleep cap covers the gap.
pub(crate) async fn listen(
    wake: Arc<Wake>,
    partition: usize,
    mut wakeups: queue::Wakeups,
    max_wait: Duration,
) {
    let mut idle = wake.idle.subscribe();
    let mut backoff = reconnect_delays();
    loop {
        if idle.wait_for(|i| *i).await.is_err() {
            return;
        }
        match wakeups.wait(max_wait).await {
            Ok(true) => {
                backoff = reconnect_delays();
                wake.woken
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(partition);
                wake.notify.notify_one();
                // One entry per wake-up: wait until the loop has acted on it.
                if idle.wait_for(|i| !*i).await.is_err() {
                    return;
                }
            }
            Ok(false) => backoff = reconnect_delays(),
            Err(e) => {
                let delay = backoff.next().unwrap_or(MAX_RECONNECT_DELAY);
                tracing::warn!(error = %e, ?delay, "waiting for wake-ups failed; retrying");
                tokio::time::sleep(delay).await;
            }
        }
    }
}
