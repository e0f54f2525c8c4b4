//! Metric names and the Prometheus recorder.
//!
//! The worker records through the `metrics` facade only; whoever runs it (`repoll worker`,
//! `repoll serve`) installs the recorder once with [`install_prometheus`] and serves what the
//! handle renders (the binary's `metrics` module; a library opens no listener). Without an
//! installed recorder the macros are no-ops.

use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Tasks claimed.
pub const CLAIMS: &str = "repoll_claims_total";
/// Tasks completed (final result stored).
pub const COMPLETIONS: &str = "repoll_completions_total";
/// Calls answered "processing" and rescheduled.
pub const POLLS: &str = "repoll_polls_total";
/// Failed calls and dead tasks; labels `kind` (timeout, connect, status, bad_body, failed,
/// deadline, max_polls) and `outcome` (retry, dead).
pub const FAILURES: &str = "repoll_failures_total";
/// Leases found expired by this worker's reaper (tasks requeued or dead as poison).
pub const LEASE_EXPIRATIONS: &str = "repoll_lease_expirations_total";
/// Lease renewals of long calls.
pub const LEASE_RENEWALS: &str = "repoll_lease_renewals_total";
/// Writes refused because another worker owns the task now (fencing token moved on).
pub const STALE_TOKENS: &str = "repoll_stale_tokens_total";
/// Tasks ended by an upstream's callback, done or failed (counted by the web process that
/// took it).
pub const CALLBACKS: &str = "repoll_callbacks_total";
/// Webhooks from job API providers, by `upstream` and `outcome` (done, failed, looked,
/// not_final, unknown_job, other_job, not_live, replay; refused: forged, stale, malformed),
/// counted by the web process that took them.
pub const WEBHOOKS: &str = "repoll_webhooks_total";
/// Leases released on shutdown.
pub const RELEASES: &str = "repoll_releases_total";
/// Times a call waited for the queue-wide upstream rate limit (one per refusal).
pub const RATE_LIMITED: &str = "repoll_upstream_rate_limited_total";
/// Upstream call latency in seconds; label `outcome` (processing, done, failed, error).
pub const UPSTREAM_LATENCY: &str = "repoll_upstream_latency_seconds";
/// Calls made to an upstream, by `call` (`submit`, `poll`, `result`, `cancel`) and `outcome` (`ok`, or
/// the error's kind: `timeout`, `connect`, `status`, `bad_body`, `redirect`).
pub const UPSTREAM_CALLS: &str = "repoll_upstream_calls_total";
/// Calls in flight in this process.
pub const IN_FLIGHT: &str = "repoll_in_flight";
/// Queue depth by `state` (ready, waiting, retrying, leased, stuck, dead, results), refreshed
/// from `Queue::stats` periodically.
pub const QUEUE_DEPTH: &str = "repoll_queue_depth";
/// 1 while the upstream's circuit breaker is open or half-open, else 0 (label `upstream`).
pub const BREAKER_OPEN: &str = "repoll_breaker_open";
/// Refreshes of a stored result (tasks started while a result was stored: stale answers and
/// refreshes ahead) this worker ended; label `outcome` of [`REFRESH_OUTCOMES`]: `done` (the
/// new result replaced the stored one) or `failed` (the refresh died — the upstream failed it,
/// an error was permanent or the last attempt, or its deadline passed between polls — and the
/// old result is answered stale-if-error). A refresh is also a claim and a completion or a
/// failure: these count the same calls again, by what they were for. The answers themselves
/// are the web process's `repoll_answers_total{upstream,freshness}`.
pub const REFRESHES: &str = "repoll_refreshes_total";

/// Time from a task's creation to its final state, in seconds (Redis time at both ends), as
/// the worker that wrote the end measured it; labels `upstream` and `outcome` (`done`: a
/// result stored; `dead`: dead-lettered). The time-to-final objective is set on its p95
/// (deploy/prometheus/rules.yml). Tasks ended by an upstream's callback are not in it.
pub const TIME_TO_FINAL: &str = "repoll_time_to_final_seconds";
/// 1 while this process's last heartbeat into the queue's registry reached Redis, 0 once one
/// failed (label `upstream`: the queue's); written by workers and by the web process.
pub const REDIS_UP: &str = "repoll_redis_up";
/// Workers with a live heartbeat in the queue's registry (label `upstream`), as the web
/// process read it at its own last heartbeat: the one view of the workers that survives
/// their death (a dead worker's own series vanish with it).
pub const WORKERS: &str = "repoll_workers";

/// The `upstream` label of a queue's series: its upstream's name, or `default`.
pub fn upstream_label(queue: &queue::QueueConfig) -> String {
    match queue.upstream.as_str() {
        "" => queue::DEFAULT_UPSTREAM.to_string(),
        u => u.to_string(),
    }
}

/// Records a heartbeat's outcome as [`REDIS_UP`]: whether Redis took it.
pub fn heartbeat_reached_redis(upstream: &str, reached: bool) {
    metrics::gauge!(REDIS_UP, "upstream" => upstream.to_string()).set(f64::from(u8::from(reached)));
}

/// Records a task's end in [`TIME_TO_FINAL`]: `outcome` `done` or `dead`, from its creation
/// (`created_ms`) to `now_ms`, both Redis time.
pub fn record_final(upstream: &str, outcome: &'static str, created_ms: i64, now_ms: i64) {
    let seconds = (now_ms.saturating_sub(created_ms)).max(0) as f64 / 1000.0;
    metrics::histogram!(TIME_TO_FINAL, "outcome" => outcome, "upstream" => upstream.to_string())
        .record(seconds);
}

/// Every `outcome` [`REFRESHES`] can count.
pub const REFRESH_OUTCOMES: &[&str] = &["done", "failed"];

/// Every `kind` / `outcome` pair [`FAILURES`] can count: an upstream error (see
/// `UpstreamError::kind`) is retried or ends its task; the upstream's "failed", max polls and
/// the whole-life deadline only end it.
pub const FAILURE_SERIES: &[(&str, &str)] = &[
    ("timeout", "retry"),
    ("timeout", "dead"),
    ("connect", "retry"),
    ("connect", "dead"),
    ("status", "retry"),
    ("status", "dead"),
    ("bad_body", "retry"),
    ("bad_body", "dead"),
    ("bad_key", "dead"),
    ("redirect", "dead"),
    ("failed", "dead"),
    ("max_polls", "dead"),
    ("deadline", "dead"),
];

/// Makes a worker's counters 0, not absent, from its start, labelled with its upstream, so
/// `rate()` and alerts work from the first scrape — the failures too, one series per pair of
/// [`FAILURE_SERIES`], and the refreshes, one per [`REFRESH_OUTCOMES`].
pub fn register_upstream(upstream: &str) {
    for name in [
        CLAIMS,
        COMPLETIONS,
        POLLS,
        LEASE_EXPIRATIONS,
        LEASE_RENEWALS,
        STALE_TOKENS,
        RELEASES,
        RATE_LIMITED,
    ] {
        metrics::counter!(name, "upstream" => upstream.to_string()).increment(0);
    }
    for (kind, outcome) in FAILURE_SERIES {
        metrics::counter!(FAILURES, "kind" => *kind, "outcome" => *outcome, "upstream" => upstream.to_string())
            .increment(0);
    }
    for outcome in REFRESH_OUTCOMES {
        metrics::counter!(REFRESHES, "outcome" => *outcome, "upstream" => upstream.to_string())
            .increment(0);
    }
    for call in ["submit", "poll", "result", "cancel"] {
        metrics::counter!(UPSTREAM_CALLS, "call" => call, "outcome" => "ok", "upstream" => upstream.to_string())
            .increment(0);
    }
    metrics::gauge!(IN_FLIGHT, "upstream" => upstream.to_string()).increment(0.0);
}

/// Counts a refresh that ended (`outcome` one of [`REFRESH_OUTCOMES`]); anything but a
/// refresh counts nothing.
pub fn count_refresh(upstream: &str, refresh: bool, outcome: &'static str) {
    if refresh {
        metrics::counter!(REFRESHES, "outcome" => outcome, "upstream" => upstream.to_string())
            .increment(1);
    }
}

/// Latency buckets in seconds: an API poll is usually 10 ms..several s.
const LATENCY_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Time-to-final buckets in seconds: a task lives from one call (~0.1 s) through many polls
/// (minutes) up to its whole-life deadline (hours); objectives sit between 1 s and 1 h.
const TIME_TO_FINAL_BUCKETS: &[f64] = &[
    0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// The `# HELP` line of every worker series (a page without them fails `promtool check
/// metrics`' lint; server/tests/prometheus_alerts.rs runs it on a real page).
fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(CLAIMS, "Tasks claimed.");
    describe_counter!(
        UPSTREAM_CALLS,
        "Calls made to the upstream, by call (submit, poll, result, cancel) and outcome."
    );
    describe_counter!(COMPLETIONS, "Tasks completed (final result stored).");
    describe_counter!(POLLS, "Calls answered processing and rescheduled.");
    describe_counter!(
        FAILURES,
        "Failed calls (outcome retry) and dead tasks (outcome dead), by kind."
    );
    describe_counter!(
        LEASE_EXPIRATIONS,
        "Expired leases this worker's reaper took back (requeued or dead as poison)."
    );
    describe_counter!(LEASE_RENEWALS, "Lease renewals of long calls.");
    describe_counter!(
        STALE_TOKENS,
        "Writes refused because another worker owns the task now."
    );
    describe_counter!(
        CALLBACKS,
        "Tasks ended by an upstream's callback (done or failed)."
    );
    describe_counter!(
        WEBHOOKS,
        "Webhooks from job API providers, by upstream and outcome (refused ones included)."
    );
    describe_counter!(RELEASES, "Leases released on shutdown.");
    describe_counter!(
        RATE_LIMITED,
        "Waits for the queue-wide upstream rate limit (one per refusal)."
    );
    describe_counter!(
        REFRESHES,
        "Refreshes of a stored result ended, by outcome (done, failed)."
    );
    describe_histogram!(
        UPSTREAM_LATENCY,
        Unit::Seconds,
        "Upstream call latency, by outcome (processing, done, failed, error)."
    );
    describe_histogram!(
        TIME_TO_FINAL,
        Unit::Seconds,
        "Time from a task's creation to its final state (Redis time), by outcome (done, dead)."
    );
    describe_gauge!(IN_FLIGHT, "Upstream calls in flight in this process.");
    describe_gauge!(
        QUEUE_DEPTH,
        "Tasks by state (ready, waiting, retrying, leased, stuck, dead, results)."
    );
    describe_gauge!(
        BREAKER_OPEN,
        "1 while the upstream's circuit breaker is open or half-open, else 0."
    );
    describe_gauge!(
        REDIS_UP,
        "1 while this process's last heartbeat reached Redis, else 0."
    );
    describe_gauge!(
        WORKERS,
        "Workers with a live heartbeat in the queue's registry (read by the web process)."
    );
}

/// Installs the Prometheus recorder as the global `metrics` recorder (once per process; later
/// calls return the same handle) and starts a thread that runs its upkeep (histogram
/// draining) every 5 s. If another recorder was installed first, the returned handle renders
/// an empty page and a warning is logged.
pub fn install_prometheus() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Full(UPSTREAM_LATENCY.to_string()),
                    LATENCY_BUCKETS,
                )
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full(TIME_TO_FINAL.to_string()),
                        TIME_TO_FINAL_BUCKETS,
                    )
                })
                .unwrap_or_else(|e| {
                    tracing::warn!(error = %e, "latency buckets refused; using summaries");
                    PrometheusBuilder::new()
                });
            let recorder = builder.build_recorder();
            let handle = recorder.handle();
            if let Err(e) = metrics::set_global_recorder(recorder) {
                tracing::warn!(error = %e, "a metrics recorder is already installed");
            }
            describe();
            // Counters that have not counted yet are 0, not absent, so `rate()` and alerts
            // work from the first scrape (labelled ones appear with their first label set).
            // (A worker's own series carry its upstream: `register_upstream` at its start.)
            metrics::counter!(CALLBACKS).increment(0);
            let upkeep = handle.clone();
            let spawned = std::thread::Builder::new()
                .name("metrics-upkeep".into())
                .spawn(move || loop {
                    std::thread::sleep(Duration::from_secs(5));
                    upkeep.run_upkeep();
                });
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "no metrics upkeep thread");
            }
            handle
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::UpstreamError;

    /// Every kind of upstream error has its failure series registered at 0, for both outcomes
    /// it can have (a permanent one only ends its task).
    #[test]
    fn every_upstream_error_kind_has_its_failure_series() {
        let errors = [
            UpstreamError::Timeout { after_ms: 1 },
            UpstreamError::Connect("refused".into()),
            UpstreamError::Status {
                code: 503,
                retry_after: None,
                message: None,
                body: String::new(),
            },
            UpstreamError::Status {
                code: 404,
                retry_after: None,
                message: None,
                body: String::new(),
            },
            UpstreamError::BadBody("not JSON".into()),
            UpstreamError::BadKey("bad".into()),
            UpstreamError::Redirect("to another origin".into()),
        ];
        for e in errors {
            let outcomes: &[&str] = if e.is_permanent() {
                &["dead"]
            } else {
                &["retry", "dead"]
            };
            for outcome in outcomes {
                assert!(
                    FAILURE_SERIES.contains(&(e.kind(), outcome)),
                    "{} / {outcome} not registered",
                    e.kind()
                );
            }
        }
    }
}
