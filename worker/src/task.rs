//! One claimed task from call to write: poll the upstream (renewing the lease of a long call),
//! apply the policies, and write the outcome with the claim's fencing token.
//!
//! A `StaleToken` answer means another worker owns the task now (our lease expired and it was
//! re-claimed): the outcome is dropped, never retried — the owner will write its own.
//!
//! The write that ends a task also asks the queue for this slot's next task (the
//! `*_and_claim` calls), so a busy slot goes from task to task with one Redis call each and
//! the claim loop only fills slots that ran dry. Not while the worker is stopping.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use backon::{BackoffBuilder, ExponentialBuilder};
use queue::{Claimed, QueueError, Retry};
use rand::Rng;
use tokio::sync::OwnedSemaphorePermit;

use crate::ctx::Ctx;
use crate::policy::Next;
use crate::telemetry;
use crate::trace_spans;
use crate::upstream::{Answer, UpstreamError};
use tracing::Instrument;

/// Attempts of a queue write that failed on Redis itself (not on the token).
const WRITE_TRIES: u32 = 3;

/// Keeps the in-flight gauge right even when the task is aborted mid-call.
struct InFlightGauge(metrics::Gauge);

impl InFlightGauge {
    fn new(label: &str) -> InFlightGauge {
        let g = metrics::gauge!(telemetry::IN_FLIGHT, "upstream" => label.to_string());
        g.increment(1.0);
        InFlightGauge(g)
    }
}

impl Drop for InFlightGauge {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}

/// Runs one claimed task to its written outcome, then the next ones the queue hands this slot
/// with each write, holding the permit until the slot runs dry. A task leaves the worker's
/// lease registry only when it finished: an aborted one stays there so shutdown can release
/// its lease.
pub(crate) async fn run(ctx: Arc<Ctx>, c: Claimed, permit: OwnedSemaphorePermit) {
    let _gauge = InFlightGauge::new(&ctx.label);
    let mut current = c;
    loop {
        let span = trace_spans::process_span(&ctx.queue.config().name, &ctx.label, &current);
        let next = process(&ctx, &current).instrument(span).await;
        ctx.forget(&current.id);
        let mut next = next.into_iter();
        let Some(n) = next.next() else { break };
        // Asked for one; more would have no slot (cannot happen): give them back.
        for extra in next {
            let _ = ctx
                .queue
                .release(&extra.id, Some(extra.token), &ctx.id)
                .await;
        }
        ctx.hold(&n.id, n.token);
        metrics::counter!(telemetry::CLAIMS, "upstream" => ctx.label.clone()).increment(1);
        ctx.counters.claimed.fetch_add(1, Ordering::Relaxed);
        current = n;
    }
    drop(permit);
}

/// How many next tasks a finishing write asks for: one, unless the worker is stopping or quiet.
fn want_next(ctx: &Ctx) -> usize {
    usize::from(ctx.claims_more())
}

/// A uniform random number in [0, 1): the jitter of backoffs and poll intervals.
fn random_fraction() -> f64 {
    rand::thread_rng().gen()
}

/// One task: the call, then the write; returns the next tasks the write was handed.
async fn process(ctx: &Ctx, c: &Claimed) -> Vec<Claimed> {
    // No deadline check before the call: a task claimed just past its deadline gets one last
    // look (a late result is still a result); if it is still processing, the queue ends it.
    let started = Instant::now();
    let Some(result) = call_with_renewal(ctx, c).await else {
        return Vec::new();
    };
    let latency = started.elapsed();
    let latency_ms = u64::try_from(latency.as_millis()).unwrap_or(u64::MAX);
    record_outcome(ctx, &result, latency);

    let now = ctx.now_ms();
    match result {
        Ok(Answer::Done { data }) => complete(ctx, c, data.to_string(), latency_ms).await,
        Ok(Answer::Processing { data, retry_after }) => {
            still_processing(ctx, c, now, retry_after, &data, latency_ms, None).await
        }
        // The job is stored with the reschedule, under this lease's token: its first poll
        // comes after the poll interval (or the upstream's Retry-After), as a poll's would.
        Ok(Answer::Submitted { job, retry_after }) => {
            let data = serde_json::Value::Null;
            still_processing(ctx, c, now, retry_after, &data, latency_ms, Some(job)).await
        }
        Ok(Answer::Failed { message, .. }) => {
            // Marked as the upstream's own verdict: the public may read its message
            // (model::failure), never an error of the call itself.
            let why = model::failure::upstream_failed(&message);
            fail(ctx, c, &why, "failed", Retry::Dead, &call(latency_ms, None)).await
        }
        Err(e) => {
            tracing::debug!(id = %c.id, error = %e, "upstream call failed");
            let next = ctx.policy.after_error(
                c.attempts,
                c.max_attempts,
                &e,
                now,
                c.deadline_ms,
                random_fraction(),
            );
            // Only a permanent error is sent as Retry::Dead (reason "fatal"). Otherwise the
            // queue's fail script counts the attempt and itself ends the task as
            // "max_attempts" or "deadline" — the same verdict as the policy, named by the
            // queue, decided atomically with the write.
            let retry = match next {
                Next::Dead(_) if e.is_permanent() => Retry::Dead,
                Next::Dead(_) => Retry::After(0),
                Next::Again(d) => Retry::After(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            };
            let shown = ctx.upstream.shown_task_call(&c.query, c.job.as_deref());
            let reason = stored_error(shown.as_deref(), &e);
            fail(
                ctx,
                c,
                &reason,
                e.kind(),
                retry,
                &call(latency_ms, Some(&e)),
            )
            .await
        }
    }
}

/// The span's outcome and the upstream latency histogram of one call.
fn record_outcome(ctx: &Ctx, result: &Result<Answer, UpstreamError>, latency: Duration) {
    let outcome = match result {
        Ok(Answer::Processing { .. }) => "processing",
        Ok(Answer::Submitted { .. }) => "submitted",
        Ok(Answer::Done { .. }) => "done",
        Ok(Answer::Failed { .. }) => "failed",
        Err(_) => "error",
    };
    let span = tracing::Span::current();
    span.record("repoll.outcome", outcome);
    if outcome == "error" || outcome == "failed" {
        trace_spans::mark_error(&span);
    }
    metrics::histogram!(telemetry::UPSTREAM_LATENCY, "outcome" => outcome, "upstream" => ctx.label.clone())
        .record(latency.as_secs_f64());
}

/// Not done yet (a poll's "processing", or a submit's new `job`): polled again after the
/// policy's delay, or dead when the policy says there is no next poll (max polls, deadline).
async fn still_processing(
    ctx: &Ctx,
    c: &Claimed,
    now: i64,
    retry_after: Option<Duration>,
    data: &serde_json::Value,
    latency_ms: u64,
    job: Option<String>,
) -> Vec<Claimed> {
    let jitter = random_fraction();
    match ctx
        .policy
        .after_processing(c.polls, now, c.deadline_ms, retry_after, jitter)
    {
        Next::Again(delay) => reschedule(ctx, c, delay, data, latency_ms, job).await,
        Next::Dead(reason) => {
            let call = call(latency_ms, None);
            fail(ctx, c, &reason, "max_polls", Retry::Dead, &call).await
        }
    }
}

/// A final answer: stored (with the next tasks claimed in the same call), unless it is larger
/// than the upstream's result limit, which ends the task dead instead.
async fn complete(ctx: &Ctx, c: &Claimed, result: String, latency_ms: u64) -> Vec<Claimed> {
    let max = ctx.upstream.max_result();
    if result.len() > max {
        // Kept, it would cost Redis its size for the result TTL and every reader its
        // size per read: the task ends dead with the sizes instead (the history says
        // which answer it was).
        let why = model::failure::result_too_large(result.len(), max);
        return fail(
            ctx,
            c,
            &why,
            "too_large",
            Retry::Dead,
            &call(latency_ms, None),
        )
        .await;
    }
    let item = [queue::Completion {
        id: c.id.clone(),
        token: c.token,
        result,
        latency_ms,
    }];
    let item = &item;
    let (r, next) = write(ctx, c, "complete", |n| async move {
        let (mut flags, next) = ctx
            .queue
            .complete_and_claim(item, &ctx.id, n, ctx.lease_ms)
            .await?;
        Ok((flags.pop().unwrap_or(Err(QueueError::StaleToken)), next))
    })
    .await;
    if r.is_some() {
        metrics::counter!(telemetry::COMPLETIONS, "upstream" => ctx.label.clone()).increment(1);
        telemetry::record_final(&ctx.label, "done", c.created_ms, ctx.now_ms());
        telemetry::count_refresh(&ctx.label, c.refresh, "done");
        ctx.counters.completed.fetch_add(1, Ordering::Relaxed);
    }
    next
}

/// The call behind a task's error, as the task keeps it beside the message: its duration,
/// and for an HTTP error answer its status and the start of its body.
fn call(latency_ms: u64, e: Option<&UpstreamError>) -> queue::FailedCall {
    match e {
        Some(UpstreamError::Status { code, body, .. }) => queue::FailedCall {
            http_status: Some(*code),
            took_ms: latency_ms,
            body: body.clone(),
        },
        _ => queue::FailedCall {
            took_ms: latency_ms,
            ..queue::FailedCall::default()
        },
    }
}

/// A call's error as the task stores it: with the call, so the task's attempts say which URL
/// failed (the dashboard shows it; `model::failure::public_reason` never does).
fn stored_error(call: Option<&str>, e: &UpstreamError) -> String {
    match call {
        Some(call) => format!("{call}: {e}"),
        None => e.to_string(),
    }
}

/// "Still processing": store the partial data (and a job API's new `job`) and come back after
/// `delay`. A due time past the whole-life deadline makes the queue end the task as
/// "deadline" (returned as 0).
async fn reschedule(
    ctx: &Ctx,
    c: &Claimed,
    delay: Duration,
    data: &serde_json::Value,
    latency_ms: u64,
    job: Option<String>,
) -> Vec<Claimed> {
    let mut partial = (!data.is_null()).then(|| data.to_string());
    if let Some(p) = partial.take_if(|p| p.len() > ctx.upstream.max_result()) {
        // A preview is not worth a dead task: this one is not stored (the last one that fit
        // stays shown) and polling goes on; the final answer gets the same limit.
        tracing::warn!(id = %c.id, bytes = p.len(), max = ctx.upstream.max_result(),
            "partial data larger than the largest result stored (REPOLL_UPSTREAM_MAX_RESULT): not stored");
    }
    // A job API's webhooks find their task through the queue's job index, written once the job
    // is stored: a webhook that comes before (or after a crash between the two) finds no task
    // and changes nothing, and the polls go on as the safety net.
    let index = job
        .clone()
        .zip(ctx.upstream.webhooks().map(|w| w.index_life_ms));
    let item = [queue::Reschedule {
        id: c.id.clone(),
        token: c.token,
        delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
        partial,
        latency_ms,
        job,
    }];
    let item = &item;
    let (r, next) = write(ctx, c, "reschedule", |n| async move {
        let (mut r, next) = ctx
            .queue
            .reschedule_and_claim(item, &ctx.id, n, ctx.lease_ms)
            .await?;
        Ok((r.pop().unwrap_or(Err(QueueError::StaleToken)), next))
    })
    .await;
    match r {
        Some(0) => {
            metrics::counter!(telemetry::FAILURES, "kind" => "deadline", "outcome" => "dead", "upstream" => ctx.label.clone())
                .increment(1);
            telemetry::count_refresh(&ctx.label, c.refresh, "failed");
            telemetry::record_final(&ctx.label, "dead", c.created_ms, ctx.now_ms());
            ctx.counters.dead.fetch_add(1, Ordering::Relaxed);
        }
        Some(_) => {
            metrics::counter!(telemetry::POLLS, "upstream" => ctx.label.clone()).increment(1);
            ctx.counters.rescheduled.fetch_add(1, Ordering::Relaxed);
            if let Some((job, life_ms)) = index {
                if let Err(e) = ctx
                    .queue
                    .index_job(&job, &c.id, c.created_ms, life_ms)
                    .await
                {
                    tracing::warn!(id = %c.id, error = %e, "the job index could not be written: this job's webhooks will find no task (polls go on)");
                }
            }
        }
        None => {}
    }
    next
}

/// The upstream call, renewing the lease every lease/3 while it runs. `None` if the lease was
/// lost meanwhile (the call is dropped: its answer could not be written anyway).
async fn call_with_renewal(ctx: &Ctx, c: &Claimed) -> Option<Result<Answer, UpstreamError>> {
    // Waiting for the rate limit happens inside the renewed section: a long wait keeps the
    // lease alive like a long call does.
    // One callback URL per life of the task (its creation time), expiring with its deadline.
    let callback = match &ctx.callbacks {
        Some(cb) if ctx.upstream.wants_callback() => cb.url_for(&c.id, c.created_ms, c.deadline_ms),
        _ => None,
    };
    let call = async {
        rate_permit(ctx).await;
        let up = &ctx.upstream;
        match (up.job_api(), &c.job) {
            (None, _) => up.query_with_callback(&c.query, callback.as_deref()).await,
            (Some(api), None) => {
                // One key per life of the task (its creation time): every submit of this job,
                // by whichever worker, carries it.
                let idem =
                    api.idempotency_key(&ctx.queue.config().name, c.id.as_str(), c.created_ms);
                up.submit(&c.query, callback.as_deref(), &idem).await
            }
            (Some(_), Some(job)) => up.poll_job(job).await,
        }
    };
    tokio::pin!(call);
    let every = Duration::from_millis((ctx.lease_ms / 3).max(1));
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    loop {
        tokio::select! {
            r = &mut call => return Some(r),
            _ = tick.tick() => match ctx.queue.renew(&c.id, c.token, ctx.lease_ms).await {
                Ok(_) => {
                    metrics::counter!(telemetry::LEASE_RENEWALS, "upstream" => ctx.label.clone()).increment(1);
                    ctx.counters.renewed.fetch_add(1, Ordering::Relaxed);
                }
                Err(QueueError::StaleToken) | Err(QueueError::NotFound) => {
                    stale(ctx, c, "renew");
                    return None;
                }
                // Redis trouble: keep calling; the next tick tries again before the lease ends.
                Err(e) => tracing::warn!(id = %c.id, error = %e, "lease renewal failed"),
            },
        }
    }
}

/// Waits until the queue-wide upstream rate limit (if any) admits one more call. Each
/// refusal says how long to wait; a little jitter spreads the waiters of many workers so they
/// do not all ask again in the same millisecond. If Redis cannot be asked, the call goes
/// ahead: the limit protects the upstream from floods, and without Redis nothing is flowing.
pub(crate) async fn rate_permit(ctx: &Ctx) {
    let Some(limit) = ctx.upstream.rate_limit() else {
        return;
    };
    loop {
        match ctx.queue.upstream_permit(limit.per_sec, limit.burst).await {
            Ok(0) => return,
            Ok(wait_ms) => {
                metrics::counter!(telemetry::RATE_LIMITED, "upstream" => ctx.label.clone())
                    .increment(1);
                let jitter = (wait_ms as f64 * 0.25 * random_fraction()) as u64;
                tokio::time::sleep(Duration::from_millis(wait_ms + jitter)).await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "upstream rate limit unavailable; calling anyway");
                return;
            }
        }
    }
}

async fn fail(
    ctx: &Ctx,
    c: &Claimed,
    reason: &str,
    kind: &str,
    retry: Retry,
    call: &queue::FailedCall,
) -> Vec<Claimed> {
    let (written, next) = write(ctx, c, "fail", |n| {
        ctx.queue.fail_and_claim(
            &c.id,
            c.token,
            reason,
            call,
            retry,
            &ctx.id,
            n,
            ctx.lease_ms,
        )
    })
    .await;
    if let Some(f) = written {
        let dead = matches!(f, queue::Failed::Dead { .. });
        let outcome = if dead { "dead" } else { "retry" };
        metrics::counter!(telemetry::FAILURES, "kind" => kind.to_string(), "outcome" => outcome, "upstream" => ctx.label.clone())
            .increment(1);
        if let queue::Failed::Dead { reason } = &f {
            telemetry::count_refresh(&ctx.label, c.refresh, "failed");
            telemetry::record_final(&ctx.label, "dead", c.created_ms, ctx.now_ms());
            // A span event of the process span (and a log line): where the task died.
            tracing::info!(id = %c.id, reason = %reason, kind, "dead-lettered");
        }
        let counter = if dead {
            &ctx.counters.dead
        } else {
            &ctx.counters.retried
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
    next
}

fn stale(ctx: &Ctx, c: &Claimed, op: &str) {
    metrics::counter!(telemetry::STALE_TOKENS, "upstream" => ctx.label.clone()).increment(1);
    tracing::info!(id = %c.id, token = c.token, op, "lease lost: another worker owns the task; dropping the outcome");
}

/// One queue write with the claim's token, which also asks for the slot's next tasks
/// ([`want_next`]). Redis errors are retried a few times (safe: the token fences a write that
/// already landed); `StaleToken` / `NotFound` are final, and still bring the next tasks. A
/// retry asks for none: if the failed try did claim (its reply was lost), those leases expire
/// and the reaper gives the tasks back, while asking again could hold a second set.
async fn write<T, F, Fut>(ctx: &Ctx, c: &Claimed, op: &str, f: F) -> (Option<T>, Vec<Claimed>)
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = queue::Result<(queue::Result<T>, Vec<Claimed>)>>,
{
    // 50 ms, then doubling, between tries (WRITE_TRIES in all).
    let mut pauses = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(50))
        .without_max_delay()
        .with_max_times(WRITE_TRIES as usize)
        .build();
    for attempt in 1..=WRITE_TRIES {
        let n = if attempt == 1 { want_next(ctx) } else { 0 };
        let (outcome, next) = match f(n).await {
            Ok(pair) => pair,
            Err(e) => (Err(e), Vec::new()),
        };
        match outcome {
            Ok(v) => return (Some(v), next),
            Err(QueueError::StaleToken) => {
                ctx.counters.stale.fetch_add(1, Ordering::Relaxed);
                stale(ctx, c, op);
                return (None, next);
            }
            Err(QueueError::NotFound) => {
                tracing::info!(id = %c.id, op, "task is gone (cancelled?); dropping the outcome");
                return (None, next);
            }
            Err(e) if attempt < WRITE_TRIES => {
                tracing::warn!(id = %c.id, op, error = %e, "queue write failed; retrying");
                tokio::time::sleep(pauses.next().unwrap_or(Duration::from_millis(50))).await;
            }
            Err(e) => {
                tracing::error!(id = %c.id, op, error = %e, "queue write failed; the lease will expire and the task come back");
            }
        }
    }
    (None, Vec::new())
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::failure::public_reason;
    use queue::DeadReason;

    /// Every error of a call, stored as the worker stores it, reads for the public as its
    /// kind in words: no URL, no upstream body (the contract with `model::failure`).
    #[test]
    fn every_stored_call_error_has_public_words_without_the_call() {
        let call = Some("GET http://10.0.0.5:8080/v1/jobs/order-7");
        for (e, words) in [
            (
                UpstreamError::Status {
                    code: 503,
                    retry_after: None,
                    message: Some("db-7 is down".into()),
                    body: String::new(),
                },
                "HTTP 503 from the upstream API",
            ),
            (
                UpstreamError::Timeout { after_ms: 300 },
                "did not answer in time",
            ),
            (
                UpstreamError::Connect("tcp connect error: 10.0.0.5".into()),
                "could not be reached",
            ),
            (
                UpstreamError::BadBody("not JSON: line 1".into()),
                "could not be read",
            ),
        ] {
            let stored = stored_error(call, &e);
            let shown = public_reason(Some(DeadReason::MaxAttempts), 5, Some(&stored));
            assert!(shown.contains(words), "{stored} -> {shown}");
            for internal in ["10.0.0.5", "order-7", "db-7", "JSON"] {
                assert!(!shown.contains(internal), "{stored} -> {shown}");
            }
        }
        let bad_key = UpstreamError::BadKey("query '..' cannot be placed in the URL path".into());
        assert_eq!(
            public_reason(
                Some(DeadReason::Fatal),
                1,
                Some(&stored_error(None, &bad_key))
            ),
            "The upstream API refused this query."
        );
    }
}
