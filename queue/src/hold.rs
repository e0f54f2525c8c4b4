//! A queue handle's side of the hot results (hot_results.rs): turning them on and answering
//! a fresh hit from them. Apart from hot_results so that the holder (which the handle owns)
//! never names the handle back.

use crate::hot_results::{track, HoldSettings, HotResults};
use crate::model::{EnqueuePolicy, StoredResult};
use crate::queue::Queue;
use std::sync::Arc;

/// Whether `policy` takes every result the queue calls fresh (a max age below the fresh
/// window is the script's to judge).
pub(crate) fn takes_any_fresh(q: &Queue, policy: &EnqueuePolicy) -> bool {
    policy
        .max_age_ms
        .is_none_or(|ms| ms >= q.config().result_ttl_ms)
}

impl Queue {
    /// Answers the fresh hits of hot results from this process's memory (module doc) for as
    /// long as this handle or a clone of it lives; `redis_url` is the server the queue is on
    /// (the tracking connection's). Once per handle (a second call changes nothing). Holds
    /// nothing (false) on a Redis Cluster or with `max_bytes` 0. Needs a tokio runtime.
    pub fn hold_hot_results(&self, redis_url: &str, settings: HoldSettings) -> crate::Result<bool> {
        if settings.max_bytes == 0 || self.conn.is_cluster() {
            return Ok(false);
        }
        let client = redis::Client::open(redis_url)?;
        let hot = Arc::new(HotResults::new(settings));
        if self.inner.hot.set(hot.clone()).is_err() {
            return Ok(true);
        }
        let prefixes = self
            .inner
            .slots
            .iter()
            .map(|s| format!("{}:r:", s.keys().tag()))
            .collect();
        tokio::spawn(track(Arc::downgrade(&hot), client, prefixes));
        Ok(true)
    }

    /// How many results this handle holds in memory now (0 when it holds none).
    pub fn held_results(&self) -> usize {
        self.inner.hot.get().map_or(0, |h| h.len())
    }

    /// The fresh hit of `id` from memory, when `policy` takes any fresh result (no max age
    /// below the fresh window) and it is held (module doc).
    pub(crate) fn held_answer(&self, id: &str, policy: &EnqueuePolicy) -> Option<StoredResult> {
        let hot = self.inner.hot.get()?;
        if !takes_any_fresh(self, policy) {
            return None;
        }
        hot.answer(id)
    }
}
