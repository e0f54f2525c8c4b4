//! Worker operations: the claim/lease life cycle, reap, heartbeats, the upstream rate limit.
//! Each is one Lua script call, except reap which is two (a read-only peek that finds expired
//! leases, then the acting script that gets their keys in KEYS and re-validates each one).
//! A claim is one call: the script finds ready ids itself and derives their record keys from
//! the queue's prefix (same hash tag, so Redis Cluster serves them; see prelude.lua). And a
//! worker that finishes a task can be handed its next one by the same call
//! ([`Queue::complete_and_claim`], [`Queue::reschedule_and_claim`], [`Queue::fail_and_claim`]),
//! so a busy worker needs one call per task.

use crate::decode::{self, array, int, status, string};
use crate::error::{corrupt, QueueError, Result};
use crate::keys::Keys;
use crate::library::Invocation;
use crate::model::{
    Claimed, Completion, Failed, Reaped, Reschedule, Retry, TenantLimits, WorkerInfo,
};
use crate::queue::{clamp_ms, Queue};
use crate::scripts::SCRIPTS;
use crate::TaskId;
use redis::Value;

/// Most tasks one claim, completion batch or reap call handles, so one script never runs long.
pub const MAX_BATCH: usize = 1000;
/// Throughput buckets are kept this long (reap trims older ones).
pub const THROUGHPUT_RETENTION_MS: u64 = 24 * 3600 * 1000;
/// How long reap keeps the hourly roll-up of older minutes: a week (plus the hour a week ago,
/// so the week's first point is whole).
pub const THROUGHPUT_HOURLY_RETENTION_MS: u64 = (7 * 24 + 1) * 3600 * 1000;

/// Most leases [`Queue::reap`] recounts per tenant (fair_sync.lua); above it the running
/// counts alone are trusted.
const FAIR_SYNC_MAX_LEASES: usize = 5000;
/// How often one process recounts them: the recount reads every leased record, and the
/// running counts only drift on rare paths (a record deleted while leased), so not every reap.
const FAIR_SYNC_EVERY_MS: i64 = 10_000;

fn stale_or(tag: &str, what: &str) -> QueueError {
    if tag == "stale" {
        QueueError::StaleToken
    } else {
        corrupt(format!("{what}: unexpected reply {tag:?}"))
    }
}

/// The last seven KEYS of every claiming script (the fair-share keys, the breaker, the wake-up
/// list) and its last three ARGV (the per-tenant limits), added after the script's own.
pub(crate) fn claim_tail(inv: &mut Invocation<'_>, k: &Keys, limits: &TenantLimits) {
    inv.key(&k.fair)
        .key(&k.fairt)
        .key(&k.fairv)
        .key(&k.fairc)
        .key(&k.fairr)
        .key(&k.breaker)
        .key(&k.wakeups)
        .arg(limits.concurrency)
        .arg(
            if limits.rate_per_sec.is_finite() && limits.rate_per_sec > 0.0 {
                format!("{:.6}", limits.rate_per_sec.min(1e6))
            } else {
                "0".to_string()
            },
        )
        .arg(limits.burst.max(1));
}

/// The nine KEYS every claiming script starts with (claim.lua's header); its tail
/// ([`claim_tail`]) is added after the script's own keys and arguments.
fn claim_keys(inv: &mut Invocation<'_>, k: &Keys) {
    inv.key(&k.ready)
        .key(&k.ready_bg)
        .key(&k.due)
        .key(&k.retry)
        .key(&k.lease)
        .key(&k.token)
        .key(&k.paused)
        .key(&k.share)
        .key(&k.events);
}

/// The script calls of a batched write: chunks of at most [`MAX_BATCH`] items, the next
/// tasks asked for with the last one (an empty batch is a plain claim; nothing at all is no
/// call).
fn calls<T>(items: &[T], next_n: usize) -> Vec<(&[T], usize)> {
    let next_n = next_n.min(MAX_BATCH);
    if items.is_empty() {
        return if next_n > 0 {
            vec![(items, next_n)]
        } else {
            Vec::new()
        };
    }
    let n = items.len().div_ceil(MAX_BATCH);
    items
        .chunks(MAX_BATCH)
        .enumerate()
        .map(|(i, c)| (c, if i + 1 == n { next_n } else { 0 }))
        .collect()
}

pub(crate) fn opt_string(v: &Value) -> Result<Option<String>> {
    match v {
        Value::Nil => Ok(None),
        other => string(other).map(Some),
    }
}

fn claimed_rows(v: Value) -> Result<Vec<Claimed>> {
    array(v)?.into_iter().map(claimed_row).collect()
}

impl Queue {
    /// Leases up to `max_n` ready tasks to `worker` for `lease_ms`, each with a new fencing
    /// token, in one call: due polls and retries first, then interactive, then background work
    /// (with its share: prelude.lua). Empty while paused.
    pub async fn claim(&self, worker: &str, max_n: usize, lease_ms: u64) -> Result<Vec<Claimed>> {
        self.claim_woken(worker, max_n, lease_ms, false).await
    }

    /// [`Queue::claim`] by a worker whose [`crate::Wakeups::wait`] has just taken a wake-up
    /// entry (`woken`): the claim then removes one entry fewer from the wake-up list, so the
    /// list keeps one entry per ready task nobody has claimed (see `wake_workers` in the
    /// prelude).
    pub async fn claim_woken(
        &self,
        worker: &str,
        max_n: usize,
        lease_ms: u64,
        woken: bool,
    ) -> Result<Vec<Claimed>> {
        self.claim_woken_at(worker, max_n, lease_ms, woken.then_some(0))
            .await
    }

    /// [`Queue::claim_woken`] naming the partition whose wake-up list woke this process
    /// (`woken`; see [`Queue::partition_wakeups`]). A partitioned queue then claims from that
    /// partition only (the wake-up was for a task there); without a wake-up it sweeps the
    /// partitions from the next of its rotation until it has `max_n` tasks or has asked each.
    pub async fn claim_woken_at(
        &self,
        worker: &str,
        max_n: usize,
        lease_ms: u64,
        woken: Option<usize>,
    ) -> Result<Vec<Claimed>> {
        if max_n == 0 {
            return Ok(Vec::new());
        }
        if let Some(parts) = self.parts() {
            if let Some(p) = woken.filter(|p| *p < parts.len()) {
                return parts[p].claim_one(worker, max_n, lease_ms, true).await;
            }
            let start = self.next_partition();
            let mut out = Vec::new();
            for i in 0..parts.len() {
                let part = &parts[(start + i) % parts.len()];
                out.extend(
                    part.claim_one(worker, max_n - out.len(), lease_ms, false)
                        .await?,
                );
                if out.len() >= max_n {
                    break;
                }
            }
            return Ok(out);
        }
        self.claim_one(worker, max_n, lease_ms, woken.is_some())
            .await
    }

    /// A claim in this partition alone (or the whole queue of one partition).
    async fn claim_one(
        &self,
        worker: &str,
        max_n: usize,
        lease_ms: u64,
        woken: bool,
    ) -> Result<Vec<Claimed>> {
        if max_n == 0 {
            return Ok(Vec::new());
        }
        let k = self.keys();
        let mut inv = self.invocation(&SCRIPTS.claim);
        claim_keys(&mut inv, k);
        inv.arg(worker)
            .arg(max_n.min(MAX_BATCH))
            .arg(clamp_ms(lease_ms).max(1))
            .arg(u8::from(woken));
        claim_tail(&mut inv, k, &self.config().tenants);
        claimed_rows(self.run(&inv).await?)
    }

    /// Extends a live lease; returns the new deadline. StaleToken if the lease is not yours.
    pub async fn renew(&self, id: &str, token: u64, lease_ms: u64) -> Result<i64> {
        if let Some(p) = self.part_for(id) {
            return (p.renew_one(id, token, lease_ms)).await;
        }
        self.renew_one(id, token, lease_ms).await
    }

    /// [`Queue::renew`] on this partition alone (or the whole queue of one partition).
    async fn renew_one(&self, id: &str, token: u64, lease_ms: u64) -> Result<i64> {
        let k = self.keys();
        let mut inv = self.invocation(&SCRIPTS.renew);
        inv.key(k.task(id))
            .key(&k.lease)
            .arg(id)
            .arg(token)
            .arg(clamp_ms(lease_ms).max(1));
        let (tag, rest) = status(self.run(&inv).await?)?;
        match (tag.as_str(), rest.first()) {
            ("ok", Some(d)) => int(d),
            (t, _) => Err(stale_or(t, "renew")),
        }
    }

    /// Stores the final result and removes the task. StaleToken (nothing written) if the
    /// token is not the current lease's.
    pub async fn complete(
        &self,
        id: &str,
        token: u64,
        result: &str,
        latency_ms: u64,
    ) -> Result<()> {
        let item = Completion {
            id: TaskId::parse(id).map_err(|_| QueueError::NotFound)?,
            token,
            result: result.to_string(),
            latency_ms,
        };
        let (mut flags, _) = self.complete_and_claim(&[item], "", 0, 1).await?;
        flags.pop().unwrap_or(Err(QueueError::StaleToken))
    }

    /// Completes many leases in one script call (at most [`MAX_BATCH`] per call; longer
    /// slices are split). Returns one result per item, in order: Ok or StaleToken — a stale
    /// item writes nothing and does not affect the others.
    pub async fn complete_many(&self, items: &[Completion]) -> Result<Vec<Result<()>>> {
        Ok(self.complete_and_claim(items, "", 0, 1).await?.0)
    }

    /// [`Queue::complete_many`], and in the same call leases `worker` up to `next_n` new tasks
    /// for `lease_ms` (as [`Queue::claim`]; none while paused). With `items` empty it is a
    /// plain claim.
    pub async fn complete_and_claim(
        &self,
        items: &[Completion],
        worker: &str,
        next_n: usize,
        lease_ms: u64,
    ) -> Result<(Vec<Result<()>>, Vec<Claimed>)> {
        if let Some(parts) = self.parts() {
            return self
                .partitioned_write(
                    parts,
                    items,
                    |c| &c.id,
                    next_n,
                    |part, chunk, next| async move {
                        (part.complete_and_claim_one(&chunk, worker, next, lease_ms)).await
                    },
                )
                .await;
        }
        self.complete_and_claim_one(items, worker, next_n, lease_ms)
            .await
    }

    /// [`Queue::complete_and_claim`] on this partition alone (or the whole queue of one partition).
    async fn complete_and_claim_one(
        &self,
        items: &[Completion],
        worker: &str,
        next_n: usize,
        lease_ms: u64,
    ) -> Result<(Vec<Result<()>>, Vec<Claimed>)> {
        let k = self.keys();
        let mut out = Vec::with_capacity(items.len());
        let mut claimed = Vec::new();
        for (chunk, next) in calls(items, next_n) {
            let mut inv = self.invocation(&SCRIPTS.complete);
            claim_keys(&mut inv, k);
            inv.key(&k.results)
                .key(&k.tp)
                .key(&k.tpmin)
                .arg(clamp_ms(self.config().result_ttl_ms).max(1))
                .arg(worker)
                .arg(next)
                .arg(clamp_ms(lease_ms).max(1));
            for c in chunk {
                inv.key(k.task(&c.id))
                    .key(k.hist(&c.id))
                    .key(k.result(&c.id))
                    .key(k.partial(&c.id))
                    .arg(c.id.as_str())
                    .arg(c.token)
                    .arg(&c.result)
                    .arg(clamp_ms(c.latency_ms));
            }
            claim_tail(&mut inv, k, &self.config().tenants);
            let mut parts = array(self.run(&inv).await?)?.into_iter();
            let flags = array(parts.next().unwrap_or(Value::Nil))?;
            if flags.len() != chunk.len() {
                return Err(corrupt("complete: reply length differs from the batch"));
            }
            for f in &flags {
                out.push(if int(f)? == 1 {
                    Ok(())
                } else {
                    Err(QueueError::StaleToken)
                });
            }
            claimed.extend(claimed_rows(parts.next().unwrap_or(Value::Nil))?);
        }
        Ok((out, claimed))
    }

    /// "Still processing": counts a poll (not an attempt), keeps `partial` if given, and makes
    /// the task due again after `delay_ms`. Returns the new due time, or 0 when that time
    /// would be past the whole-life deadline — the task is then dead with reason "deadline".
    pub async fn reschedule(
        &self,
        id: &str,
        token: u64,
        delay_ms: u64,
        partial: Option<&str>,
        latency_ms: u64,
    ) -> Result<i64> {
        let item = Reschedule {
            id: TaskId::parse(id).map_err(|_| QueueError::NotFound)?,
            token,
            delay_ms,
            partial: partial.map(str::to_string),
            latency_ms,
        };
        let (mut r, _) = self.reschedule_and_claim(&[item], "", 0, 1).await?;
        r.pop().unwrap_or(Err(QueueError::StaleToken))
    }

    /// Many [`Queue::reschedule`]s in one call per [`MAX_BATCH`]; one result per item, in order.
    pub async fn reschedule_many(&self, items: &[Reschedule]) -> Result<Vec<Result<i64>>> {
        Ok(self.reschedule_and_claim(items, "", 0, 1).await?.0)
    }

    /// [`Queue::reschedule_many`], and in the same call leases `worker` up to `next_n` new
    /// tasks (as [`Queue::complete_and_claim`]).
    pub async fn reschedule_and_claim(
        &self,
        items: &[Reschedule],
        worker: &str,
        next_n: usize,
        lease_ms: u64,
    ) -> Result<(Vec<Result<i64>>, Vec<Claimed>)> {
        if let Some(parts) = self.parts() {
            return self
                .partitioned_write(
                    parts,
                    items,
                    |r| &r.id,
                    next_n,
                    |part, chunk, next| async move {
                        (part.reschedule_and_claim_one(&chunk, worker, next, lease_ms)).await
                    },
                )
                .await;
        }
        self.reschedule_and_claim_one(items, worker, next_n, lease_ms)
            .await
    }

    /// [`Queue::reschedule_and_claim`] on this partition alone (or the whole queue of one partition).
    async fn reschedule_and_claim_one(
        &self,
        items: &[Reschedule],
        worker: &str,
        next_n: usize,
        lease_ms: u64,
    ) -> Result<(Vec<Result<i64>>, Vec<Claimed>)> {
        let k = self.keys();
        let mut out = Vec::with_capacity(items.len());
        let mut claimed = Vec::new();
        for (chunk, next) in calls(items, next_n) {
            let mut inv = self.invocation(&SCRIPTS.reschedule);
            claim_keys(&mut inv, k);
            inv.key(&k.dead)
                .key(&k.tp)
                .key(&k.tpmin)
                .arg(worker)
                .arg(next)
                .arg(clamp_ms(lease_ms).max(1));
            for r in chunk {
                inv.key(k.task(&r.id))
                    .key(k.hist(&r.id))
                    .key(k.partial(&r.id))
                    .arg(r.id.as_str())
                    .arg(r.token)
                    .arg(clamp_ms(r.delay_ms))
                    .arg(if r.partial.is_some() { "1" } else { "0" })
                    .arg(r.partial.as_deref().unwrap_or(""))
                    .arg(clamp_ms(r.latency_ms));
            }
            claim_tail(&mut inv, k, &self.config().tenants);
            let mut parts = array(self.run(&inv).await?)?.into_iter();
            let flat = array(parts.next().unwrap_or(Value::Nil))?;
            if flat.len() != 2 * chunk.len() {
                return Err(corrupt("reschedule: reply length differs from the batch"));
            }
            for pair in flat.chunks(2) {
                out.push(match string(&pair[0])?.as_str() {
                    "ok" => Ok(int(&pair[1])?),
                    "dead" => Ok(0),
                    t => Err(stale_or(t, "reschedule")),
                });
            }
            claimed.extend(claimed_rows(parts.next().unwrap_or(Value::Nil))?);
        }
        Ok((out, claimed))
    }

    /// Records an error (one attempt). Retry::After goes back to due after the delay unless
    /// attempts reach max_attempts or the retry would land past the deadline; then dead.
    pub async fn fail(
        &self,
        id: &str,
        token: u64,
        error: &str,
        retry: Retry,
        latency_ms: u64,
    ) -> Result<Failed> {
        self.fail_and_claim(id, token, error, retry, latency_ms, "", 0, 1)
            .await?
            .0
    }

    /// [`Queue::fail`], and in the same call leases `worker` up to `next_n` new tasks (as
    /// [`Queue::complete_and_claim`]). A stale token is the first part's error; the claim
    /// happens either way.
    #[allow(clippy::too_many_arguments)]
    pub async fn fail_and_claim(
        &self,
        id: &str,
        token: u64,
        error: &str,
        retry: Retry,
        latency_ms: u64,
        worker: &str,
        next_n: usize,
        lease_ms: u64,
    ) -> Result<(Result<Failed>, Vec<Claimed>)> {
        if let Some(part) = self.part_for(id) {
            if next_n == 0 || !self.chain_rotates() {
                return (part.fail_and_claim_one(
                    id, token, error, retry, latency_ms, worker, next_n, lease_ms,
                ))
                .await;
            }
            // This hop's claim goes to the rotation's next partition (partition.rs).
            let (outcome, _) = (part
                .fail_and_claim_one(id, token, error, retry, latency_ms, worker, 0, lease_ms))
            .await?;
            let parts = self.parts().unwrap_or_default();
            let next = &parts[self.next_partition()];
            return Ok((
                outcome,
                next.claim_one(worker, next_n, lease_ms, false).await?,
            ));
        }
        self.fail_and_claim_one(
            id, token, error, retry, latency_ms, worker, next_n, lease_ms,
        )
        .await
    }

    /// [`Queue::fail_and_claim`] on this partition alone (or the whole queue of one partition).
    #[allow(clippy::too_many_arguments)]
    async fn fail_and_claim_one(
        &self,
        id: &str,
        token: u64,
        error: &str,
        retry: Retry,
        latency_ms: u64,
        worker: &str,
        next_n: usize,
        lease_ms: u64,
    ) -> Result<(Result<Failed>, Vec<Claimed>)> {
        let k = self.keys();
        let (mode, delay) = match retry {
            Retry::After(d) => ("after", clamp_ms(d)),
            Retry::Dead => ("dead", 0),
        };
        let cfg = self.config();
        let mut inv = self.invocation(&SCRIPTS.fail);
        claim_keys(&mut inv, k);
        inv.key(&k.dead)
            .key(&k.tp)
            .key(&k.tpmin)
            .key(k.task(id))
            .key(k.hist(id))
            .arg(worker)
            .arg(next_n.min(MAX_BATCH))
            .arg(clamp_ms(lease_ms).max(1))
            .arg(id)
            .arg(token)
            .arg(error)
            .arg(mode)
            .arg(delay)
            .arg(clamp_ms(latency_ms))
            .arg(cfg.breaker.failures)
            .arg(format!(
                "{:.4}",
                f64::from(cfg.breaker.error_percent.min(100)) / 100.0
            ))
            .arg(clamp_ms(cfg.breaker.cooldown_ms).max(1));
        claim_tail(&mut inv, k, &cfg.tenants);
        let mut parts = array(self.run(&inv).await?)?.into_iter();
        let (tag, rest) = status(parts.next().unwrap_or(Value::Nil))?;
        let outcome = match (tag.as_str(), rest.as_slice()) {
            ("retry", [due, attempts, ..]) => Ok(Failed::Retrying {
                due_at: int(due)?,
                attempts: u32::try_from(int(attempts)?)
                    .map_err(|_| corrupt("fail: attempts out of range"))?,
            }),
            ("dead", [reason, ..]) => Ok(Failed::Dead {
                reason: string(reason)?
                    .parse()
                    .map_err(|e: model::UnknownName| corrupt(e.to_string()))?,
            }),
            (t, _) => Err(stale_or(t, "fail")),
        };
        if let Err(e @ QueueError::Corrupt(_)) = outcome {
            return Err(e);
        }
        let claimed = claimed_rows(parts.next().unwrap_or(Value::Nil))?;
        Ok((outcome, claimed))
    }

    /// Ends a lease now; the task is due now. With `Some(token)` only that lease (else
    /// StaleToken); with `None` (admin) whatever lease is live. Ok(false): nothing leased.
    pub async fn release(&self, id: &str, token: Option<u64>, who: &str) -> Result<bool> {
        if let Some(p) = self.part_for(id) {
            return (p.release_one(id, token, who)).await;
        }
        self.release_one(id, token, who).await
    }

    /// [`Queue::release`] on this partition alone (or the whole queue of one partition).
    async fn release_one(&self, id: &str, token: Option<u64>, who: &str) -> Result<bool> {
        let k = self.keys();
        let mut inv = self.invocation(&SCRIPTS.release);
        inv.key(k.task(id))
            .key(k.hist(id))
            .key(&k.ready)
            .key(&k.ready_bg)
            .key(&k.due)
            .key(&k.lease)
            .key(&k.retry)
            .key(&k.events)
            .arg(id)
            .arg(token.map(|t| t.to_string()).unwrap_or_default())
            .arg(who)
            .key(&k.wakeups)
            .key(&k.fairc);
        let (tag, _) = status(self.run(&inv).await?)?;
        match tag.as_str() {
            "ok" => Ok(true),
            "no" => Ok(false),
            t => Err(stale_or(t, "release")),
        }
    }

    /// Returns up to `max_n` expired leases to due now (or dead as "poison" after
    /// max_lease_losses). Also trims old throughput buckets and stale result-index entries,
    /// so call it periodically (e.g. every second) even when nothing expires.
    pub async fn reap(&self, max_n: usize) -> Result<Reaped> {
        if let Some(parts) = self.parts() {
            let all = Queue::fan(parts, |p| async move { p.reap_one(max_n).await }).await?;
            if self.config().breaker.failures > 0 {
                self.mirror_breakers(parts).await?;
            }
            let mut out = Reaped::default();
            for r in all {
                out.requeued.extend(r.requeued);
                out.dead.extend(r.dead);
            }
            return Ok(out);
        }
        self.reap_one(max_n).await
    }

    /// [`Queue::reap`] on this partition alone (or the whole queue of one partition).
    async fn reap_one(&self, max_n: usize) -> Result<Reaped> {
        let k = self.keys();
        let mut peek = self.invocation(&SCRIPTS.peek_expired);
        peek.key(&k.lease).arg(max_n.clamp(1, MAX_BATCH));
        let flat = array(self.run(&peek).await?)?;
        if flat.len() % 2 != 0 {
            return Err(corrupt("peek_expired: odd reply"));
        }
        let cfg = self.config();
        let mut inv = self.invocation(&SCRIPTS.reap);
        inv.key(&k.ready)
            .key(&k.ready_bg)
            .key(&k.due)
            .key(&k.lease)
            .key(&k.retry)
            .key(&k.dead)
            .key(&k.events)
            .key(&k.tp)
            .key(&k.tpmin)
            .key(&k.results)
            .key(&k.tphour)
            .key(&k.tphourix)
            .arg(cfg.max_lease_losses)
            .arg(THROUGHPUT_RETENTION_MS)
            .arg(clamp_ms(cfg.result_ttl_ms))
            .arg(THROUGHPUT_HOURLY_RETENTION_MS);
        for pair in flat.chunks(2) {
            let id = string(&pair[0])?;
            let seen = string(&pair[1])?;
            inv.key(k.task(&id)).key(k.hist(&id)).arg(id).arg(seen);
        }
        inv.key(&k.wakeups).key(&k.fairc);
        let mut parts = array(self.run(&inv).await?)?.into_iter();
        if cfg.tenants.concurrency > 0 {
            self.fair_sync_now_and_then().await?;
        }
        let mut ids = || -> Result<Vec<TaskId>> {
            array(parts.next().unwrap_or(Value::Nil))?
                .iter()
                .map(decode::task_id)
                .collect()
        };
        let requeued = ids()?;
        let dead = ids()?;
        Ok(Reaped { requeued, dead })
    }

    /// The per-tenant cap counts on running lease counts: recount them from the lease zset
    /// (fair_sync.lua) at most every [`FAIR_SYNC_EVERY_MS`] per process, so no drift can block
    /// a tenant for long.
    async fn fair_sync_now_and_then(&self) -> Result<()> {
        use std::sync::atomic::Ordering;
        let now = crate::local_ms();
        let last = &self.inner.last_fair_sync_ms;
        let before = last.load(Ordering::Relaxed);
        if now - before < FAIR_SYNC_EVERY_MS
            || last
                .compare_exchange(before, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return Ok(());
        }
        let k = self.keys();
        let mut sync = self.invocation(&SCRIPTS.fair_sync);
        sync.key(&k.lease).key(&k.fairc).arg(FAIR_SYNC_MAX_LEASES);
        self.run(&sync).await?;
        Ok(())
    }

    /// Earliest due time (ms) of any due task, so an idle worker knows how long to sleep:
    /// 0 when a ready list holds work (ready now).
    pub async fn next_due_ms(&self) -> Result<Option<i64>> {
        if let Some(parts) = self.parts() {
            let all = Queue::fan(parts, |p| async move { p.next_due_ms_one().await }).await?;
            return Ok(all.into_iter().flatten().min());
        }
        self.next_due_ms_one().await
    }

    /// [`Queue::next_due_ms`] on this partition alone (or the whole queue of one partition).
    async fn next_due_ms_one(&self) -> Result<Option<i64>> {
        let k = self.keys();
        let mut c = self.conn.clone();
        let (ready, bg, fair, head): (u64, u64, u64, Value) = redis::pipe()
            .llen(&k.ready)
            .llen(&k.ready_bg)
            .zcard(&k.fair)
            .cmd("ZRANGE")
            .arg(&k.due)
            .arg(0)
            .arg(0)
            .arg("WITHSCORES")
            .query_async(&mut c)
            .await?;
        if ready + bg + fair > 0 {
            return Ok(Some(0));
        }
        let a = array(head)?;
        match a.as_slice() {
            [] => Ok(None),
            [_, score] => Ok(Some(decode::parse_i64(&string(score)?)?)),
            // RESP3 returns [[member, score]]
            [pair] => match array(pair.clone())?.as_slice() {
                [_, score] => Ok(Some(decode::parse_i64(&string(score)?)?)),
                _ => Err(corrupt("next_due: bad reply")),
            },
            _ => Err(corrupt("next_due: bad reply")),
        }
    }

    /// Records a worker as alive for `ttl_ms`; `last_seen_ms` is set from Redis time.
    pub async fn heartbeat(&self, w: &WorkerInfo, ttl_ms: u64) -> Result<()> {
        let k = self.keys();
        let mut inv = self.invocation(&SCRIPTS.heartbeat);
        inv.key(&k.workers)
            .key(k.worker(&w.id))
            .arg(&w.id)
            .arg(&w.host)
            .arg(w.pid)
            .arg(w.started_ms)
            .arg(w.in_flight)
            .arg(w.completed)
            .arg(w.dead)
            .arg(clamp_ms(ttl_ms).max(1));
        self.run(&inv).await?;
        Ok(())
    }

    /// Takes one permit of the queue-wide limit on upstream calls (`per_sec` on average, up
    /// to `burst` at once), shared by every worker of the queue on any host: `Ok(0)` means
    /// call now; otherwise the milliseconds to wait before asking again. Redis time decides.
    pub async fn upstream_permit(&self, per_sec: u32, burst: u32) -> Result<u64> {
        let mut inv = self.invocation(&SCRIPTS.upstream_rate);
        inv.key(&self.keys().upstream_rate)
            .arg(per_sec.max(1))
            .arg(burst.max(1));
        let wait = int(&self.run(&inv).await?)?;
        u64::try_from(wait).map_err(|_| corrupt("upstream_rate: negative wait"))
    }

    /// Forgets a worker at once (clean shutdown) instead of waiting for its heartbeat TTL,
    /// and tells the dashboard (`worker_left`).
    pub async fn remove_worker(&self, worker_id: &str) -> Result<()> {
        let k = self.keys();
        let mut c = self.conn.clone();
        let msg = serde_json::json!({ "kind": "worker_left", "worker": worker_id }).to_string();
        // Not MULTI/EXEC (a cluster connection has no transactions); nothing needs it: a
        // half-done removal leaves an index entry that workers() drops once the hash is gone.
        redis::pipe()
            .del(k.worker(worker_id))
            .zrem(&k.workers, worker_id)
            .publish(self.channels().dashboard, msg)
            .query_async::<()>(&mut c)
            .await?;
        Ok(())
    }
}

fn claimed_row(v: Value) -> Result<Claimed> {
    let a = array(v)?;
    let [id, query, payload, token, attempts, polls, max_attempts, created, deadline, lease] =
        a.as_slice()
    else {
        return Err(corrupt("claim: bad row"));
    };
    let u32_of = |v: &Value| -> Result<u32> {
        u32::try_from(int(v)?).map_err(|_| corrupt("claim: counter out of range"))
    };
    Ok(Claimed {
        id: decode::task_id(id)?,
        query: string(query)?,
        payload: string(payload)?,
        token: u64::try_from(int(token)?).map_err(|_| corrupt("claim: bad token"))?,
        attempts: u32_of(attempts)?,
        polls: u32_of(polls)?,
        max_attempts: u32_of(max_attempts)?,
        created_ms: int(created)?,
        deadline_ms: int(deadline)?,
        lease_deadline_ms: int(lease)?,
    })
}
