//! The web process in its queues' process registries (`queue::registry`): `repoll serve`
//! accepts queries even with no worker of its own (`--workers 0`), so it registers in every
//! queue it serves (the default upstream's and each named one's) and heartbeats there, and
//! `repoll admin repartition` refuses while it runs, naming it. The same period and time to
//! live as a worker's entry (`REPOLL_HEARTBEAT_MS`, `queue::REGISTRY_TTL_PERIODS` periods): a
//! killed process drops out by itself. Registered before the listener opens, removed after the
//! HTTP drain on a clean stop.
//!
//! Each heartbeat also tells the queue handles whether the queue was repartitioned under this
//! process (`queue::Queue::layout_changed`): its API and pages then answer 503 and `/readyz`
//! says why, so an orchestrator restarts it.

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// This process's entries while it serves; [`WebRegistration::stop`] removes them.
pub struct WebRegistration {
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl WebRegistration {
    /// Registers this process in each of `queues` now (the first error if Redis refuses),
    /// then heartbeats every `every_ms` in the background until [`WebRegistration::stop`] (or
    /// until dropped).
    pub async fn start(
        queues: Vec<queue::Queue>,
        every_ms: u64,
    ) -> Result<WebRegistration, queue::QueueError> {
        let every = Duration::from_millis(every_ms.max(100));
        let ttl_ms = queue::registry_ttl_ms(u64::try_from(every.as_millis()).unwrap_or(u64::MAX));
        let me = queue::WebProcess {
            id: worker::default_worker_id(),
            host: worker::host_name(),
            pid: std::process::id(),
            started_ms: queue::local_ms(),
            last_seen_ms: 0,
        };
        for q in &queues {
            q.heartbeat_web(&me, ttl_ms).await?;
            observe(q, true).await;
        }
        tracing::info!(process = %me.id, "registered as a web process");
        let stop = CancellationToken::new();
        let task = tokio::spawn(heartbeats(queues, me, every, ttl_ms, stop.clone()));
        Ok(WebRegistration {
            stop,
            task: Some(task),
        })
    }

    /// Stops heartbeating and removes the entries at once (a clean stop: a repartition may
    /// run right after).
    pub async fn stop(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for WebRegistration {
    /// A start that fails after registering: the entries go as on a clean stop.
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// What a heartbeat tells the alerts (deploy/prometheus/rules.yml): whether Redis took it
/// (`repoll_redis_up`), and how many workers of the queue have a live entry
/// (`repoll_workers`, read only after a heartbeat Redis took; this process outlives the
/// workers, whose own series vanish with them).
async fn observe(q: &queue::Queue, reached: bool) {
    let upstream = worker::telemetry::upstream_label(q.config());
    worker::telemetry::heartbeat_reached_redis(&upstream, reached);
    if !reached {
        return;
    }
    match q.workers().await {
        Ok(workers) => {
            metrics::gauge!(worker::telemetry::WORKERS, "upstream" => upstream)
                .set(workers.len() as f64);
        }
        Err(e) => tracing::debug!(error = %e, "workers for gauges failed"),
    }
}

/// Heartbeats into each queue's registry every `every` (logging, never ending on, Redis
/// errors) until `stop`; then removes the entries.
async fn heartbeats(
    queues: Vec<queue::Queue>,
    me: queue::WebProcess,
    every: Duration,
    ttl_ms: u64,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval(every);
    // The first tick is now: `start` has just registered.
    tick.tick().await;
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            _ = tick.tick() => {
                for q in &queues {
                    let beat = q.heartbeat_web(&me, ttl_ms).await;
                    if let Err(e) = &beat {
                        tracing::warn!(error = %e, queue = %q.config().name, "web process heartbeat failed");
                    }
                    observe(q, beat.is_ok()).await;
                }
            }
        }
    }
    for q in &queues {
        if let Err(e) = q.remove_web_process(&me.id).await {
            tracing::warn!(error = %e, queue = %q.config().name, "could not leave the process registry");
        }
    }
}
