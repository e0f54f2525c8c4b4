//! What the environment asks of tracing and logging: the standard OpenTelemetry variables
//! (`OTEL_*`, read as the specification names them) and repoll's `REPOLL_LOG_FORMAT` /
//! `REPOLL_TRACE_URL`. Every value is checked here, so a mistake stops the start with a
//! message naming the variable instead of being silently replaced by a default.

use opentelemetry_sdk::trace::Sampler;

/// Every variable tracing and logging read (here, or the OTLP exporter as the specification
/// says): environment only, never flags, each documented in the tracing table of docs/configuration.md
/// (`server/tests/readme_defaults.rs` checks).
pub const ENVIRONMENT: &[&str] = &[
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_SDK_DISABLED",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG",
    "OTEL_BSP_MAX_QUEUE_SIZE",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
    "OTEL_BSP_SCHEDULE_DELAY",
    "REPOLL_LOG_FORMAT",
    "REPOLL_TRACE_URL",
];

/// How log lines are written (`REPOLL_LOG_FORMAT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// One human-readable line per event (the default).
    Text,
    /// One JSON object per line, for log shippers.
    Json,
}

/// The OTLP encodings repoll sends (`OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// `http/protobuf` (the default).
    HttpProtobuf,
    /// `http/json`.
    HttpJson,
}

/// Export is on: where to, how, what to sample.
#[derive(Debug)]
pub struct TraceSettings {
    /// The endpoint as given (the exporter itself reads the variables and adds `/v1/traces`
    /// to `OTEL_EXPORTER_OTLP_ENDPOINT`).
    pub endpoint: String,
    pub protocol: Protocol,
    pub sampler: Sampler,
    /// `OTEL_SERVICE_NAME`, unless `OTEL_RESOURCE_ATTRIBUTES` names the service: then None.
    pub service_name: Option<String>,
    /// Spans waiting for export at most (`OTEL_BSP_MAX_QUEUE_SIZE`, default 2048); more are
    /// dropped and counted.
    pub max_queue: usize,
}

/// The default bound of spans waiting for export (the specification's default).
pub const DEFAULT_MAX_QUEUE: usize = 2048;

/// A variable's value, `None` when unset or blank.
fn var(env: &dyn Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    env(name)
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// `REPOLL_LOG_FORMAT`: `text` (default) or `json`.
pub fn log_format(env: &dyn Fn(&str) -> Option<String>) -> Result<LogFormat, String> {
    match var(env, "REPOLL_LOG_FORMAT")
        .map(|v| v.to_ascii_lowercase())
        .as_deref()
    {
        None | Some("text") => Ok(LogFormat::Text),
        Some("json") => Ok(LogFormat::Json),
        Some(other) => Err(format!(
            "invalid value '{other}' for REPOLL_LOG_FORMAT: it takes text or json"
        )),
    }
}

/// `REPOLL_TRACE_URL`: the dashboard's task page links a task's trace ids through it. An
/// http(s) URL holding `{trace_id}` (e.g. `http://jaeger:16686/trace/{trace_id}`).
pub fn trace_url(env: &dyn Fn(&str) -> Option<String>) -> Result<Option<String>, String> {
    let Some(url) = var(env, "REPOLL_TRACE_URL") else {
        return Ok(None);
    };
    let lower = url.to_ascii_lowercase();
    if !(lower.starts_with("http://") || lower.starts_with("https://")) {
        return Err("REPOLL_TRACE_URL must be an http:// or https:// URL".into());
    }
    if !url.contains("{trace_id}") {
        return Err(
            "REPOLL_TRACE_URL must hold {trace_id}, where the dashboard puts a task's trace id"
                .into(),
        );
    }
    Ok(Some(url))
}

/// The trace export the environment asks for: `None` (off) unless an OTLP endpoint is set
/// (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT`) and
/// `OTEL_SDK_DISABLED` is not `true`.
pub fn trace_settings(
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<TraceSettings>, String> {
    let endpoint = var(env, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .map(|e| ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", e))
        .or_else(|| {
            var(env, "OTEL_EXPORTER_OTLP_ENDPOINT").map(|e| ("OTEL_EXPORTER_OTLP_ENDPOINT", e))
        });
    let disabled = var(env, "OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let Some((endpoint_var, endpoint)) = endpoint.filter(|_| !disabled) else {
        return Ok(None);
    };
    let lower = endpoint.to_ascii_lowercase();
    if !(lower.starts_with("http://") || lower.starts_with("https://")) {
        return Err(format!(
            "{endpoint_var} must be an http:// or https:// URL (e.g. http://localhost:4318)"
        ));
    }
    let (protocol_var, protocol) = var(env, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .map(|p| ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", p))
        .or_else(|| {
            var(env, "OTEL_EXPORTER_OTLP_PROTOCOL").map(|p| ("OTEL_EXPORTER_OTLP_PROTOCOL", p))
        })
        .unwrap_or(("", "http/protobuf".into()));
    let protocol = match protocol.as_str() {
        "http/protobuf" => Protocol::HttpProtobuf,
        "http/json" => Protocol::HttpJson,
        "grpc" => {
            return Err(format!(
                "{protocol_var}=grpc is not supported: repoll exports OTLP over HTTP only \
                 (http/protobuf or http/json; a collector listens for it on port 4318)"
            ))
        }
        other => {
            return Err(format!(
                "invalid value '{other}' for {protocol_var}: it takes http/protobuf or http/json"
            ))
        }
    };
    let service_name = var(env, "OTEL_SERVICE_NAME").or_else(|| {
        let named = var(env, "OTEL_RESOURCE_ATTRIBUTES").is_some_and(|a| {
            a.split(',')
                .any(|kv| kv.trim().starts_with("service.name="))
        });
        (!named).then(|| "repoll".to_string())
    });
    let max_queue = match var(env, "OTEL_BSP_MAX_QUEUE_SIZE") {
        None => DEFAULT_MAX_QUEUE,
        Some(v) => v
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=1_000_000).contains(n))
            .ok_or_else(|| {
                format!("invalid value '{v}' for OTEL_BSP_MAX_QUEUE_SIZE: 1 to 1000000 spans")
            })?,
    };
    Ok(Some(TraceSettings {
        endpoint,
        protocol,
        sampler: sampler(env)?,
        service_name,
        max_queue,
    }))
}

/// `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG`, as the specification names them;
/// default `parentbased_always_on` (a caller's sampled `traceparent` is always followed).
fn sampler(env: &dyn Fn(&str) -> Option<String>) -> Result<Sampler, String> {
    let ratio = || -> Result<f64, String> {
        match var(env, "OTEL_TRACES_SAMPLER_ARG") {
            None => Ok(1.0),
            Some(v) => v
                .parse::<f64>()
                .ok()
                .filter(|r| (0.0..=1.0).contains(r))
                .ok_or_else(|| {
                    format!("invalid value '{v}' for OTEL_TRACES_SAMPLER_ARG: a ratio from 0 to 1")
                }),
        }
    };
    let name = var(env, "OTEL_TRACES_SAMPLER").unwrap_or_else(|| "parentbased_always_on".into());
    Ok(match name.as_str() {
        "always_on" => Sampler::AlwaysOn,
        "always_off" => Sampler::AlwaysOff,
        "traceidratio" => Sampler::TraceIdRatioBased(ratio()?),
        "parentbased_always_on" => Sampler::ParentBased(Box::new(Sampler::AlwaysOn)),
        "parentbased_always_off" => Sampler::ParentBased(Box::new(Sampler::AlwaysOff)),
        "parentbased_traceidratio" => {
            Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(ratio()?)))
        }
        other => {
            return Err(format!(
                "invalid value '{other}' for OTEL_TRACES_SAMPLER: it takes always_on, \
                 always_off, traceidratio, parentbased_always_on, parentbased_always_off or \
                 parentbased_traceidratio"
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn off_without_an_endpoint() {
        assert!(trace_settings(&env(&[("OTEL_SERVICE_NAME", "x")]))
            .unwrap()
            .is_none());
        let disabled = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_SDK_DISABLED", "true"),
        ]);
        assert!(trace_settings(&disabled).unwrap().is_none());
    }

    #[test]
    fn on_with_defaults() {
        let s = trace_settings(&env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")]))
            .unwrap()
            .unwrap();
        assert_eq!(s.protocol, Protocol::HttpProtobuf);
        assert_eq!(s.service_name.as_deref(), Some("repoll"));
        assert_eq!(s.max_queue, DEFAULT_MAX_QUEUE);
        let named = env(&[
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://c:4318/v1/traces",
            ),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "deployment.environment=prod,service.name=api",
            ),
        ]);
        assert_eq!(trace_settings(&named).unwrap().unwrap().service_name, None);
    }

    #[test]
    fn mistakes_are_refused_by_name() {
        for (pairs, words) in [
            (
                &[("OTEL_EXPORTER_OTLP_ENDPOINT", "c:4318")][..],
                "OTEL_EXPORTER_OTLP_ENDPOINT must be an http",
            ),
            (
                &[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"),
                    ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                ][..],
                "OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not supported",
            ),
            (
                &[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                    ("OTEL_TRACES_SAMPLER", "sometimes"),
                ][..],
                "OTEL_TRACES_SAMPLER",
            ),
            (
                &[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                    ("OTEL_TRACES_SAMPLER", "traceidratio"),
                    ("OTEL_TRACES_SAMPLER_ARG", "2"),
                ][..],
                "OTEL_TRACES_SAMPLER_ARG",
            ),
        ] {
            let pairs: &'static [(&str, &str)] = Box::leak(pairs.to_vec().into_boxed_slice());
            let e = trace_settings(&env(pairs)).unwrap_err();
            assert!(e.contains(words), "{e}");
        }
    }

    #[test]
    fn log_format_and_trace_url() {
        assert_eq!(log_format(&env(&[])).unwrap(), LogFormat::Text);
        assert_eq!(
            log_format(&env(&[("REPOLL_LOG_FORMAT", "JSON")])).unwrap(),
            LogFormat::Json
        );
        assert!(log_format(&env(&[("REPOLL_LOG_FORMAT", "xml")]))
            .unwrap_err()
            .contains("REPOLL_LOG_FORMAT"));
        assert_eq!(trace_url(&env(&[])).unwrap(), None);
        let ok = env(&[("REPOLL_TRACE_URL", "https://tempo/t/{trace_id}")]);
        assert!(trace_url(&ok).unwrap().is_some());
        for bad in ["ftp://x/{trace_id}", "https://tempo/t/"] {
            let pairs: &'static [(&str, &str)] =
                Box::leak(vec![("REPOLL_TRACE_URL", bad)].into_boxed_slice());
            assert!(trace_url(&env(pairs)).is_err(), "{bad}");
        }
    }
}
