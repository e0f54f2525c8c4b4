//! Upstream cancels: a job API's job whose task an operator cancelled or purged is cancelled
//! upstream by whichever worker takes it from the queue (`Queue::take_upstream_cancels`), off
//! the operator's path. A cancel the upstream refuses for the moment (down, 5xx, 429) is
//! retried with backoff; a 2xx, 404, 409 or 410 ends it (cancelled, or nothing left to
//! cancel: cancels are best-effort everywhere). Each outcome goes to the task's history.

use std::sync::Arc;
use std::time::Duration;

use queue::{CancelOutcome, UpstreamCancel};
use rand::Rng;

use crate::ctx::Ctx;
use crate::upstream::UpstreamError;

/// Cancels taken per tick, at most.
const TAKE: usize = 16;

/// Tries before a cancel is given up (recorded in the task's history).
pub(crate) const MAX_TRIES: u32 = 10;

/// Every `every_ms` ± 20%, takes the due cancels and sends each on a task of its own.
pub(crate) async fn upstream_cancels(ctx: Arc<Ctx>, every_ms: u64) {
    loop {
        let spread: f64 = rand::thread_rng().gen_range(0.8..1.2);
        tokio::time::sleep(Duration::from_millis(every_ms.max(10)).mul_f64(spread)).await;
        let taken = match ctx.queue.take_upstream_cancels(TAKE, ctx.lease_ms).await {
            Ok(taken) => taken,
            Err(e) => {
                tracing::warn!(error = %e, "taking upstream cancels failed");
                continue;
            }
        };
        for c in taken {
            let ctx = ctx.clone();
            tokio::spawn(async move { cancel_one(&ctx, c).await });
        }
    }
}

/// Backoff before try `tries + 1`: 1 s doubling, at most a minute.
fn backoff_ms(tries: u32) -> u64 {
    (1000u64 << tries.min(6)).min(60_000)
}

async fn cancel_one(ctx: &Ctx, c: UpstreamCancel) {
    crate::task::rate_permit(ctx).await;
    let tries = c.tries + 1;
    let (outcome, what) = match ctx.upstream.cancel_job(&c.job).await {
        Ok(Some(code)) => (
            CancelOutcome::Done,
            format!("cancelled upstream (HTTP {code})"),
        ),
        Ok(None) => (
            CancelOutcome::Done,
            "not cancelled upstream: no REPOLL_UPSTREAM_CANCEL_URL (the job runs on)".to_string(),
        ),
        Err(UpstreamError::Status { code, .. }) if matches!(code, 404 | 409 | 410) => (
            CancelOutcome::Done,
            format!("nothing left to cancel upstream (HTTP {code})"),
        ),
        Err(e) if e.is_permanent() || tries >= MAX_TRIES => (
            CancelOutcome::Done,
            format!("upstream cancel given up after {tries} tries: {e}"),
        ),
        Err(e) => (
            CancelOutcome::RetryAfter(backoff_ms(c.tries)),
            format!("upstream cancel failed (try {tries}), retried: {e}"),
        ),
    };
    tracing::debug!(id = %c.id, %what, "upstream cancel");
    if let Err(e) = ctx.queue.settle_upstream_cancel(&c, outcome, &what).await {
        // Left leased: it is due again after the lease and tried once more.
        tracing::warn!(id = %c.id, error = %e, "settling an upstream cancel failed");
    }
}
