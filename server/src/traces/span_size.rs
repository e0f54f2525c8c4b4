//! How big a finished span may be, and how big it is.
//!
//! Our spans' attributes are short, but some carry what a client or an upstream wrote (a
//! path, an error message, a caller's `tracestate`). Each is bounded where it is made; this is
//! the one guard for all of them on the way to export: every string value at most
//! [`VALUE_MAX`] bytes, a `tracestate` over [`TRACESTATE_MAX`] bytes dropped (as W3C
//! Trace Context allows). [`bytes`] is the size the export queue counts (`super::dropping`).

use opentelemetry::trace::{SpanContext, TraceState};
use opentelemetry::{Array, KeyValue, StringValue, Value};
use opentelemetry_sdk::trace::SpanData;

/// The longest `tracestate` carried: from a request (`super::request_span`) or on a span.
/// W3C Trace Context lets a receiver drop a `tracestate` it will not carry (its own limit
/// for a propagated one is 512 characters); kept whole, a client's 8 KiB rode on every span
/// of the request into each export.
pub const TRACESTATE_MAX: usize = 512;

/// The longest string attribute value exported, in bytes (with a marker of what was cut).
pub const VALUE_MAX: usize = 1024;

/// What a span weighs beyond its strings: ids, times, kind, status, protobuf framing.
const SPAN_OVERHEAD: usize = 128;

/// Cuts every string value of `span` (its attributes, its events', its links') to
/// [`VALUE_MAX`] bytes and drops an oversized `tracestate` from it and its links.
pub fn bound(span: &mut SpanData) {
    span.span_context = bounded_context(&span.span_context);
    bound_attributes(&mut span.attributes);
    for event in span.events.events.iter_mut() {
        bound_attributes(&mut event.attributes);
    }
    for link in span.links.links.iter_mut() {
        link.span_context = bounded_context(&link.span_context);
        bound_attributes(&mut link.attributes);
    }
}

/// The bytes `span` takes: its name, every key and value, events and links, its
/// `tracestate`, and a fixed part for the rest.
pub fn bytes(span: &SpanData) -> usize {
    let events: usize = span
        .events
        .iter()
        .map(|e| SPAN_OVERHEAD / 4 + e.name.len() + attributes_bytes(&e.attributes))
        .sum();
    let links: usize = span
        .links
        .iter()
        .map(|l| SPAN_OVERHEAD / 2 + state_bytes(&l.span_context) + attributes_bytes(&l.attributes))
        .sum();
    SPAN_OVERHEAD
        + span.name.len()
        + state_bytes(&span.span_context)
        + attributes_bytes(&span.attributes)
        + events
        + links
}

fn bounded_context(cx: &SpanContext) -> SpanContext {
    if state_bytes(cx) <= TRACESTATE_MAX {
        return cx.clone();
    }
    SpanContext::new(
        cx.trace_id(),
        cx.span_id(),
        cx.trace_flags(),
        cx.is_remote(),
        TraceState::default(),
    )
}

fn state_bytes(cx: &SpanContext) -> usize {
    cx.trace_state().header().len()
}

fn bound_attributes(attributes: &mut [KeyValue]) {
    for kv in attributes.iter_mut() {
        if let Some(cut) = bounded_value(&kv.value) {
            kv.value = cut;
        }
    }
}

/// The value cut to size, or `None` when it fits.
fn bounded_value(value: &Value) -> Option<Value> {
    match value {
        Value::String(s) if s.as_str().len() > VALUE_MAX => Some(Value::String(cut(s))),
        Value::Array(Array::String(items))
            if items.iter().any(|s| s.as_str().len() > VALUE_MAX) =>
        {
            Some(Value::Array(Array::String(items.iter().map(cut).collect())))
        }
        _ => None,
    }
}

fn cut(s: &StringValue) -> StringValue {
    crate::refusals::clip_to(s.as_str(), VALUE_MAX)
        .into_owned()
        .into()
}

fn attributes_bytes(attributes: &[KeyValue]) -> usize {
    attributes
        .iter()
        .map(|kv| kv.key.as_str().len() + value_bytes(&kv.value))
        .sum()
}

fn value_bytes(value: &Value) -> usize {
    match value {
        Value::String(s) => s.as_str().len(),
        Value::Array(Array::String(items)) => items.iter().map(|s| s.as_str().len() + 2).sum(),
        Value::Array(Array::Bool(v)) => v.len(),
        Value::Array(Array::I64(v)) => v.len() * 8,
        Value::Array(Array::F64(v)) => v.len() * 8,
        _ => 8,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{SpanId, TraceFlags, TraceId};

    fn context(state: &str) -> SpanContext {
        SpanContext::new(
            TraceId::from(7u128),
            SpanId::from(9u64),
            TraceFlags::SAMPLED,
            true,
            state.parse::<TraceState>().unwrap(),
        )
    }

    /// A long value is cut to VALUE_MAX plus its marker; a long tracestate is dropped, a short
    /// one kept; the counted size falls with them.
    #[test]
    fn long_values_and_tracestates_are_bounded() {
        let mut attributes = vec![
            KeyValue::new("url.path", "/".repeat(64 * 1024)),
            KeyValue::new("short", "ok"),
            KeyValue::new("n", 5i64),
        ];
        bound_attributes(&mut attributes);
        let path = attributes[0].value.as_str();
        assert!(path.len() <= VALUE_MAX + 32, "{}", path.len());
        assert!(path.ends_with("bytes)"));
        assert_eq!(attributes[1].value.as_str(), "ok");

        // 30 members of 250-byte values: about 7.7 KB, as the probe sent.
        let members: Vec<String> = (0..30)
            .map(|i| format!("k{i}={}", "a".repeat(250)))
            .collect();
        let long = context(&members.join(","));
        assert!(state_bytes(&long) > 7000);
        assert_eq!(bounded_context(&long).trace_state().header(), "");
        assert_eq!(bounded_context(&long).trace_id(), long.trace_id());
        let short = context("k=abc");
        assert_eq!(bounded_context(&short).trace_state().header(), "k=abc");
    }
}
