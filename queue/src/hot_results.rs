//! Fresh hits answered from this process's memory, with Redis saying when they stop being
//! true.
//!
//! A fresh hit is the commonest answer of a caching front, and through `enqueue.lua` each one
//! costs a round trip and a script run. Yet once a result is hot (its asks counted up to
//! `hot_asks`) and far from refresh-ahead's lead, the script writes nothing for it but the
//! per-minute `fresh` counter. The script says how long that holds (`hold_ms`, by Redis
//! `TIME`); a web process keeps such a result in memory that long and answers its fresh hits
//! itself, counted as every answer is (`answer_counts`).
//!
//! **Why it stays true.** A dedicated RESP3 connection asks Redis to track every key under the
//! queue's result prefixes (`CLIENT TRACKING ON BCAST PREFIX {tag}:r:`): any write to a result
//! — a purge, a completed refresh, an expiry, a repartition moving it, a `FLUSHALL` — pushes
//! an `invalidate` message, applied by the connection's reader before any later reply on it is
//! read. The connection is PINGed every quarter of the bound; an answer from memory is given
//! only while the last PING answered was *sent* less than `bound` ago: every write Redis had
//! finished by then was pushed before that PING's reply, so it is applied. So a write that
//! finished at time w is never contradicted by an answer from memory after w + bound, however
//! late this process runs (a stalled process, a stalled Redis or a lost connection stops the
//! answers from memory; the script answers instead). A result read by a script call is kept
//! only if no invalidation came between the call's start and its keeping ([`HotResults::hold`]),
//! so a write racing the call cannot leave its old value behind.
//!
//! Not on a Redis Cluster (tracking would need one connection per node and slot moves to be
//! followed): there every hit goes to the script.

use crate::model::{StoredResult, TaskId};
use quick_cache::sync::Cache;
use quick_cache::Weighter;
use redis::{AsyncConnectionConfig, ProtocolVersion, PushInfo, PushKind, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// How long a PING of the tracking connection may take before the connection is dropped and
/// made again.
const TRACKING_TIMEOUT: Duration = Duration::from_secs(2);

/// The memory and staleness bounds of the results a web process holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HoldSettings {
    /// At most this many bytes of results held (their text and about 200 bytes each); the
    /// least used go first. 0 holds nothing: every hit goes to Redis.
    pub max_bytes: u64,
    /// A write to a result (a purge, a refresh) is seen by every answer given this long after
    /// it finished, at the latest.
    pub bound: Duration,
}

/// The smallest staleness bound (`REPOLL_HOLD_BOUND_MS`): PINGs every 2.5 ms at most.
pub const MIN_BOUND: Duration = Duration::from_millis(10);
/// The largest staleness bound.
pub const MAX_BOUND: Duration = Duration::from_secs(1);

impl Default for HoldSettings {
    fn default() -> Self {
        HoldSettings {
            max_bytes: 64 << 20,
            bound: Duration::from_millis(50),
        }
    }
}

/// A result held, and until when (this process's monotonic clock, from the script's `hold_ms`).
struct Held {
    result: StoredResult,
    until: Instant,
}

/// What a held result costs: its texts and a fixed overhead for the entry and its map slot.
#[derive(Clone)]
struct ByBytes;

impl Weighter<TaskId, Arc<Held>> for ByBytes {
    fn weight(&self, id: &TaskId, held: &Arc<Held>) -> u64 {
        let r = &held.result;
        (id.len() + r.id.len() + r.query.len() + r.data.len() + 200) as u64
    }
}

/// The results this process holds for one queue, and what keeps them true (module doc).
pub(crate) struct HotResults {
    held: Cache<TaskId, Arc<Held>, ByBytes>,
    /// Bumped by every invalidation (before the entries go): a script call that saw another
    /// value keeps nothing.
    generation: AtomicU64,
    /// When the newest answered PING of the tracking connection was sent, in µs after
    /// `epoch` plus one; 0 while not tracking.
    confirmed_us: AtomicU64,
    epoch: Instant,
    bound: Duration,
}

impl HotResults {
    pub(crate) fn new(settings: HoldSettings) -> HotResults {
        // quick_cache sizes its shards from an item estimate: results of ~1 KiB.
        let items = usize::try_from(settings.max_bytes / 1024).unwrap_or(usize::MAX);
        HotResults {
            held: Cache::with_weighter(items.max(16), settings.max_bytes, ByBytes),
            generation: AtomicU64::new(0),
            confirmed_us: AtomicU64::new(0),
            epoch: Instant::now(),
            bound: settings.bound.clamp(MIN_BOUND, MAX_BOUND),
        }
    }

    fn micros(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_micros()).unwrap_or(u64::MAX) + 1
    }

    /// Whether a PING sent less than the bound ago was answered (module doc).
    fn trusted(&self, now: Instant) -> bool {
        let confirmed = self.confirmed_us.load(Ordering::Acquire);
        confirmed != 0 && self.micros(now).saturating_sub(confirmed) < self.bound.as_micros() as u64
    }

    /// The fresh hit of `id` from memory; None when not held, no longer holdable, or the
    /// tracking is not confirmed within the bound.
    pub(crate) fn answer(&self, id: &str) -> Option<StoredResult> {
        let now = Instant::now();
        if !self.trusted(now) {
            return None;
        }
        let held = self.held.get(id)?;
        if held.until <= now {
            return None;
        }
        Some(held.result.clone())
    }

    /// Read before a script call whose answer may be held (see [`HotResults::hold`]).
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Holds `result` for `hold_ms` (the script's word) from `sent`, when the call was sent
    /// (the script ran later, so the hold ends no later than it said, however slow the reply),
    /// if nothing was invalidated since `seen` was read. The second check after the insert
    /// covers an invalidation that came between the first check and the insert (it bumps the
    /// generation before removing).
    pub(crate) fn hold(&self, result: &StoredResult, hold_ms: u64, sent: Instant, seen: u64) {
        let now = Instant::now();
        let until = sent + Duration::from_millis(hold_ms);
        if until <= now || self.generation() != seen || !self.trusted(now) {
            return;
        }
        let held = Arc::new(Held {
            result: result.clone(),
            until,
        });
        self.held.insert(result.id.clone(), held);
        if self.generation() != seen {
            self.held.remove(result.id.as_str());
        }
    }

    /// Forgets what the push says changed: the ids of the result keys named, or everything
    /// (a flush of the database, or the connection lost).
    fn on_push(&self, push: &PushInfo) {
        match push.kind {
            PushKind::Invalidate => {
                self.generation.fetch_add(1, Ordering::AcqRel);
                match push.data.first() {
                    Some(Value::Array(keys)) => {
                        for key in keys {
                            if let Some(id) = result_id(key) {
                                self.held.remove(id);
                            }
                        }
                    }
                    _ => self.held.clear(),
                }
            }
            PushKind::Disconnection => self.forget_all(),
            _ => {}
        }
    }

    /// Not tracking any more (or not yet): nothing held is answered or kept.
    fn forget_all(&self) {
        self.confirmed_us.store(0, Ordering::Release);
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.held.clear();
    }

    /// Results held now (tests and the dashboard).
    pub(crate) fn len(&self) -> usize {
        self.held.len()
    }
}

/// The task id of a result key (`{tag}:r:<id>`), None for any other key.
fn result_id(key: &Value) -> Option<&str> {
    let Value::BulkString(bytes) = key else {
        return None;
    };
    let key = std::str::from_utf8(bytes).ok()?;
    key.rsplit_once(":r:").map(|(_, id)| id)
}

/// Keeps `hot`'s tracking connection to `client`'s server for `prefixes` up while `hot` lives:
/// connect, `CLIENT TRACKING ON BCAST`, PING every quarter of the bound; on any failure forget
/// everything and connect again (after a pause that grows to 1 s).
pub(crate) async fn track(hot: Weak<HotResults>, client: redis::Client, prefixes: Vec<String>) {
    let mut pause = Duration::from_millis(50);
    let mut failures = 0u32;
    loop {
        let Some(bound) = hot.upgrade().map(|h| h.bound) else {
            return;
        };
        let began = Instant::now();
        match tracked_session(&hot, &client, &prefixes, bound).await {
            Ok(()) => return,
            Err(e) => {
                if let Some(h) = hot.upgrade() {
                    h.forget_all();
                }
                // One warning per streak of failures (a session that lasted resets it): a
                // Redis user without CLIENT, or a Redis away, would otherwise log every second.
                if began.elapsed() > Duration::from_secs(10) {
                    failures = 0;
                    pause = Duration::from_millis(50);
                }
                if failures == 0 {
                    tracing::warn!(error = %e, "hits from memory paused: the tracking connection \
                        failed (every hit goes to Redis until it is back)");
                }
                failures = failures.saturating_add(1);
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}

/// One tracking connection's life: Ok when `hot` is gone, Err when the connection failed.
async fn tracked_session(
    hot: &Weak<HotResults>,
    client: &redis::Client,
    prefixes: &[String],
    bound: Duration,
) -> redis::RedisResult<()> {
    let info = client.get_connection_info().clone();
    let settings = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    let client = redis::Client::open(info.set_redis_settings(settings))?;
    let pushes = hot.clone();
    // Applied by the connection's reader itself, in the order Redis sent them: an
    // invalidation is applied before the reply that followed it is seen.
    let sender = move |push: PushInfo| {
        if let Some(h) = pushes.upgrade() {
            h.on_push(&push);
        }
        Ok::<(), redis::aio::SendError>(())
    };
    // A PING slower than the bound only stops the answers from memory until one is quick
    // again (trust counts from when it was sent); the connection is given up only when one
    // takes seconds (a busy machine's slow PING is no reason to drop every held result).
    let config = AsyncConnectionConfig::new()
        .set_push_sender(sender)
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(TRACKING_TIMEOUT));
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    let mut on = redis::cmd("CLIENT");
    on.arg("TRACKING").arg("ON").arg("BCAST");
    for p in prefixes {
        on.arg("PREFIX").arg(p);
    }
    on.query_async::<()>(&mut conn).await?;
    // Whatever was held before this connection tracked is not known to be true.
    match hot.upgrade() {
        Some(h) => h.forget_all(),
        None => return Ok(()),
    }
    let mut every = tokio::time::interval(bound / 4);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let sent = Instant::now();
        redis::cmd("PING").query_async::<()>(&mut conn).await?;
        let Some(h) = hot.upgrade() else {
            return Ok(());
        };
        h.confirmed_us.fetch_max(h.micros(sent), Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(id: &str) -> StoredResult {
        StoredResult {
            id: id.parse().unwrap(),
            query: "q".into(),
            data: "d".into(),
            completed_ms: 1,
            created_ms: 1,
            polls: 0,
        }
    }

    fn confirmed(h: &HotResults) {
        h.confirmed_us
            .store(h.micros(Instant::now()), Ordering::Release);
    }

    const ID: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn nothing_is_held_or_answered_while_not_tracking() {
        let h = HotResults::new(HoldSettings::default());
        h.hold(&result(ID), 60_000, Instant::now(), h.generation());
        assert_eq!(h.len(), 0);
        confirmed(&h);
        h.hold(&result(ID), 60_000, Instant::now(), h.generation());
        assert_eq!(h.answer(ID).map(|r| r.data), Some("d".into()));
        h.confirmed_us.store(0, Ordering::Release);
        assert!(h.answer(ID).is_none(), "not tracking: not answered");
    }

    #[test]
    fn an_invalidation_during_the_call_keeps_nothing() {
        let h = HotResults::new(HoldSettings::default());
        confirmed(&h);
        let seen = h.generation();
        let key = Value::BulkString(format!("{{q}}:r:{ID}").into_bytes());
        h.on_push(&PushInfo {
            kind: PushKind::Invalidate,
            data: vec![Value::Array(vec![key.clone()])],
        });
        h.hold(&result(ID), 60_000, Instant::now(), seen);
        assert!(h.answer(ID).is_none());
        // Held, then invalidated: gone.
        h.hold(&result(ID), 60_000, Instant::now(), h.generation());
        assert!(h.answer(ID).is_some());
        h.on_push(&PushInfo {
            kind: PushKind::Invalidate,
            data: vec![Value::Array(vec![key])],
        });
        assert!(h.answer(ID).is_none());
        // A flush (no key list) forgets everything.
        h.hold(&result(ID), 60_000, Instant::now(), h.generation());
        h.on_push(&PushInfo {
            kind: PushKind::Invalidate,
            data: vec![Value::Nil],
        });
        assert_eq!(h.len(), 0);
    }

    #[test]
    fn a_confirmation_older_than_the_bound_is_no_trust() {
        let h = HotResults::new(HoldSettings::default());
        h.confirmed_us
            .store(h.micros(Instant::now()), Ordering::Release);
        h.hold(&result(ID), 60_000, Instant::now(), h.generation());
        assert!(h.answer(ID).is_some());
        std::thread::sleep(h.bound + Duration::from_millis(5));
        assert!(h.answer(ID).is_none(), "last PING answered too long ago");
    }

    #[test]
    fn a_hold_ends_when_the_script_said() {
        let h = HotResults::new(HoldSettings::default());
        confirmed(&h);
        h.hold(&result(ID), 1, Instant::now(), h.generation());
        std::thread::sleep(Duration::from_millis(3));
        confirmed(&h);
        assert!(h.answer(ID).is_none());
    }
}
