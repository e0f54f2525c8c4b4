//! Worker operations: the claim/lease life cycle, reap, heartbeats, the upstream rate limit.
//! Each is one Lua script call, except reap which is two (a read-only peek that finds expired
//! leases, then the acting script that gets their keys in KEYS and re-validates each one).
//! A claim is one call: the script finds ready ids itself and derives their record keys from
//! the queue's prefix (same hash tag, so Redis Cluster serves them; see prelude.lua). And a
//! worker that finishes a task can be handed its next one by the same call
//! ([`Queue::complete_and_claim`], [`Queue::reschedule_and_claim`], [`Queue::fail_and_claim`]),
//! so a busy worker needs one call per task.

mod slot_ops;

use crate::decode::int;
use crate::error::{corrupt, QueueError, Result};
use crate::model::{Claimed, Completion, Failed, FailedCall, Reaped, Reschedule, Retry};
use crate::queue::Queue;
use crate::scripts::SCRIPTS;
use crate::TaskId;

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

impl Queue {
    /// Leases up to `max_n` ready tasks to `worker` for `lease_ms`, each with a new fencing
    /// token, in one call: due polls and retries first, then interactive, then background work
    /// (with its share: queue/lua/prelude/fair.lua). Empty while paused.
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
    ///
    /// [`QueueError::LayoutChanged`] once this process knows the queue was repartitioned
    /// under it ([`Queue::layout_changed`]): it would claim from the old layout.
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
        if let Some(e) = self.layout_changed() {
            return Err(e);
        }
        let slots = self.slots();
        if let Some(p) = woken.filter(|p| *p < slots.len()) {
            return slots[p].claim(worker, max_n, lease_ms, true).await;
        }
        let start = self.next_partition();
        let mut out = Vec::new();
        for i in 0..slots.len() {
            let slot = &slots[(start + i) % slots.len()];
            out.extend(
                slot.claim(worker, max_n - out.len(), lease_ms, false)
                    .await?,
            );
            if out.len() >= max_n {
                break;
            }
        }
        Ok(out)
    }

    /// Extends a live lease; returns the new deadline. StaleToken if the lease is not yours.
    pub async fn renew(&self, id: &str, token: u64, lease_ms: u64) -> Result<i64> {
        self.slot_of(id).renew(id, token, lease_ms).await
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
        self.chained_write(
            items,
            |c| c.id.as_str(),
            next_n,
            |slot, chunk, next| async move {
                slot.complete_and_claim(&chunk, worker, next, lease_ms)
                    .await
            },
        )
        .await
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
            job: None,
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
        self.chained_write(
            items,
            |r| r.id.as_str(),
            next_n,
            |slot, chunk, next| async move {
                slot.reschedule_and_claim(&chunk, worker, next, lease_ms)
                    .await
            },
        )
        .await
    }

    /// Records an error (one attempt). Retry::After goes back to due after the delay unless
    /// attempts reach max_attempts or the retry would land past the deadline; then dead.
    /// `latency_ms`: how long the failed call took (see [`Queue::fail_and_claim`] for its
    /// HTTP status and body).
    pub async fn fail(
        &self,
        id: &str,
        token: u64,
        error: &str,
        retry: Retry,
        latency_ms: u64,
    ) -> Result<Failed> {
        let call = FailedCall {
            took_ms: latency_ms,
            ..FailedCall::default()
        };
        self.fail_and_claim(id, token, error, &call, retry, "", 0, 1)
            .await?
            .0
    }

    /// [`Queue::fail`] with the failed call in full (its HTTP status, duration and the start
    /// of its body, cut to [`crate::FAILED_BODY_MAX`] bytes: the admin's task page shows each
    /// beside the message), and in the same call leases `worker` up to `next_n` new tasks (as
    /// [`Queue::complete_and_claim`]). A stale token is the first part's error; the claim
    /// happens either way.
    #[allow(clippy::too_many_arguments)]
    pub async fn fail_and_claim(
        &self,
        id: &str,
        token: u64,
        error: &str,
        call: &FailedCall,
        retry: Retry,
        worker: &str,
        next_n: usize,
        lease_ms: u64,
    ) -> Result<(Result<Failed>, Vec<Claimed>)> {
        /// The one item of this write, routed like a batch's (`chained_write`).
        #[derive(Clone)]
        struct Failure<'a> {
            id: &'a str,
            token: u64,
            error: &'a str,
            call: &'a FailedCall,
            retry: Retry,
        }
        let item = Failure {
            id,
            token,
            error,
            call,
            retry,
        };
        let (mut outcomes, claimed) = self
            .chained_write(
                &[item],
                |f| f.id,
                next_n,
                |slot, chunk, next| async move {
                    let Some(f) = chunk.first() else {
                        // The claim asked for, in another slot than the task's.
                        return Ok((Vec::new(), slot.claim(worker, next, lease_ms, false).await?));
                    };
                    let (outcome, claimed) = slot
                        .fail_and_claim(
                            f.id, f.token, f.error, f.call, f.retry, worker, next, lease_ms,
                        )
                        .await?;
                    Ok((vec![outcome], claimed))
                },
            )
            .await?;
        let outcome = outcomes
            .pop()
            .ok_or_else(|| corrupt("fail: no answer for the task"))?;
        Ok((outcome, claimed))
    }

    /// Ends a lease now; the task is due now. With `Some(token)` only that lease (else
    /// StaleToken); with `None` (admin) whatever lease is live. Ok(false): nothing leased.
    pub async fn release(&self, id: &str, token: Option<u64>, who: &str) -> Result<bool> {
        self.slot_of(id).release(id, token, who).await
    }

    /// Returns up to `max_n` expired leases to due now (or dead: as "poison" after
    /// max_lease_losses, as "deadline" when lost after the whole-life deadline). Also trims
    /// old throughput buckets and stale result-index entries, so call it periodically (e.g.
    /// every second) even when nothing expires.
    pub async fn reap(&self, max_n: usize) -> Result<Reaped> {
        let all = self.fan(|s| async move { s.reap(max_n).await }).await?;
        if self.config().breaker.failures > 0 {
            self.mirror_breakers().await?;
        }
        Ok(crate::read::merge::reaped(all))
    }

    /// Earliest due time (ms) of any due task, so an idle worker knows how long to sleep:
    /// 0 when a ready list holds work (ready now).
    pub async fn next_due_ms(&self) -> Result<Option<i64>> {
        let all = self.fan(|s| async move { s.next_due_ms().await }).await?;
        Ok(all.into_iter().flatten().min())
    }

    /// Takes one permit of the queue-wide limit on upstream calls (`per_sec` on average, up
    /// to `burst` at once), shared by every worker of the queue on any host: `Ok(0)` means
    /// call now; otherwise the milliseconds to wait before asking again. Redis time decides.
    pub async fn upstream_permit(&self, per_sec: u32, burst: u32) -> Result<u64> {
        let control = self.control();
        let mut inv = control.invocation(&SCRIPTS.upstream_rate);
        inv.arg(per_sec.max(1)).arg(burst.max(1));
        let wait = int(&control.run(&inv).await?)?;
        u64::try_from(wait).map_err(|_| corrupt("upstream_rate: negative wait"))
    }
}
