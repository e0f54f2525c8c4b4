//! Periodic housekeeping beside the claim loop: heartbeat, reaper, queue-depth gauges.
//! Each loop is cheap and bounded, and logs (never propagates) Redis errors.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;

use crate::ctx::Ctx;
use crate::telemetry;

/// Reaps per tick at most this many batches, so one worker never hogs Redis.
const REAP_BATCHES_PER_TICK: usize = 10;

/// Writes this worker's entry into the registry every `every_ms` (first at once), and at once
/// when its mode changes (quiet, stopping); it lives `queue::REGISTRY_TTL_PERIODS` periods,
/// so a dead worker disappears by itself. Each heartbeat also tells the queue handle whether
/// the queue was repartitioned under this process (its claims then refuse:
/// `Queue::layout_changed`), and answers an admin's command left for this worker, which the
/// process's switch then acts on ([`crate::control`]).
pub(crate) async fn heartbeat(ctx: Arc<Ctx>, started_ms: i64, every_ms: u64) {
    let every = Duration::from_millis(every_ms.max(100));
    let ttl_ms = queue::registry_ttl_ms(u64::try_from(every.as_millis()).unwrap_or(u64::MAX));
    let host = crate::ctx::host_name();
    let mut tick = tokio::time::interval(every);
    let mut modes = ctx.control.subscribe();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            Ok(()) = modes.changed() => {}
        }
        let c = &ctx.counters;
        let info = queue::WorkerInfo {
            id: ctx.id.clone(),
            host: host.clone(),
            pid: std::process::id(),
            started_ms,
            in_flight: u32::try_from(ctx.in_flight()).unwrap_or(u32::MAX),
            completed: c.completed.load(Ordering::Relaxed),
            dead: c.dead.load(Ordering::Relaxed),
            last_seen_ms: ctx.now_ms(),
            rss_bytes: crate::control::resident_bytes(),
            mode: ctx.mode(),
            command: None,
        };
        let beat = ctx.queue.heartbeat(&info, ttl_ms).await;
        telemetry::heartbeat_reached_redis(&ctx.label, beat.is_ok());
        match beat {
            Ok(Some(command)) => ctx.control.apply(command),
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "heartbeat failed"),
        }
    }
}

/// Requeues expired leases (any worker's) every `every_ms` ± 20%, so they come back even when
/// only one worker is alive; the jitter keeps many workers from reaping in lockstep.
pub(crate) async fn reaper(
    ctx: Arc<Ctx>,
    wake: Arc<crate::wake::Wake>,
    every_ms: u64,
    batch: usize,
) {
    let batch = batch.max(1);
    loop {
        let spread: f64 = rand::thread_rng().gen_range(0.8..1.2);
        tokio::time::sleep(Duration::from_millis(every_ms.max(10)).mul_f64(spread)).await;
        for _ in 0..REAP_BATCHES_PER_TICK {
            match ctx.queue.reap(batch).await {
                Ok(r) => {
                    let n = r.requeued.len() + r.dead.len();
                    if n > 0 {
                        metrics::counter!(telemetry::LEASE_EXPIRATIONS, "upstream" => ctx.label.clone())
                            .increment(n as u64);
                        tracing::info!(
                            requeued = r.requeued.len(),
                            dead = r.dead.len(),
                            "reaped expired leases"
                        );
                    }
                    if !r.requeued.is_empty() {
                        wake.nudge();
                    }
                    crate::trace_spans::reaped(&ctx.queue, &ctx.label, &r).await;
                    if n < batch {
                        break;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "reap failed");
                    break;
                }
            }
        }
    }
}

/// Refreshes the queue depth gauges every `every_ms`.
pub(crate) async fn queue_depth(ctx: Arc<Ctx>, every_ms: u64) {
    let mut tick = tokio::time::interval(Duration::from_millis(every_ms.max(100)));
    loop {
        tick.tick().await;
        match ctx.queue.stats().await {
            Ok(s) => {
                for (state, n) in [
                    ("ready", s.ready),
                    ("waiting", s.waiting),
                    ("retrying", s.retrying),
                    ("leased", s.leased),
                    ("stuck", s.stuck),
                    ("dead", s.dead),
                    ("results", s.results),
                ] {
                    metrics::gauge!(telemetry::QUEUE_DEPTH, "state" => state, "upstream" => ctx.label.clone())
                        .set(n as f64);
                }
            }
            Err(e) => tracing::debug!(error = %e, "stats for gauges failed"),
        }
        match ctx.queue.breaker().await {
            Ok(b) => metrics::gauge!(telemetry::BREAKER_OPEN, "upstream" => ctx.label.clone())
                .set(if b.is_some() { 1.0 } else { 0.0 }),
            Err(e) => tracing::debug!(error = %e, "breaker for gauges failed"),
        }
    }
}
