//! The bound between traced work and a collector: finished spans wait for export in a queue
//! of at most `max_queue` spans and [`QUEUE_BYTES_MAX`] bytes; when it is full a span is
//! dropped at once and counted ([`DROPPED`]), so a collector that is down or slow never slows
//! a request or a worker, and never grows the process. Each span is bounded first
//! ([`span_size`]): a count alone let 8 KiB `tracestate`s and 64 KiB paths make a 258 MB
//! queue behind a stalled collector, and 37 MB exports a working one refused.
//!
//! The SDK's batch processor bounds its queue too, but keeps its drop count to itself. So the
//! count lives here: [`Bounded`] counts each span handed on until the exporter
//! ([`Counted`]) has taken it, and refuses (counting) beyond the bound; the batch processor's
//! own queue, given the same bound, never fills first.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::Context;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use opentelemetry_sdk::Resource;

use super::span_size;

/// Counter: spans dropped because the export queue was full.
pub const DROPPED: &str = "repoll_trace_spans_dropped_total";

/// The most bytes of spans (as [`span_size::bytes`] counts them) waiting for export. Every
/// export is a part of the queue, so no export is larger either: far below the 20 MiB an
/// OpenTelemetry Collector takes in one request by default.
pub const QUEUE_BYTES_MAX: usize = 4 << 20;

/// Spans handed on and not yet exported: their count and bytes.
#[derive(Debug, Default)]
pub struct Pending {
    spans: AtomicUsize,
    bytes: AtomicUsize,
}

impl Pending {
    /// Takes room for one span of `bytes`, or says there is none (nothing taken then).
    fn take(&self, bytes: usize, max_spans: usize) -> bool {
        if self.spans.fetch_add(1, Ordering::AcqRel) >= max_spans {
            self.spans.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        if self.bytes.fetch_add(bytes, Ordering::AcqRel) + bytes > QUEUE_BYTES_MAX {
            self.give_back(1, bytes);
            return false;
        }
        true
    }

    fn give_back(&self, spans: usize, bytes: usize) {
        self.spans.fetch_sub(spans, Ordering::AcqRel);
        self.bytes.fetch_sub(bytes, Ordering::AcqRel);
    }
}

/// A span processor that bounds each span ([`span_size::bound`]) and hands at most `cap`
/// spans, [`QUEUE_BYTES_MAX`] bytes, not yet exported to `inner`.
#[derive(Debug)]
pub struct Bounded<P> {
    inner: P,
    pending: Arc<Pending>,
    cap: usize,
}

impl<P> Bounded<P> {
    /// `pending` is shared with the [`Counted`] exporter inside `inner`.
    pub fn new(inner: P, pending: Arc<Pending>, cap: usize) -> Bounded<P> {
        Bounded {
            inner,
            pending,
            cap,
        }
    }
}

impl<P: SpanProcessor> SpanProcessor for Bounded<P> {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, mut span: SpanData) {
        span_size::bound(&mut span);
        if !self.pending.take(span_size::bytes(&span), self.cap) {
            metrics::counter!(DROPPED).increment(1);
            return;
        }
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// An exporter that tells [`Bounded`] when spans have left the queue (sent or failed).
#[derive(Debug)]
pub struct Counted<E> {
    inner: E,
    pending: Arc<Pending>,
}

impl<E> Counted<E> {
    pub fn new(inner: E, pending: Arc<Pending>) -> Counted<E> {
        Counted { inner, pending }
    }
}

impl<E: SpanExporter> SpanExporter for Counted<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        // The same count `Bounded` took: spans are not changed after `on_end`.
        let (n, bytes) = (batch.len(), batch.iter().map(span_size::bytes).sum());
        let result = self.inner.export(batch).await;
        self.pending.give_back(n, bytes);
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}
