//! Producer and worker operations: enqueue, the claim/lease life cycle, reap, heartbeats.
//! Each is one Lua script call, except claim and reap which are two (a read-only peek that
//! finds candidate ids, then the acting script that gets their keys in KEYS and re-validates
//! each one) because a cluster-safe script may only touch keys it was given.

use crate::decode::{self, array, int, status, string};
use crate::error::{corrupt, QueueError, Result};
use crate::model::{
    Claimed, Completion, EnqueuePolicy, Enqueued, Failed, Reaped, Retry, WorkerInfo,
};
use crate::queue::{clamp_ms, Queue};
use crate::scripts::SCRIPTS;
use crate::{normalise_query, task_id};
use redis::Value;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Most tasks one claim or reap call handles, so one script never runs long.
pub const MAX_BATCH: usize = 1000;
/// Rounds of peek+claim when other claimers took every candidate first.
const CLAIM_ROUNDS: usize = 4;
/// Throughput buckets are kept this long (reap trims older ones).
pub const THROUGHPUT_RETENTION_MS: u64 = 24 * 3600 * 1000;

/// Per-process sequence that spreads claimers over the candidate window.
static CLAIM_SEQ: AtomicUsize = AtomicUsize::new(0);

/// Where in a window of `len` candidates a claimer wanting `n` starts. Successive calls (and
/// so concurrent claimers) land on different offsets, while a lone claimer still takes a
/// contiguous run from near the head: roughly oldest-due-first.
fn claim_offset(len: usize, n: usize, worker: &str) -> usize {
    if len <= n {
        return 0;
    }
    let span = len - n + 1;
    let salt = worker
        .bytes()
        .fold(0usize, |h, b| h.wrapping_mul(31).wrapping_add(b as usize));
    let seq = CLAIM_SEQ.fetch_add(1, Ordering::Relaxed);
    seq.wrapping_mul(0x9E37_79B9).wrapping_add(salt) % span
}

fn stale_or(tag: &str, what: &str) -> QueueError {
    if tag == "stale" {
        QueueError::StaleToken
    } else {
        corrupt(format!("{what}: unexpected reply {tag:?}"))
    }
}

impl Queue {
    /// Creates the task for `query` (due now), or joins the live one, or returns the fresh
    /// stored result — atomically, so concurrent callers for one query create one task.
    /// A dead task is replaced by a fresh one: asking again is an explicit new try.
    pub async fn enqueue(
        &self,
        query: &str,
        payload: &str,
        policy: &EnqueuePolicy,
    ) -> Result<Enqueued> {
        let q = normalise_query(query)?;
        let id = task_id(&q);
        let k = self.keys();
        let mut inv = self.invocation(&SCRIPTS.enqueue);
        inv.key(k.task(&id))
            .key(k.result(&id))
            .key(&k.due)
            .key(k.hist(&id))
            .key(&k.events)
            .key(&k.dead)
            .key(&k.retry)
            .arg(&id)
            .arg(&q)
            .arg(payload)
            .arg(clamp_ms(policy.deadline_ms))
            .arg(policy.max_attempts);
        let (tag, rest) = status(self.run(&inv).await?)?;
        let body = rest
            .into_iter()
            .next()
            .ok_or_else(|| corrupt("enqueue: missing record"))?;
        let f = decode::fields(body)?;
        match tag.as_str() {
            "created" => Ok(Enqueued::Created(decode::task(&f)?)),
            "joined" => Ok(Enqueued::Joined(decode::task(&f)?)),
            "stored" => Ok(Enqueued::Stored(decode::stored(&f)?)),
            other => Err(corrupt(format!("enqueue: unexpected reply {other:?}"))),
        }
    }

    /// Leases up to `max_n` ready tasks to `worker` for `lease_ms`, each with a new fencing
    /// token. Empty while paused. One peek plus one claim script per round; another round only
    /// when concurrent claimers took every candidate of this one.
    pub async fn claim(&self, worker: &str, max_n: usize, lease_ms: u64) -> Result<Vec<Claimed>> {
        if max_n == 0 {
            return Ok(Vec::new());
        }
        let max_n = max_n.min(MAX_BATCH);
        let lease_ms = clamp_ms(lease_ms).max(1);
        // Peek more than needed so concurrent claimers can start at different offsets.
        let window = (max_n * 2 + 8).min(2 * MAX_BATCH);
        let k = self.keys();
        for _ in 0..CLAIM_ROUNDS {
            let mut peek = self.invocation(&SCRIPTS.peek_due);
            peek.key(&k.due).key(&k.paused).arg(window);
            let mut ids = array(self.run(&peek).await?)?
                .iter()
                .map(string)
                .collect::<Result<Vec<_>>>()?;
            if ids.is_empty() {
                return Ok(Vec::new());
            }
            let off = claim_offset(ids.len(), max_n, worker);
            ids.rotate_left(off);

            let mut inv = self.invocation(&SCRIPTS.claim);
            inv.key(&k.due)
                .key(&k.lease)
                .key(&k.retry)
                .key(&k.token)
                .key(&k.paused)
                .key(&k.events)
                .arg(worker)
                .arg(max_n)
                .arg(lease_ms);
            for id in &ids {
                inv.key(k.task(id));
            }
            for id in &ids {
                inv.arg(id);
            }
            let rows = array(self.run(&inv).await?)?;
            if !rows.is_empty() {
                return rows.into_iter().map(claimed_row).collect();
            }
        }
        Ok(Vec::new())
    }

    /// Extends a live lease; returns the new deadline. StaleToken if the lease is not yours.
    pub async fn renew(&self, id: &str, token: u64, lease_ms: u64) -> Result<i64> {
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
        let k = self.keys();
        let mut inv = self.invocation(&SCRIPTS.complete);
        inv.key(&k.results)
            .key(&k.lease)
            .key(&k.events)
            .key(&k.tp)
            .key(&k.tpmin)
            .arg(clamp_ms(self.config().result_ttl_ms));
        inv.key(k.task(id))
            .key(k.hist(id))
            .key(k.result(id))
            .arg(id)
            .arg(token)
            .arg(result)
            .arg(clamp_ms(latency_ms));
        match array(self.run(&inv).await?)?.as_slice() {
            [v] if int(v)? == 1 => Ok(()),
            [_] => Err(QueueError::StaleToken),
            _ => Err(corrupt("complete: bad reply")),
        }
    }

    /// Completes many leases in one script call (at most [`MAX_BATCH`] per call; longer
    /// slices are split). Returns one result per item, in order: Ok or StaleToken — a stale
    /// item writes nothing and does not affect the others.
    pub async fn complete_many(&self, items: &[Completion]) -> Result<Vec<Result<()>>> {
        let k = self.keys();
        let mut out = Vec::with_capacity(items.len());
        for chunk in items.chunks(MAX_BATCH) {
            let mut inv = self.invocation(&SCRIPTS.complete);
            inv.key(&k.results)
                .key(&k.lease)
                .key(&k.events)
                .key(&k.tp)
                .key(&k.tpmin)
                .arg(clamp_ms(self.config().result_ttl_ms));
            for c in chunk {
                inv.key(k.task(&c.id))
                    .key(k.hist(&c.id))
                    .key(k.result(&c.id))
                    .arg(&c.id)
                    .arg(c.token)
                    .arg(&c.result)
                    .arg(clamp_ms(c.latency_ms));
            }
            let flags = array(self.run(&inv).await?)?;
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
        }
        Ok(out)
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
        let k = self.keys();
        let mut inv = self.invocation(&SCRIPTS.reschedule);
        inv.key(k.task(id))
            .key(k.hist(id))
            .key(&k.due)
            .key(&k.lease)
            .key(&k.retry)
            .key(&k.dead)
            .key(&k.events)
            .key(&k.tp)
            .key(&k.tpmin)
            .arg(id)
            .arg(token)
            .arg(clamp_ms(delay_ms))
            .arg(if partial.is_some() { "1" } else { "0" })
            .arg(partial.unwrap_or(""))
            .arg(clamp_ms(latency_ms));
        let (tag, rest) = status(self.run(&inv).await?)?;
        match (tag.as_str(), rest.first()) {
            ("ok", Some(d)) => int(d),
            ("dead", _) => Ok(0),
            (t, _) => Err(stale_or(t, "reschedule")),
        }
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
        let k = self.keys();
        let (mode, delay) = match retry {
            Retry::After(d) => ("after", clamp_ms(d)),
            Retry::Dead => ("dead", 0),
        };
        let mut inv = self.invocation(&SCRIPTS.fail);
        inv.key(k.task(id))
            .key(k.hist(id))
            .key(&k.due)
            .key(&k.lease)
            .key(&k.retry)
            .key(&k.dead)
            .key(&k.events)
            .key(&k.tp)
            .key(&k.tpmin)
            .arg(id)
            .arg(token)
            .arg(error)
            .arg(mode)
            .arg(delay)
            .arg(clamp_ms(latency_ms));
        let (tag, rest) = status(self.run(&inv).await?)?;
        match (tag.as_str(), rest.as_slice()) {
            ("retry", [due, attempts, ..]) => Ok(Failed::Retrying {
                due_at: int(due)?,
                attempts: u32::try_from(int(attempts)?)
                    .map_err(|_| corrupt("fail: attempts out of range"))?,
            }),
            ("dead", [reason, ..]) => Ok(Failed::Dead {
                reason: string(reason)?,
            }),
            (t, _) => Err(stale_or(t, "fail")),
        }
    }

    /// Ends a lease now; the task is due now. With `Some(token)` only that lease (else
    /// StaleToken); with `None` (admin) whatever lease is live. Ok(false): nothing leased.
    pub async fn release(&self, id: &str, token: Option<u64>, who: &str) -> Result<bool> {
        let k = self.keys();
        let mut inv = self.invocation(&SCRIPTS.release);
        inv.key(k.task(id))
            .key(k.hist(id))
            .key(&k.due)
            .key(&k.lease)
            .key(&k.retry)
            .key(&k.events)
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

    /// Returns up to `max_n` expired leases to due now (or dead as "poison" after
    /// max_lease_losses). Also trims old throughput buckets and stale result-index entries,
    /// so call it periodically (e.g. every second) even when nothing expires.
    pub async fn reap(&self, max_n: usize) -> Result<Reaped> {
        let k = self.keys();
        let mut peek = self.invocation(&SCRIPTS.peek_expired);
        peek.key(&k.lease).arg(max_n.clamp(1, MAX_BATCH));
        let flat = array(self.run(&peek).await?)?;
        if flat.len() % 2 != 0 {
            return Err(corrupt("peek_expired: odd reply"));
        }
        let cfg = self.config();
        let mut inv = self.invocation(&SCRIPTS.reap);
        inv.key(&k.due)
            .key(&k.lease)
            .key(&k.retry)
            .key(&k.dead)
            .key(&k.events)
            .key(&k.tp)
            .key(&k.tpmin)
            .key(&k.results)
            .arg(cfg.max_lease_losses)
            .arg(THROUGHPUT_RETENTION_MS)
            .arg(clamp_ms(cfg.result_ttl_ms));
        for pair in flat.chunks(2) {
            let id = string(&pair[0])?;
            let seen = string(&pair[1])?;
            inv.key(k.task(&id)).key(k.hist(&id)).arg(id).arg(seen);
        }
        let mut parts = array(self.run(&inv).await?)?.into_iter();
        let mut ids = || -> Result<Vec<String>> {
            array(parts.next().unwrap_or(Value::Nil))?
                .iter()
                .map(string)
                .collect()
        };
        let requeued = ids()?;
        let dead = ids()?;
        Ok(Reaped { requeued, dead })
    }

    /// Earliest due time (ms) of any due task, so an idle worker knows how long to sleep.
    pub async fn next_due_ms(&self) -> Result<Option<i64>> {
        let mut c = self.conn.clone();
        let v: Value = redis::cmd("ZRANGE")
            .arg(&self.keys().due)
            .arg(0)
            .arg(0)
            .arg("WITHSCORES")
            .query_async(&mut c)
            .await?;
        let a = array(v)?;
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
            .arg(w.processed)
            .arg(w.failed)
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
        id: string(id)?,
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
