//! Spans only where work happens (issue 42): the `create` span of an enqueue answered from the
//! store with nothing written — a fresh hit, a cached failure, "only if cached" with nothing
//! stored — is not exported. Such a span says nothing the request's own span does not (its
//! outcome is the answer's `Cache-Status`), no task keeps its context (only a created or joined
//! task stores `tc` or a link in `tl`, so no exported span ever points to a dropped one), and
//! on a read-mostly front it was half of every trace. A stale answer keeps its span: it may
//! have joined the refresh, whose process spans then link to it.

use std::time::Duration;

use opentelemetry::Context;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanProcessor};
use opentelemetry_sdk::Resource;

/// The `repoll.outcome`s of a `create` span that made, joined and linked nothing
/// (queue/src/enqueue.rs `outcome_name`).
const NOTHING_WRITTEN: [&str; 3] = ["stored", "negative", "not cached"];

/// A span processor that hands every span to `inner` except a `create` span that made no task.
#[derive(Debug)]
pub struct OnlyWork<P>(pub P);

fn made_nothing(span: &SpanData) -> bool {
    span.name.starts_with("create ")
        && span.attributes.iter().any(|kv| {
            kv.key.as_str() == "repoll.outcome"
                && NOTHING_WRITTEN.contains(&kv.value.as_str().as_ref())
        })
}

impl<P: SpanProcessor> SpanProcessor for OnlyWork<P> {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.0.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        if !made_nothing(&span) {
            self.0.on_end(span);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.0.set_resource(resource);
    }
}
