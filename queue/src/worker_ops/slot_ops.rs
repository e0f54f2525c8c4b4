//! The worker operations of one slot: each one script call on the slot's keys (reap: a peek,
//! then the acting script), plus the KEYS and ARGV every claiming script shares.

use crate::decode::{self, array, int, status, string};
use crate::error::{corrupt, QueueError, Result};
use crate::library::Invocation;
use crate::model::{
    failed_body_start, Claimed, Completion, Failed, FailedCall, Reaped, Reschedule, Retry,
    TenantLimits,
};
use crate::queue::clamp_ms;
use crate::scripts::SCRIPTS;
use crate::slot::Slot;
use crate::TaskId;
use redis::Value;

use super::{FAIR_SYNC_EVERY_MS, FAIR_SYNC_MAX_LEASES, MAX_BATCH};
use super::{THROUGHPUT_HOURLY_RETENTION_MS, THROUGHPUT_RETENTION_MS};

fn stale_or(tag: &str, what: &str) -> QueueError {
    if tag == "stale" {
        QueueError::StaleToken
    } else {
        corrupt(format!("{what}: unexpected reply {tag:?}"))
    }
}

/// The last three ARGV of every claiming function: the per-tenant limits (their keys are the
/// `[claim]` group its header declares).
fn claim_limits(inv: &mut Invocation<'_>, limits: &TenantLimits) {
    inv.arg(limits.concurrency)
        .arg(
            if limits.rate_per_sec.is_finite() && limits.rate_per_sec > 0.0 {
                format!("{:.6}", limits.rate_per_sec.min(1e6))
            } else {
                "0".to_string()
            },
        )
        .arg(limits.burst.max(1));
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

fn claimed_rows(v: Value) -> Result<Vec<Claimed>> {
    array(v)?.into_iter().map(claimed_row).collect()
}

impl Slot {
    /// A claim in this slot (claim.lua).
    /// A claim in this partition alone (or the whole queue of one partition).
    pub(crate) async fn claim(
        &self,
        worker: &str,
        max_n: usize,
        lease_ms: u64,
        woken: bool,
    ) -> Result<Vec<Claimed>> {
        if max_n == 0 {
            return Ok(Vec::new());
        }
        let mut inv = self.invocation(&SCRIPTS.claim);
        inv.arg(worker)
            .arg(max_n.min(MAX_BATCH))
            .arg(clamp_ms(lease_ms).max(1))
            .arg(u8::from(woken));
        claim_limits(&mut inv, &self.config().tenants);
        claimed_rows(self.run(&inv).await?)
    }

    /// [`crate::Queue::renew`] in this slot.
    pub(crate) async fn renew(&self, id: &str, token: u64, lease_ms: u64) -> Result<i64> {
        let mut inv = self.invocation(&SCRIPTS.renew);
        inv.for_task(id)
            .arg(id)
            .arg(token)
            .arg(clamp_ms(lease_ms).max(1));
        let (tag, rest) = status(self.run(&inv).await?)?;
        match (tag.as_str(), rest.first()) {
            ("ok", Some(d)) => int(d),
            (t, _) => Err(stale_or(t, "renew")),
        }
    }

    /// [`crate::Queue::complete_and_claim`] of this slot's items, and its claim.
    pub(crate) async fn complete_and_claim(
        &self,
        items: &[Completion],
        worker: &str,
        next_n: usize,
        lease_ms: u64,
    ) -> Result<(Vec<Result<()>>, Vec<Claimed>)> {
        let mut out = Vec::with_capacity(items.len());
        let mut claimed = Vec::new();
        for (chunk, next) in calls(items, next_n) {
            let mut inv = self.invocation(&SCRIPTS.complete);
            inv.arg(clamp_ms(self.config().result_life_ms()).max(1))
                .arg(worker)
                .arg(next)
                .arg(clamp_ms(lease_ms).max(1));
            for c in chunk {
                inv.item(&c.id)
                    .arg(c.id.as_str())
                    .arg(c.token)
                    .arg(&c.result)
                    .arg(clamp_ms(c.latency_ms));
            }
            claim_limits(&mut inv, &self.config().tenants);
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

    /// [`crate::Queue::reschedule_and_claim`] of this slot's items, and its claim.
    pub(crate) async fn reschedule_and_claim(
        &self,
        items: &[Reschedule],
        worker: &str,
        next_n: usize,
        lease_ms: u64,
    ) -> Result<(Vec<Result<i64>>, Vec<Claimed>)> {
        let mut out = Vec::with_capacity(items.len());
        let mut claimed = Vec::new();
        for (chunk, next) in calls(items, next_n) {
            let mut inv = self.invocation(&SCRIPTS.reschedule);
            inv.arg(worker).arg(next).arg(clamp_ms(lease_ms).max(1));
            for r in chunk {
                inv.item(&r.id)
                    .arg(r.id.as_str())
                    .arg(r.token)
                    .arg(clamp_ms(r.delay_ms))
                    .arg(if r.partial.is_some() { "1" } else { "0" })
                    .arg(r.partial.as_deref().unwrap_or(""))
                    .arg(clamp_ms(r.latency_ms))
                    .arg(r.job.as_deref().unwrap_or(""));
            }
            claim_limits(&mut inv, &self.config().tenants);
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

    /// [`crate::Queue::fail_and_claim`] of a task of this slot, and its claim.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn fail_and_claim(
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
        let (mode, delay) = match retry {
            Retry::After(d) => ("after", clamp_ms(d)),
            Retry::Dead => ("dead", 0),
        };
        let cfg = self.config();
        let mut inv = self.invocation(&SCRIPTS.fail);
        inv.for_task(id)
            .arg(worker)
            .arg(next_n.min(MAX_BATCH))
            .arg(clamp_ms(lease_ms).max(1))
            .arg(id)
            .arg(token)
            .arg(error)
            .arg(mode)
            .arg(delay)
            .arg(clamp_ms(call.took_ms))
            .arg(call.http_status.unwrap_or(0))
            .arg(failed_body_start(&call.body))
            .arg(cfg.breaker.failures)
            .arg(format!(
                "{:.4}",
                f64::from(cfg.breaker.error_percent.min(100)) / 100.0
            ))
            .arg(clamp_ms(cfg.breaker.cooldown_ms).max(1));
        claim_limits(&mut inv, &cfg.tenants);
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
        let opened_until = parts.next().map(|v| int(&v)).transpose()?.unwrap_or(0);
        if opened_until > 0 {
            // Inside the worker's `process` span: an event of the very call whose error
            // opened the breaker (and a log line).
            tracing::warn!(id, until_ms = opened_until, queue = %self.config().name,
                "circuit breaker opened: calls stop until the cool-down ends");
        }
        Ok((outcome, claimed))
    }

    /// [`crate::Queue::release`] in this slot.
    pub(crate) async fn release(&self, id: &str, token: Option<u64>, who: &str) -> Result<bool> {
        let mut inv = self.invocation(&SCRIPTS.release);
        inv.for_task(id)
            .arg(id)
            .arg(token.map(|t| t.to_string()).unwrap_or_default())
            .arg(who);
        let (tag, _) = status(self.run(&inv).await?)?;
        match tag.as_str() {
            "ok" => Ok(true),
            "no" => Ok(false),
            t => Err(stale_or(t, "release")),
        }
    }

    /// [`crate::Queue::reap`] of this slot.
    pub(crate) async fn reap(&self, max_n: usize) -> Result<Reaped> {
        let mut peek = self.invocation(&SCRIPTS.peek_expired);
        peek.arg(max_n.clamp(1, MAX_BATCH));
        let flat = array(self.run(&peek).await?)?;
        if flat.len() % 2 != 0 {
            return Err(corrupt("peek_expired: odd reply"));
        }
        let cfg = self.config();
        let mut inv = self.invocation(&SCRIPTS.reap);
        inv.arg(cfg.max_lease_losses)
            .arg(THROUGHPUT_RETENTION_MS)
            .arg(clamp_ms(cfg.result_life_ms()))
            .arg(THROUGHPUT_HOURLY_RETENTION_MS);
        for pair in flat.chunks(2) {
            let id = string(&pair[0])?;
            let seen = string(&pair[1])?;
            inv.item(&id).arg(id).arg(seen);
        }
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
        let last = self.last_fair_sync_ms();
        let before = last.load(Ordering::Relaxed);
        if now - before < FAIR_SYNC_EVERY_MS
            || last
                .compare_exchange(before, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return Ok(());
        }
        let mut sync = self.invocation(&SCRIPTS.fair_sync);
        sync.arg(FAIR_SYNC_MAX_LEASES);
        self.run(&sync).await?;
        Ok(())
    }

    /// [`crate::Queue::next_due_ms`] of this slot.
    pub(crate) async fn next_due_ms(&self) -> Result<Option<i64>> {
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
}

fn claimed_row(v: Value) -> Result<Claimed> {
    let a = array(v)?;
    let [id, query, payload, token, attempts, polls, max_attempts, created, deadline, lease, refresh, tc, tl, tenant, job] =
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
        refresh: int(refresh)? == 1,
        trace: model::TaskTrace::from_fields(Some(&string(tc)?), Some(&string(tl)?)),
        tenant: string(tenant)?,
        job: Some(string(job)?).filter(|j| !j.is_empty()),
    })
}
