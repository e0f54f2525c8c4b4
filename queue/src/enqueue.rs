//! Producer operations: [`Queue::enqueue`] and [`Queue::enqueue_many`]. What a web process (or
//! any producer) calls; one atomic script per query creates the task, joins the live one, or
//! answers with the fresh stored result.

use crate::answer_counts::FLUSH_EVERY;
use crate::decode::{self, opt_string, status, string};
use crate::error::{corrupt, QueueError, Result};
use crate::library::Invocation;
use crate::model::{EnqueuePolicy, Enqueued, Priority, Task};
use crate::normalise_query;
use crate::queue::{clamp_ms, Queue};
use crate::scripts::SCRIPTS;
use crate::slot::Slot;
use crate::trace_context;
use crate::worker_ops::MAX_BATCH;
use redis::Value;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use tracing::{Instrument, Span};

/// An enqueue script's reply: created, joined (with partial data and due time) or stored; or
/// refused because `q`'s layout is not the queue's any more ([`Queue::moved`]).
fn decode_enqueued(q: &Queue, id: &str, reply: Value) -> Result<Enqueued> {
    decode_with_hold(q, id, reply).map(|(e, _)| e)
}

/// [`decode_enqueued`] and, for a fresh hit, how long it may be held (the script's `hold_ms`;
/// 0 otherwise).
fn decode_with_hold(q: &Queue, id: &str, reply: Value) -> Result<(Enqueued, u64)> {
    let (tag, rest) = status(reply)?;
    if tag == "none" {
        return Ok((Enqueued::NotCached, 0));
    }
    let mut rest = rest.into_iter();
    let body = rest
        .next()
        .ok_or_else(|| corrupt("enqueue: missing record"))?;
    if tag == "moved" {
        let now = decode::parse_i64(&string(&body)?)?;
        return Err(q.moved(u16::try_from(now).unwrap_or(u16::MAX)));
    }
    if tag == "stored" || tag == "stale" {
        let result = decode::packed_result(id, &string(&body)?)?.result;
        if tag == "stored" {
            let hold = rest.next().map(|v| decode::int(&v)).transpose()?;
            let hold = hold.and_then(|ms| u64::try_from(ms).ok()).unwrap_or(0);
            return Ok((Enqueued::Stored(result), hold));
        }
        let refresh = match rest.next() {
            Some(v @ Value::Array(_)) => Some(task_of(id, v, &mut rest)?),
            _ => {
                rest.nth(1); // its partial data and due score: none
                None
            }
        };
        let created = rest.next().map(|v| decode::int(&v)).transpose()? == Some(1);
        return Ok((
            Enqueued::Stale {
                result,
                refresh,
                created,
            },
            0,
        ));
    }
    let task = task_of(id, body, &mut rest)?;
    let out = match tag.as_str() {
        "created" => Enqueued::Created(task),
        "joined" => Enqueued::Joined(task),
        "negative" => Enqueued::Negative(task),
        other => return Err(corrupt(format!("enqueue: unexpected reply {other:?}"))),
    };
    Ok((out, 0))
}

/// A task from an enqueue reply: its fields, then its partial data and due score when the
/// reply carries them (`false` = none).
fn task_of(id: &str, fields: Value, rest: &mut impl Iterator<Item = Value>) -> Result<Task> {
    let f = decode::fields(fields)?;
    let partial = rest.next().map(|v| opt_string(&v)).transpose()?.flatten();
    let score = rest
        .next()
        .map(|v| opt_string(&v))
        .transpose()?
        .flatten()
        .map(|s| decode::parse_i64(&s))
        .transpose()?;
    decode::task(id, &f, partial, score)
}

/// What an enqueue answered, as the `create` span's `repoll.outcome`.
fn outcome_name(out: &Result<Enqueued>) -> &'static str {
    match out {
        Ok(Enqueued::Created(_)) => "created",
        Ok(Enqueued::Joined(_)) => "joined",
        Ok(Enqueued::Stored(_)) => "stored",
        Ok(Enqueued::Stale { created: true, .. }) => "stale, refresh created",
        Ok(Enqueued::Stale { .. }) => "stale",
        Ok(Enqueued::Negative(_)) => "negative",
        Ok(Enqueued::NotCached) => "not cached",
        Err(_) => "error",
    }
}

/// A tenant is empty (nobody in particular) or a valid name ([`crate::is_valid_tenant`]).
fn check_tenant(tenant: &str) -> Result<()> {
    if tenant.is_empty() || crate::is_valid_tenant(tenant) {
        Ok(())
    } else {
        Err(QueueError::InvalidQuery(format!(
            "tenant: 1 to {} of letters, digits and ._:@-",
            crate::MAX_TENANT_LEN
        )))
    }
}

impl Queue {
    /// Creates the task for `query` (due now), or joins the live one, or returns the fresh
    /// stored result — atomically, so concurrent callers for one query create one task.
    /// A dead task is replaced by a fresh one: asking again is an explicit new try.
    ///
    /// [`QueueError::LayoutChanged`] (nothing written) when the queue was repartitioned while
    /// this handle ran: the task would go where the queue no longer looks.
    pub async fn enqueue(
        &self,
        query: &str,
        payload: &str,
        policy: &EnqueuePolicy,
    ) -> Result<Enqueued> {
        check_tenant(&policy.tenant)?;
        let q = normalise_query(query)?;
        let id = self.task_id(&q);
        // A hot result held in memory: no script, no span (it makes and joins no task).
        if let Some(result) = self.held_answer(&id, policy) {
            let out = Enqueued::Stored(result);
            self.count_answer(&id, &out);
            return Ok(out);
        }
        let hot = self.inner.hot.get();
        let generation = hot.map(|h| h.generation());
        let sent = std::time::Instant::now();
        let at = self.slot_of(&id);
        let span = self.create_span(Some(&id), policy, 1);
        let trace = span.in_scope(trace_context::current);
        let inv = at.enqueue_invocation(&id, &q, payload, policy, &trace);
        let out = at.run(&inv).instrument(span.clone()).await;
        let out = out.and_then(|reply| decode_with_hold(self, &id, reply));
        if let (Some(hot), Some(seen), Ok((Enqueued::Stored(result), hold))) =
            (hot, generation, &out)
        {
            if crate::hold::takes_any_fresh(self, policy) {
                hot.hold(result, *hold, sent, seen);
            }
        }
        let out = out.map(|(e, _)| e);
        if let Ok(answer) = &out {
            self.count_answer(&id, answer);
        }
        span.record("repoll.outcome", outcome_name(&out));
        out
    }

    /// Counts `answer` for `id`'s partition (`answer_counts`), starting the handle's flushing
    /// task on the first count (inside the runtime the enqueue runs on).
    fn count_answer(&self, id: &str, answer: &Enqueued) {
        let counts = &self.inner.counts;
        counts.add(self.partition_of(id), crate::answer_counts::kind_of(answer));
        // A load first: after the first answer this is a read of a shared line, not a write.
        if !counts.flusher.load(Ordering::Acquire) && !counts.flusher.swap(true, Ordering::AcqRel) {
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(flush_every_second(
                    Arc::downgrade(&self.inner),
                    self.conn.clone(),
                ));
            }
        }
    }

    /// Writes the answers counted so far to each partition's per-minute counters
    /// (`count_answers.lua`) now, rather than at the next second's flush: at shutdown, or
    /// before reading the counts back. What cannot be written is kept for the next flush.
    pub async fn flush_answer_counts(&self) -> Result<()> {
        let mut first_error = None;
        for (p, slot) in self.inner.slots.iter().enumerate() {
            let n = self.inner.counts.take(p);
            if n.iter().all(|&c| c == 0) {
                continue;
            }
            let mut inv = slot.invocation(&SCRIPTS.count_answers);
            for c in n {
                inv.arg(c);
            }
            if let Err(e) = slot.run(&inv).await {
                self.inner.counts.give_back(p, n);
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// The `create <queue>` span (PRODUCER, OpenTelemetry messaging conventions) of an
    /// enqueue: its context is the one the task keeps (`tc`) or, for a join, one more link
    /// (`tl`). A disabled span, costing nothing, while tracing is off.
    fn create_span(&self, id: Option<&str>, policy: &EnqueuePolicy, count: usize) -> Span {
        if !trace_context::enabled() {
            return Span::none();
        }
        let name = &self.config().name;
        let span = tracing::info_span!(
            "create",
            otel.name = %format_args!("create {name}"),
            otel.kind = "producer",
            messaging.system = "repoll",
            messaging.operation.type = "create",
            messaging.operation.name = "enqueue",
            messaging.destination.name = name.as_str(),
            messaging.message.id = tracing::field::Empty,
            messaging.destination.partition.id = tracing::field::Empty,
            messaging.batch.message_count = tracing::field::Empty,
            repoll.tenant = policy.tenant.as_str(),
            repoll.outcome = tracing::field::Empty,
        );
        match id {
            Some(id) => {
                span.record("messaging.message.id", id);
                span.record(
                    "messaging.destination.partition.id",
                    tracing::field::display(self.partition_of(id)),
                );
            }
            None => {
                span.record("messaging.batch.message_count", count);
            }
        }
        span
    }

    /// [`Queue::enqueue`] for many queries in one round trip: a pipeline of enqueue script
    /// calls (each one atomic on its own, exactly as a single enqueue), at most [`MAX_BATCH`]
    /// a pipeline. One answer per item, in order; an invalid query is its own error and is
    /// not sent. The same query twice in one batch is created once and then joined.
    pub async fn enqueue_many(
        &self,
        items: &[(&str, &str)],
        policy: &EnqueuePolicy,
    ) -> Result<Vec<Result<Enqueued>>> {
        check_tenant(&policy.tenant)?;
        // One span for the batch: every task it makes or joins keeps its context.
        let span = self.create_span(None, policy, items.len());
        let trace = span.in_scope(trace_context::current);
        let trace = trace.as_str();
        let mut out: Vec<Option<Result<Enqueued>>> = Vec::with_capacity(items.len());
        let mut valid = Vec::with_capacity(items.len());
        for (i, (query, payload)) in items.iter().enumerate() {
            match normalise_query(query) {
                Ok(q) => {
                    valid.push((i, self.task_id(&q), q, *payload));
                    out.push(None);
                }
                Err(e) => out.push(Some(Err(e.into()))),
            }
        }
        // One pipeline per partition (a pipeline goes to one node), sent together.
        let ids: Vec<&str> = valid.iter().map(|(_, id, _, _)| id.as_str()).collect();
        let groups = self.group_by_slot(&ids);
        let answers = futures::future::try_join_all(groups.iter().map(|(p, idx)| {
            let at = &self.slots()[*p];
            let items: Vec<_> = idx.iter().map(|&j| &valid[j]).collect();
            async move {
                let mut out = Vec::with_capacity(items.len());
                for chunk in items.chunks(MAX_BATCH) {
                    // One round trip per chunk; items that find the library gone (a restart
                    // mid-batch) are resent alone after a reload, the others keep their answer.
                    let invs: Vec<_> = chunk
                        .iter()
                        .map(|(_, id, q, payload)| {
                            at.enqueue_invocation(id, q, payload, policy, trace)
                        })
                        .collect();
                    let replies = crate::library::call_many(&at.conn, &invs).await?;
                    for ((i, id, _, _), v) in chunk.iter().zip(replies) {
                        let answer = decode_enqueued(self, id, v);
                        if let Ok(a) = &answer {
                            self.count_answer(id, a);
                        }
                        out.push((*i, answer));
                    }
                }
                Ok::<_, crate::QueueError>(out)
            }
        }))
        .instrument(span)
        .await?;
        for (i, r) in answers.into_iter().flatten() {
            out[i] = Some(r);
        }
        Ok(out
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(corrupt("enqueue_many: item without an answer"))))
            .collect())
    }
}

/// Flushes a handle's answer counts every [`FLUSH_EVERY`] for as long as the handle lives.
async fn flush_every_second(inner: Weak<crate::queue::Inner>, conn: crate::RedisConn) {
    let mut every = tokio::time::interval(FLUSH_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    every.tick().await;
    loop {
        every.tick().await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let q = Queue {
            conn: conn.clone(),
            inner,
        };
        if let Err(e) = q.flush_answer_counts().await {
            tracing::debug!(error = %e, "answer counts not written yet");
        }
    }
}

impl Slot {
    /// The enqueue script call of one task of this slot (enqueue.lua).
    fn enqueue_invocation<'a>(
        &'a self,
        id: &str,
        q: &str,
        payload: &str,
        policy: &EnqueuePolicy,
        trace: &str,
    ) -> Invocation<'a> {
        let mut inv = self.invocation(&SCRIPTS.enqueue);
        inv.for_task(id)
            .arg(id)
            .arg(q)
            .arg(payload)
            .arg(clamp_ms(policy.deadline_ms))
            .arg(policy.max_attempts)
            .arg(match policy.priority {
                Priority::Interactive => "interactive",
                Priority::Background => "bg",
            })
            .arg(policy.tenant.as_str())
            .arg(self.layout());
        let cfg = self.config();
        let fresh = &cfg.freshness;
        inv.arg(clamp_ms(cfg.result_ttl_ms).max(1))
            .arg(policy.max_age_ms.map_or(-1, |ms| clamp_ms(ms) as i64))
            .arg(clamp_ms(fresh.failed_ms))
            .arg(if policy.only_if_cached { "1" } else { "0" })
            .arg(fresh.hot_asks.min(crate::model::MAX_HOT_ASKS))
            .arg(clamp_ms(cfg.refresh_ahead_lead_ms()))
            // The upstream's whole limit: the script takes this partition's turn of it.
            .arg(fresh.refresh_ahead_per_min)
            .arg(trace)
            .arg(crate::trace_context::MAX_LINKS)
            .arg(self.part());
        inv
    }
}
