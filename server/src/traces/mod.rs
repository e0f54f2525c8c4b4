//! Logging and OpenTelemetry traces, set up once per process by `main` for every command
//! (issue 27). Logs: text or JSON lines (`REPOLL_LOG_FORMAT`), carrying `trace_id` /
//! `span_id` inside a traced span. Traces: exported over OTLP/HTTP when the standard
//! `OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT` is set ([`settings`]), and off — no exporter, no
//! span kept, nothing stored in task records — when it is not.
//!
//! The spans themselves are `tracing` spans made where the work happens: the web request
//! (`crate::web`), `create <queue>` (the queue's enqueue), `process <queue>` and the upstream
//! call (the worker, `worker::trace_spans`). The tracing-opentelemetry layer turns them into
//! OTel spans; the SDK batches them to the exporter through a bounded queue ([`dropping`]).

pub mod dropping;
pub mod http_client;
pub mod only_work;
pub mod settings;
pub mod span_size;

use std::io::IsTerminal;
use std::sync::Arc;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry::KeyValue;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer as _};

pub use settings::{LogFormat, Protocol, TraceSettings};

/// Keeps the exporter of a tracing process; [`Tracing::shutdown`] sends what is queued.
pub struct Tracing {
    provider: Option<SdkTracerProvider>,
    trace_url: Option<String>,
}

impl Tracing {
    /// Whether spans are exported.
    pub fn exporting(&self) -> bool {
        self.provider.is_some()
    }

    /// `REPOLL_TRACE_URL`, checked (read for `serve` only: the dashboard links through it).
    pub fn trace_url(&self) -> Option<String> {
        self.trace_url.clone()
    }

    /// Exports the spans still queued and stops the exporter, waiting at most `within` (the
    /// command's grace setting): a stalled collector must not hold a stopping process longer
    /// than its own work may (the SDK's default wait is 5 s). What is not sent by then is lost.
    pub fn shutdown(self, within: std::time::Duration) {
        if let Some(provider) = self.provider {
            if let Err(e) = provider.shutdown_with_timeout(within) {
                eprintln!("repoll: trace export at exit: {e}");
            }
        }
    }
}

/// The trace export's counter, described and at 0 (as every counter is before it counts);
/// after the metrics recorder is installed.
pub fn register_counters() {
    metrics::describe_counter!(
        dropping::DROPPED,
        "Spans dropped because the export queue was full (spans or bytes)."
    );
    metrics::counter!(dropping::DROPPED).increment(0);
}

/// The process environment, as [`settings`] reads it.
fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Checks the settings and installs logging, and (for `serve` and `worker`, when an endpoint
/// is set) the trace export; `command` becomes the resource attribute `repoll.command`. An
/// error names the variable; the caller stops the start.
pub fn init(command: &str, exports: bool) -> Result<Tracing, String> {
    let format = settings::log_format(&process_env)?;
    let trace_url = if command == "serve" {
        settings::trace_url(&process_env)?
    } else {
        None
    };
    let traces = if exports {
        settings::trace_settings(&process_env)?
    } else {
        None
    };
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,tower_http=info"));
    let provider = traces.map(|s| provider(&s, command)).transpose()?;
    let otel = provider.as_ref().map(|p| {
        tracing_opentelemetry::layer()
            .with_tracer(p.tracer("repoll"))
            // No source file and line per span: weight in every export, read by nobody.
            .with_location(false)
            // Nor busy/idle times (a clock read at every enter and exit of every span) or the
            // thread's name and id: per-span work and weight on every request, which the
            // read-mostly load measured (docs/benchmarks.md, "Traces").
            .with_tracked_inactivity(false)
            .with_threads(false)
            // Nor the Rust module path of every span (`target`): the span's name says what it
            // is. And entering a span does not make its OpenTelemetry context the current one
            // (a context guard per enter and exit, many per request): nothing here reads the
            // current context; propagation reads the span's own (`OpenTelemetrySpanExt`).
            .with_target(false)
            .with_context_activation(false)
            // Its own filter: RUST_LOG=warn quiets the log, not the traces (our spans and the
            // span events that matter are at `info`).
            .with_filter(LevelFilter::INFO)
    });
    let tracing_on = provider.is_some();
    // Colour codes only for a terminal: in a log file (scripts/run's, a service manager's)
    // they are bytes of noise around every field.
    let fmt = tracing_subscriber::fmt::layer().with_ansi(std::io::stdout().is_terminal());
    let registry = tracing_subscriber::registry().with(otel);
    let installed = match format {
        LogFormat::Text => registry
            .with(
                fmt.event_format(WithTraceIds {
                    inner: tracing_subscriber::fmt::format(),
                    on: tracing_on,
                    json: false,
                })
                .with_filter(filter),
            )
            .try_init(),
        LogFormat::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .event_format(WithTraceIds {
                        inner: tracing_subscriber::fmt::format().json(),
                        on: tracing_on,
                        json: true,
                    })
                    .with_filter(filter),
            )
            .try_init(),
    };
    installed.map_err(|e| format!("cannot install logging: {e}"))?;
    if tracing_on {
        queue::trace_context::install(worker::trace_spans::sampled_traceparent);
    }
    Ok(Tracing {
        provider,
        trace_url,
    })
}

/// The tracer provider: OTLP/HTTP exporter with our HTTP client, behind the bounded queue.
fn provider(s: &TraceSettings, command: &str) -> Result<SdkTracerProvider, String> {
    let runtime = tokio::runtime::Handle::try_current()
        .map_err(|_| "trace export needs the Tokio runtime".to_string())?;
    let protocol = match s.protocol {
        Protocol::HttpProtobuf => opentelemetry_otlp::Protocol::HttpBinary,
        Protocol::HttpJson => opentelemetry_otlp::Protocol::HttpJson,
    };
    // The endpoint, headers and timeout come from the OTEL_EXPORTER_OTLP_* variables, read
    // by the exporter as the specification says (the signal-specific one as given, the
    // general one with /v1/traces added).
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(protocol)
        .with_timeout(http_client::EXPORT_TIMEOUT)
        .with_http_client(http_client::ReqwestClient::new(runtime)?)
        .build()
        .map_err(|e| format!("cannot export traces to {}: {e}", s.endpoint))?;
    let pending = Arc::new(dropping::Pending::default());
    let batch = BatchSpanProcessor::builder(dropping::Counted::new(exporter, pending.clone()))
        .with_batch_config(
            BatchConfigBuilder::default()
                .with_max_queue_size(s.max_queue)
                .build(),
        )
        .build();
    let mut resource = opentelemetry_sdk::Resource::builder()
        .with_attribute(KeyValue::new("repoll.command", command.to_string()));
    if let Some(name) = &s.service_name {
        resource = resource.with_service_name(name.clone());
    }
    Ok(SdkTracerProvider::builder()
        .with_span_processor(only_work::OnlyWork(dropping::Bounded::new(
            batch,
            pending,
            s.max_queue,
        )))
        .with_sampler(s.sampler.clone())
        .with_resource(resource.build())
        .build())
}

/// An event format that adds the current span's `trace_id` and `span_id` (when tracing is
/// on and the event happens inside a span): at the end of a text line, as the first fields
/// of a JSON object.
struct WithTraceIds<F> {
    inner: F,
    on: bool,
    json: bool,
}

impl<S, N, F> FormatEvent<S, N> for WithTraceIds<F>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let ids = if self.on && ctx.lookup_current().is_some() {
            worker::trace_spans::ids_of(&tracing::Span::current())
        } else {
            None
        };
        let Some((trace_id, span_id)) = ids else {
            return self.inner.format_event(ctx, writer, event);
        };
        let mut line = String::new();
        self.inner
            .format_event(ctx, Writer::new(&mut line), event)?;
        if self.json {
            let fields = format!("{{\"trace_id\":\"{trace_id}\",\"span_id\":\"{span_id}\",");
            writer.write_str(&line.replacen('{', &fields, 1))
        } else {
            let body = line.trim_end_matches('\n');
            writeln!(writer, "{body} trace_id={trace_id} span_id={span_id}")
        }
    }
}

/// The server span of one web request (API, pages, the query form): a child of the caller's
/// W3C `traceparent` / `tracestate` when it sends them. While tracing is off, tower-http's
/// own `request` span (at `debug`, as before).
pub fn request_span<B>(req: &axum::http::Request<B>) -> tracing::Span {
    use opentelemetry::propagation::TextMapPropagator;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    if !queue::trace_context::enabled() {
        return tracing::debug_span!(
            "request",
            method = %req.method(),
            uri = %crate::refusals::clip(&req.uri().to_string()),
            version = ?req.version(),
        );
    }
    let span = tracing::info_span!(
        "request",
        // The method alone, as the HTTP conventions name a server span without its route:
        // paths hold task ids and would make one span name per task.
        otel.name = %req.method(),
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        http.request.method = %req.method(),
        // A client's text, so bounded: a path may be 64 KiB (crate::refusals).
        url.path = %crate::refusals::clip(req.uri().path()),
        http.response.status_code = tracing::field::Empty,
    );
    let parent = opentelemetry_sdk::propagation::TraceContextPropagator::new()
        .extract(&BoundedHeaders(req.headers()));
    // Without a (valid) traceparent the span starts a trace of its own.
    let _ = span.set_parent(parent);
    span
}

/// A request's headers as the propagator reads them, with a `tracestate` over
/// [`span_size::TRACESTATE_MAX`] bytes left out (the `traceparent` still sets the parent).
struct BoundedHeaders<'a>(&'a axum::http::HeaderMap);

impl opentelemetry::propagation::Extractor for BoundedHeaders<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        let value = self.0.get(key)?.to_str().ok()?;
        let too_long =
            key.eq_ignore_ascii_case("tracestate") && value.len() > span_size::TRACESTATE_MAX;
        (!too_long).then_some(value)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

/// Records a web response's status on its [`request_span`] (a 5xx marks it failed).
pub fn record_response<B>(
    resp: &axum::http::Response<B>,
    latency: std::time::Duration,
    span: &tracing::Span,
) {
    use tower_http::trace::OnResponse;
    span.record("http.response.status_code", resp.status().as_u16());
    if resp.status().is_server_error() {
        span.record("otel.status_code", "error");
    }
    tower_http::trace::DefaultOnResponse::default().on_response(resp, latency, span);
}
