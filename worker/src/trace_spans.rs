//! The worker's spans (issue 27, OpenTelemetry messaging conventions): each claim-to-outcome
//! is a `process <queue>` CONSUMER span, a root linked to the contexts the task keeps (its
//! maker's and its joiners'), so a task polled 30 times is 30 short spans pointing at one
//! origin rather than one 30-minute span; the upstream call inside it is an HTTP CLIENT span
//! whose `traceparent` goes to the upstream.
//!
//! Only while the process traces ([`queue::trace_context::enabled`]); otherwise every span
//! here is disabled and costs nothing. The spans are `tracing` spans: the process's
//! tracing-opentelemetry layer turns them (and the log events inside them) into OTel spans
//! and span events.

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use queue::Claimed;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// Whether this process traces.
pub fn enabled() -> bool {
    queue::trace_context::enabled()
}

/// The W3C `traceparent` of `span`'s context, when it has a valid one.
pub fn traceparent_of(span: &Span) -> Option<String> {
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    sc.is_valid().then(|| {
        format!(
            "00-{}-{}-{:02x}",
            sc.trace_id(),
            sc.span_id(),
            sc.trace_flags().to_u8()
        )
    })
}

/// The trace and span ids of `span` (for log lines), when it has a valid context.
pub fn ids_of(span: &Span) -> Option<(String, String)> {
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    sc.is_valid()
        .then(|| (sc.trace_id().to_string(), sc.span_id().to_string()))
}

/// The `traceparent` a task keeps: the current span's, only when it is sampled (a link to a
/// span nobody records would be bytes for nothing). What the server installs as the queue's
/// [`queue::trace_context::Source`].
pub fn sampled_traceparent() -> Option<String> {
    let span = Span::current();
    let sampled = span.context().span().span_context().is_sampled();
    sampled.then(|| traceparent_of(&span)).flatten()
}

/// A remote span context from a version-00 `traceparent` (`None` when malformed).
pub fn parse_traceparent(tp: &str) -> Option<SpanContext> {
    if !queue::trace_context::is_traceparent(tp) {
        return None;
    }
    let trace_id = TraceId::from_hex(&tp[3..35]).ok()?;
    let span_id = SpanId::from_hex(&tp[36..52]).ok()?;
    let flags = u8::from_str_radix(&tp[53..55], 16).ok()?;
    let sc = SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::new(flags),
        true,
        TraceState::default(),
    );
    sc.is_valid().then_some(sc)
}

/// The `process <queue>` span of one claimed task: a root (the task outlives its maker's
/// request) linked to its maker's and joiners' contexts.
pub(crate) fn process_span(queue_name: &str, upstream: &str, c: &Claimed) -> Span {
    if !enabled() {
        return Span::none();
    }
    let span = tracing::info_span!(
        parent: None,
        "process",
        otel.name = %format_args!("process {queue_name}"),
        otel.kind = "consumer",
        otel.status_code = tracing::field::Empty,
        messaging.system = "repoll",
        messaging.operation.type = "process",
        messaging.destination.name = queue_name,
        messaging.message.id = %c.id,
        repoll.upstream = upstream,
        repoll.attempt = c.attempts + 1,
        repoll.polls = c.polls,
        repoll.freshness = if c.refresh { "refresh" } else { "first" },
        repoll.tenant = c.tenant.as_str(),
        repoll.outcome = tracing::field::Empty,
    );
    for sc in c.trace.all().filter_map(parse_traceparent) {
        span.add_link(sc);
    }
    span
}

/// Spans for the leases the reaper took back (only while tracing): per task a short
/// `reap <queue>` span — no worker's `process` span is current, the one that held the lease
/// is gone — linked to the task's maker and joiners, holding an event that says what became
/// of it. One HMGET per reaped task for its contexts: leases expire rarely.
pub(crate) async fn reaped(queue: &queue::Queue, upstream: &str, r: &queue::Reaped) {
    if !enabled() {
        return;
    }
    let queue_name = &queue.config().name;
    let all = r.requeued.iter().map(|id| (id, false));
    for (id, dead) in all.chain(r.dead.iter().map(|id| (id, true))) {
        let trace = queue.trace_of(id).await.unwrap_or_default();
        let span = tracing::info_span!(
            parent: None,
            "reap",
            otel.name = %format_args!("reap {queue_name}"),
            messaging.system = "repoll",
            messaging.destination.name = queue_name.as_str(),
            messaging.message.id = %id,
            repoll.upstream = upstream,
            repoll.outcome = if dead { "dead" } else { "requeued" },
        );
        for sc in trace.all().filter_map(parse_traceparent) {
            span.add_link(sc);
        }
        let _in = span.enter();
        if dead {
            tracing::info!(id = %id, "lease expired: dead-lettered (it lost too many leases)");
        } else {
            tracing::info!(id = %id, "lease expired: due again for another worker");
        }
    }
}

/// The HTTP CLIENT span of one upstream call (inside the current `process` span).
pub(crate) fn client_span(method: &str, url: &str) -> Span {
    if !enabled() {
        return Span::none();
    }
    tracing::info_span!(
        "upstream call",
        otel.name = method,
        otel.kind = "client",
        otel.status_code = tracing::field::Empty,
        http.request.method = method,
        url.full = url,
        http.response.status_code = tracing::field::Empty,
    )
}

/// Marks `span` failed (OTel status `ERROR`).
pub(crate) fn mark_error(span: &Span) {
    span.record("otel.status_code", "error");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_round_trip() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let sc = parse_traceparent(tp).expect("valid");
        assert_eq!(
            sc.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(sc.span_id().to_string(), "00f067aa0ba902b7");
        assert!(sc.is_sampled());
        assert!(parse_traceparent(&tp.replace("4bf9", "XXXX")).is_none());
        let zero = "00-00000000000000000000000000000000-00f067aa0ba902b7-01";
        assert!(
            parse_traceparent(zero).is_none(),
            "an all-zero trace id is invalid"
        );
    }
}
