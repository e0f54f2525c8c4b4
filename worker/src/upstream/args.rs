//! The upstream's settings ([`UpstreamArgs`]): flags, each with a `REPOLL_UPSTREAM_*` variable,
//! and a `Debug` that shows every setting but the secrets.

use std::fmt;

use super::{JobArgs, Secret};

/// Default URL template: the simulator on its default address ([`simulator_url`] of
/// 127.0.0.1:9001).
pub const DEFAULT_URL: &str = "http://127.0.0.1:9001/api/query?q={key}";

/// The URL template of the simulator listening on `addr`: what the default upstream polls when
/// the simulator runs in the same process on another address. An unspecified address
/// (`0.0.0.0`, `::`) listens on every interface, loopback included, so it is reached there.
pub fn simulator_url(addr: std::net::SocketAddr) -> String {
    let mut addr = addr;
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr {
            std::net::SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            std::net::SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    format!("http://{addr}/api/query?q={{key}}")
}

/// How to reach and read the upstream API. Flags, each with a `REPOLL_UPSTREAM_*` variable.
#[derive(clap::Args, Clone)]
pub struct UpstreamArgs {
    /// URL template; `{key}` is replaced by the task's query, percent-encoded. `{key}` may stand
    /// in the path or the query string, not the host. Default: the simulator,
    /// http://127.0.0.1:9001/api/query?q={key}, or with `repoll serve --sim` wherever
    /// --sim-addr puts it. (Its value is not shown in `--help`: a template may carry a
    /// credential in its query string, and a config file's value is a default.)
    #[arg(
        long = "upstream-url",
        env = "REPOLL_UPSTREAM_URL",
        default_value = DEFAULT_URL,
        hide_env_values = true,
        hide_default_value = true
    )]
    pub url: String,
    /// HTTP method of a poll.
    #[arg(
        long = "upstream-method",
        env = "REPOLL_UPSTREAM_METHOD",
        default_value = "GET"
    )]
    pub method: String,
    /// Extra headers as "Name: value"; repeat the flag, or separate them with ';' in the variable.
    /// Values may be secrets (`Authorization`): never shown in `--help`, `Debug` or errors.
    #[arg(
        long = "upstream-header",
        env = "REPOLL_UPSTREAM_HEADERS",
        value_delimiter = ';',
        hide_env_values = true,
        hide_default_value = true
    )]
    pub headers: Vec<String>,
    /// The API key, read from `REPOLL_UPSTREAM_API_KEY` only (never a flag: a flag shows in
    /// `ps`), sent in the header named by `--upstream-api-key-header`, never logged.
    #[arg(skip = std::env::var("REPOLL_UPSTREAM_API_KEY").ok().filter(|k| !k.is_empty()).map(Secret::from))]
    pub api_key: Option<Secret>,
    /// Header that carries the API key (e.g. `Authorization` with a key "Bearer ...").
    #[arg(
        long = "upstream-api-key-header",
        env = "REPOLL_UPSTREAM_API_KEY_HEADER",
        default_value = "x-api-key"
    )]
    pub api_key_header: String,
    /// Whole-request timeout of one poll, in milliseconds.
    #[arg(
        long = "upstream-timeout-ms",
        env = "REPOLL_UPSTREAM_TIMEOUT_MS",
        default_value_t = 10_000
    )]
    pub timeout_ms: u64,
    /// Largest answer body accepted, in bytes (a bigger one is a bad body).
    #[arg(long = "upstream-max-body", env = "REPOLL_UPSTREAM_MAX_BODY", default_value_t = 4 << 20)]
    pub max_body_bytes: usize,
    /// Largest data stored per task, in bytes (the final result, or a partial): a final answer
    /// whose data is larger ends the task dead ("result too large"); a larger partial is not
    /// stored (the last one that fit stays) and polling goes on.
    #[arg(
        long = "upstream-max-result",
        env = "REPOLL_UPSTREAM_MAX_RESULT",
        default_value_t = 1 << 20
    )]
    pub max_result_bytes: usize,
    /// JSON pointer (RFC 6901) to the status in the answer.
    #[arg(
        long = "upstream-status-pointer",
        env = "REPOLL_UPSTREAM_STATUS_POINTER",
        default_value = "/status"
    )]
    pub status_pointer: String,
    /// JSON pointer to the data (partial while processing, full when done); "" = whole body.
    #[arg(
        long = "upstream-data-pointer",
        env = "REPOLL_UPSTREAM_DATA_POINTER",
        default_value = "/data"
    )]
    pub data_pointer: String,
    /// JSON pointer to the error message of a failed answer.
    #[arg(
        long = "upstream-error-pointer",
        env = "REPOLL_UPSTREAM_ERROR_POINTER",
        default_value = "/error"
    )]
    pub error_pointer: String,
    /// Status values meaning "still processing, poll again".
    #[arg(
        long = "upstream-processing",
        env = "REPOLL_UPSTREAM_PROCESSING",
        value_delimiter = ',',
        default_value = "processing,pending,queued,running,starting"
    )]
    pub processing_values: Vec<String>,
    /// Status values meaning "done, the data is final".
    #[arg(
        long = "upstream-done",
        env = "REPOLL_UPSTREAM_DONE",
        value_delimiter = ',',
        default_value = "done,complete,completed,succeeded,success"
    )]
    pub done_values: Vec<String>,
    /// Status values meaning "failed for good" (the task goes dead with the error message).
    #[arg(
        long = "upstream-failed",
        env = "REPOLL_UPSTREAM_FAILED",
        value_delimiter = ',',
        default_value = "failed,error,cancelled,canceled"
    )]
    pub failed_values: Vec<String>,
    /// What an answer without a status means: `error` (a bad body: the API or the pointer
    /// changed) or `processing` (an API that leaves the status out until it is done, as a
    /// Google long-running operation leaves out `"done": false`).
    #[arg(
        long = "upstream-missing-status",
        env = "REPOLL_UPSTREAM_MISSING_STATUS",
        value_enum,
        default_value_t = StatusFallback::Error
    )]
    pub missing_status: StatusFallback,
    /// What a status in none of the three lists means: `error` (a bad body) or `processing`
    /// (an API whose intermediate states are open-ended, as Azure Resource Manager's
    /// provisioning states are).
    #[arg(
        long = "upstream-unknown-status",
        env = "REPOLL_UPSTREAM_UNKNOWN_STATUS",
        value_enum,
        default_value_t = StatusFallback::Error
    )]
    pub unknown_status: StatusFallback,
    /// Where the status is read: `body` (the status pointer) or `http` (the answer's HTTP
    /// code: 202 = still processing, 200, 201 and 204 = done; for APIs that answer 202 until
    /// the result is ready, as RFC 9110's asynchronous pattern and Stability's API do).
    #[arg(
        long = "upstream-status-from",
        env = "REPOLL_UPSTREAM_STATUS_FROM",
        value_enum,
        default_value_t = StatusFrom::Body
    )]
    pub status_from: StatusFrom,
    /// Upstream calls per second for the whole queue, across every worker process on every
    /// host (a limiter in Redis); 0 = no limit.
    #[arg(
        long = "upstream-rate-per-sec",
        env = "REPOLL_UPSTREAM_RATE_PER_SEC",
        default_value_t = 0
    )]
    pub upstream_rate_per_sec: u32,
    /// Calls the rate limit lets through at once after a quiet spell (with --upstream-rate-per-sec).
    #[arg(
        long = "upstream-rate-burst",
        env = "REPOLL_UPSTREAM_RATE_BURST",
        default_value_t = 1
    )]
    pub upstream_rate_burst: u32,
    /// A job API's settings (submit, job reference, poll URL): unset, the repeating kind.
    #[command(flatten)]
    pub job: JobArgs,
}

/// How an answer whose status cannot be matched is read ([`UpstreamArgs::missing_status`],
/// [`UpstreamArgs::unknown_status`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum StatusFallback {
    /// A bad body (an upstream error, retried as the error policy says).
    Error,
    /// Still processing: poll again.
    Processing,
}

/// Where an answer's status is read ([`UpstreamArgs::status_from`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum StatusFrom {
    /// The status pointer in the JSON body.
    Body,
    /// The HTTP status code: 202 processing; 200, 201, 204 done.
    Http,
}

/// A queue-wide limit on upstream calls (see [`UpstreamArgs::upstream_rate_per_sec`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimit {
    pub per_sec: u32,
    pub burst: u32,
}

#[cfg(test)]
pub(super) fn list(s: &str) -> Vec<String> {
    s.split(',').map(str::to_string).collect()
}

impl Default for UpstreamArgs {
    /// The flags' defaults (their `#[arg]` attributes are the one place a default is written), without reading the environment.
    fn default() -> Self {
        crate::clap_defaults()
    }
}

impl fmt::Debug for UpstreamArgs {
    /// Every field, with the API key and header values redacted (a header may carry a secret).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Destructured without `..`: a new field does not compile until it is shown here (or
        // redacted on purpose), so comparing `Debug` output compares every setting.
        let UpstreamArgs {
            url,
            method,
            headers,
            api_key,
            api_key_header,
            timeout_ms,
            max_body_bytes,
            max_result_bytes,
            status_pointer,
            data_pointer,
            error_pointer,
            processing_values,
            done_values,
            failed_values,
            missing_status,
            unknown_status,
            status_from,
            upstream_rate_per_sec,
            upstream_rate_burst,
            job,
        } = self;
        // Only the names; a line without ':' is all value as far as we know.
        let header_names: Vec<&str> = headers
            .iter()
            .map(|h| h.split_once(':').map_or("<malformed>", |(n, _)| n.trim()))
            .collect();
        f.debug_struct("UpstreamArgs")
            .field("url", url)
            .field("method", method)
            .field(
                "headers",
                &format_args!("{header_names:?} (values redacted)"),
            )
            .field("api_key", api_key)
            .field("api_key_header", api_key_header)
            .field("timeout_ms", timeout_ms)
            .field("max_body_bytes", max_body_bytes)
            .field("max_result_bytes", max_result_bytes)
            .field("status_pointer", status_pointer)
            .field("data_pointer", data_pointer)
            .field("error_pointer", error_pointer)
            .field("processing_values", processing_values)
            .field("done_values", done_values)
            .field("failed_values", failed_values)
            .field("missing_status", missing_status)
            .field("unknown_status", unknown_status)
            .field("status_from", status_from)
            .field("upstream_rate_per_sec", upstream_rate_per_sec)
            .field("upstream_rate_burst", upstream_rate_burst)
            .field("job", job)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::Upstream;

    #[test]
    fn the_simulator_url_is_the_default_url_on_the_default_address() {
        assert_eq!(
            simulator_url("127.0.0.1:9001".parse().unwrap()),
            DEFAULT_URL
        );
        assert_eq!(
            simulator_url("127.0.0.1:9002".parse().unwrap()),
            "http://127.0.0.1:9002/api/query?q={key}"
        );
        // Every interface: reached on loopback.
        assert_eq!(
            simulator_url("0.0.0.0:9003".parse().unwrap()),
            "http://127.0.0.1:9003/api/query?q={key}"
        );
        assert_eq!(
            simulator_url("[::]:9004".parse().unwrap()),
            "http://[::1]:9004/api/query?q={key}"
        );
    }

    #[test]
    fn debug_never_shows_secrets() {
        let args = UpstreamArgs {
            api_key: Some("s3cret-key".into()),
            headers: vec![
                "Authorization: Bearer t0ken".into(),
                "Bearer n0colon".into(),
            ],
            ..UpstreamArgs::default()
        };
        let shown = format!("{args:?}");
        assert!(
            !shown.contains("s3cret") && !shown.contains("t0ken") && !shown.contains("n0colon"),
            "{shown}"
        );
        assert!(shown.contains("Authorization"), "{shown}");
        assert!(shown.contains("api_key: Some(***)"), "{shown}");
        let with_body = UpstreamArgs {
            job: super::JobArgs {
                submit_body: Some(r#"{"api_key": "b0dy-secret", "q": "{key}"}"#.into()),
                ..UpstreamArgs::default().job
            },
            ..UpstreamArgs::default()
        };
        let shown = format!("{with_body:?}");
        assert!(!shown.contains("b0dy-secret"), "{shown}");
        let args = UpstreamArgs {
            headers: vec!["Authorization: Bearer t0ken".into()],
            ..args
        };
        let up = Upstream::new(&args).expect("valid");
        let shown = format!("{up:?}");
        assert!(
            !shown.contains("s3cret") && !shown.contains("t0ken"),
            "{shown}"
        );
    }

    #[test]
    fn debug_shows_every_non_secret_setting() {
        // The defaults test in lib.rs compares `Debug` output: each setting must show in it.
        let base = format!("{:?}", UpstreamArgs::default());
        let changed = [
            UpstreamArgs {
                upstream_rate_per_sec: 7,
                ..UpstreamArgs::default()
            },
            UpstreamArgs {
                upstream_rate_burst: 9,
                ..UpstreamArgs::default()
            },
            UpstreamArgs {
                max_body_bytes: 1,
                ..UpstreamArgs::default()
            },
            UpstreamArgs {
                max_result_bytes: 1,
                ..UpstreamArgs::default()
            },
            UpstreamArgs {
                failed_values: list("x"),
                ..UpstreamArgs::default()
            },
            UpstreamArgs {
                api_key_header: "x-other".into(),
                ..UpstreamArgs::default()
            },
        ];
        for args in changed {
            assert_ne!(format!("{args:?}"), base);
        }
    }
}
