//! The bound between traced work and a collector: finished spans wait for export in a queue
//! of at most `max_queue` spans; when it is full a span is dropped at once and counted
//! ([`DROPPED`]), so a collector that is down or slow never slows a request or a worker.
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

/// Counter: spans dropped because the export queue was full.
pub const DROPPED: &str = "repoll_trace_spans_dropped_total";

/// A span processor that hands at most `cap` spans not yet exported to `inner`.
#[derive(Debug)]
pub struct Bounded<P> {
    inner: P,
    pending: Arc<AtomicUsize>,
    cap: usize,
}

impl<P> Bounded<P> {
    /// `pending` is shared with the [`Counted`] exporter inside `inner`.
    pub fn new(inner: P, pending: Arc<AtomicUsize>, cap: usize) -> Bounded<P> {
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

    fn on_end(&self, span: SpanData) {
        if self.pending.fetch_add(1, Ordering::AcqRel) >= self.cap {
            self.pending.fetch_sub(1, Ordering::AcqRel);
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
    pending: Arc<AtomicUsize>,
}

impl<E> Counted<E> {
    pub fn new(inner: E, pending: Arc<AtomicUsize>) -> Counted<E> {
        Counted { inner, pending }
    }
}

impl<E: SpanExporter> SpanExporter for Counted<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len();
        let result = self.inner.export(batch).await;
        self.pending.fetch_sub(n, Ordering::AcqRel);
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
