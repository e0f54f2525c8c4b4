//! The upstream client: one HTTP call per poll, answered as [`Answer`] or a typed
//! [`UpstreamError`].
//!
//! Everything about the third-party API is configuration ([`UpstreamArgs`]): the URL template,
//! method, headers, API key, timeout, and how to read the answer (JSON pointers to the status,
//! data and error, and which status values mean processing / done / failed). The defaults fit
//! the simulator (`repoll sim`), so a user points repoll at a real API without code.
//!
//! Two safety rules:
//! - The query never changes the URL's shape. `{key}` may stand in the path or the query
//!   string, never in the host (checked at start). In the path, a query that is a dot segment
//!   (`.`, `..`) is refused — URL parsing would resolve it and send the call, API key included,
//!   to another path — and every built URL is checked against the template's shape.
//! - Secrets are never printed: the API key is a [`Secret`], header values are left out of
//!   `Debug` and of `--help` (`hide_env_values`), and an upstream error message that quotes
//!   them has them masked.

use std::fmt;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use reqwest::{Method, Url};
use serde_json::Value;

/// Default URL template: the simulator on its default address.
pub const DEFAULT_URL: &str = "http://127.0.0.1:9001/api/query?q={key}";

/// The most bytes of an error answer's body read for its message (the rest is not read).
const ERROR_BODY_MAX: usize = 4096;

/// The most chars of an error answer's message kept (it becomes the task's last error).
const ERROR_MESSAGE_MAX: usize = 200;

/// A secret string, such as the API key: `Debug` shows `***`, there is no `Display`, and the
/// value is read only through [`Secret::expose`], so it cannot slip into a log by accident.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The secret itself, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Secret {
        Secret(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Secret {
        Secret(value.to_string())
    }
}

/// How to reach and read the upstream API. Flags, each with a `REPOLL_UPSTREAM_*` variable.
#[derive(clap::Args, Clone)]
pub struct UpstreamArgs {
    /// URL template; `{key}` is replaced by the task's query, percent-encoded. `{key}` may stand
    /// in the path or the query string, not the host. Default: the simulator,
    /// http://127.0.0.1:9001/api/query?q={key}. (Its value is not shown in `--help`: a template
    /// may carry a credential in its query string, and a config file's value is a default.)
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
        default_value = "processing,pending,queued,running"
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
        default_value = "failed,error,cancelled"
    )]
    pub failed_values: Vec<String>,
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
}

/// A queue-wide limit on upstream calls (see [`UpstreamArgs::upstream_rate_per_sec`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimit {
    pub per_sec: u32,
    pub burst: u32,
}

#[cfg(test)]
fn list(s: &str) -> Vec<String> {
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
            status_pointer,
            data_pointer,
            error_pointer,
            processing_values,
            done_values,
            failed_values,
            upstream_rate_per_sec,
            upstream_rate_burst,
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
            .field("status_pointer", status_pointer)
            .field("data_pointer", data_pointer)
            .field("error_pointer", error_pointer)
            .field("processing_values", processing_values)
            .field("done_values", done_values)
            .field("failed_values", failed_values)
            .field("upstream_rate_per_sec", upstream_rate_per_sec)
            .field("upstream_rate_burst", upstream_rate_burst)
            .finish()
    }
}

/// What the upstream said about a key.
#[derive(Clone, Debug, PartialEq)]
pub enum Answer {
    /// Not done yet; `data` is the partial data (may be `null`), `retry_after` the upstream's
    /// own hint from a `Retry-After` header.
    Processing {
        data: Value,
        retry_after: Option<Duration>,
    },
    /// Done; `data` is the final result.
    Done { data: Value },
    /// The upstream gave up on this key: no point polling again.
    Failed { message: String, data: Value },
}

/// Why a poll got no answer.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum UpstreamError {
    #[error("timeout after {after_ms} ms")]
    Timeout { after_ms: u64 },
    #[error("connection failed: {0}")]
    Connect(String),
    /// A non-2xx answer; `message` is the upstream's own (its error pointer, or a short text
    /// body), cut short and with configured secrets masked.
    #[error("HTTP {code}{}", .message.as_ref().map(|m| format!(": {m}")).unwrap_or_default())]
    Status {
        code: u16,
        retry_after: Option<Duration>,
        message: Option<String>,
    },
    #[error("bad body: {0}")]
    BadBody(String),
    /// The query cannot be sent to this upstream at all (e.g. `..` where `{key}` is a path
    /// segment): permanent, the task goes dead with this message.
    #[error("{0}")]
    BadKey(String),
}

impl UpstreamError {
    /// The upstream's `Retry-After`, if it sent one.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            UpstreamError::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// A 4xx other than 408 (timeout), 425 (too early) and 429 (rate limit) says the request
    /// itself is wrong: asking again the same way cannot succeed, so the task goes dead at once.
    /// A query that cannot be placed in the URL is permanent too.
    pub fn is_permanent(&self) -> bool {
        match self {
            UpstreamError::Status { code, .. } => {
                (400..500).contains(code) && !matches!(code, 408 | 425 | 429)
            }
            UpstreamError::BadKey(_) => true,
            _ => false,
        }
    }

    /// A short label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            UpstreamError::Timeout { .. } => "timeout",
            UpstreamError::Connect(_) => "connect",
            UpstreamError::Status { .. } => "status",
            UpstreamError::BadBody(_) => "bad_body",
            UpstreamError::BadKey(_) => "bad_key",
        }
    }
}

/// A setting that cannot work, found when the client is built.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("upstream config: {0}")]
pub struct ConfigError(pub String);

/// How to read an answer body: pure, so it is unit tested without HTTP.
#[derive(Clone, Debug)]
pub struct AnswerReader {
    status_pointer: String,
    data_pointer: String,
    error_pointer: String,
    processing: Vec<String>,
    done: Vec<String>,
    failed: Vec<String>,
}

impl AnswerReader {
    pub fn new(args: &UpstreamArgs) -> AnswerReader {
        let clean = |v: &[String]| -> Vec<String> {
            v.iter()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect()
        };
        AnswerReader {
            status_pointer: args.status_pointer.clone(),
            data_pointer: args.data_pointer.clone(),
            error_pointer: args.error_pointer.clone(),
            processing: clean(&args.processing_values),
            done: clean(&args.done_values),
            failed: clean(&args.failed_values),
        }
    }

    /// Reads a parsed body. A missing or unknown status is a bad body (the API changed or the
    /// pointers are wrong — retrying may help if it was a glitch, the error policy decides).
    pub fn read(
        &self,
        body: &Value,
        retry_after: Option<Duration>,
    ) -> Result<Answer, UpstreamError> {
        let status = match body.pointer(&self.status_pointer) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Null) | None => {
                return Err(UpstreamError::BadBody(format!(
                    "no status at {}",
                    self.status_pointer
                )))
            }
            Some(other) => other.to_string(),
        };
        let data = body
            .pointer(&self.data_pointer)
            .cloned()
            .unwrap_or(Value::Null);
        let is = |set: &[String]| set.iter().any(|v| v.eq_ignore_ascii_case(&status));
        if is(&self.done) {
            Ok(Answer::Done { data })
        } else if is(&self.processing) {
            Ok(Answer::Processing { data, retry_after })
        } else if is(&self.failed) {
            let message = match body.pointer(&self.error_pointer) {
                Some(Value::String(s)) if !s.is_empty() => s.clone(),
                Some(Value::Null) | None => format!("upstream status {status}"),
                Some(other) => other.to_string(),
            };
            Ok(Answer::Failed { message, data })
        } else {
            Err(UpstreamError::BadBody(format!(
                "unknown status {}",
                truncate(&status, 80)
            )))
        }
    }
}

/// The configured upstream client. Cheap to clone (reqwest's client is shared).
#[derive(Clone)]
pub struct Upstream {
    client: reqwest::Client,
    template: Template,
    method: Method,
    headers: HeaderMap,
    timeout: Duration,
    max_body: usize,
    reader: AnswerReader,
    rate: Option<RateLimit>,
}

impl fmt::Debug for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Upstream")
            .field("template", &self.template.raw)
            .field("method", &self.method)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Upstream {
    /// Builds the client, checking every setting once so a poll never fails on configuration.
    pub fn new(args: &UpstreamArgs) -> Result<Upstream, ConfigError> {
        let template = Template::parse(&args.url)?;
        let method = Method::from_bytes(args.method.trim().to_ascii_uppercase().as_bytes())
            .map_err(|_| ConfigError(format!("bad method {:?}", args.method)))?;
        let mut headers = HeaderMap::new();
        for h in args.headers.iter().filter(|h| !h.trim().is_empty()) {
            // No message quotes the line: it may hold a secret (even a misplaced one).
            let (name, value) = h
                .split_once(':')
                .ok_or_else(|| ConfigError("a header must look like \"Name: value\"".into()))?;
            let name = HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| {
                ConfigError("bad header name (a header must look like \"Name: value\")".into())
            })?;
            let mut value = HeaderValue::from_str(value.trim())
                .map_err(|_| ConfigError(format!("bad value for header {name}")))?;
            value.set_sensitive(true);
            headers.append(name, value);
        }
        if let Some(key) = &args.api_key {
            let name = HeaderName::from_bytes(args.api_key_header.trim().as_bytes())
                .map_err(|_| ConfigError("bad API key header name".into()))?;
            let mut value = HeaderValue::from_str(key.expose().trim())
                .map_err(|_| ConfigError("the API key is not a valid header value".into()))?;
            value.set_sensitive(true);
            headers.insert(name, value);
        }
        for p in [
            &args.status_pointer,
            &args.data_pointer,
            &args.error_pointer,
        ] {
            if !p.is_empty() && !p.starts_with('/') {
                return Err(ConfigError(format!(
                    "a JSON pointer starts with '/': {p:?}"
                )));
            }
        }
        if args.timeout_ms == 0 {
            return Err(ConfigError("the request timeout must be > 0".into()));
        }
        let timeout = Duration::from_millis(args.timeout_ms);
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(5)))
            .pool_idle_timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| ConfigError(format!("HTTP client: {e}")))?;
        Ok(Upstream {
            client,
            template,
            method,
            headers,
            timeout,
            max_body: args.max_body_bytes,
            reader: AnswerReader::new(args),
            rate: (args.upstream_rate_per_sec > 0).then(|| RateLimit {
                per_sec: args.upstream_rate_per_sec,
                burst: args.upstream_rate_burst.max(1),
            }),
        })
    }

    /// The queue-wide limit on calls, if one is configured.
    pub fn rate_limit(&self) -> Option<RateLimit> {
        self.rate
    }

    /// The URL for `key`, percent-encoded into the template. Refused (permanently) when the key
    /// would change the URL's shape: a dot segment where `{key}` is in the path, or anything
    /// that leaves the built URL with another origin or other fixed path segments.
    pub fn url_for(&self, key: &str) -> Result<Url, UpstreamError> {
        self.template.url_for(key, None)
    }

    /// How answers are read: a callback's body is read the same way as a poll's.
    pub fn reader(&self) -> &AnswerReader {
        &self.reader
    }

    /// Largest answer body accepted, in bytes (polls and callbacks alike).
    pub fn max_body(&self) -> usize {
        self.max_body
    }

    /// Whether the URL template asks for a callback URL (`{callback_url}`).
    pub fn wants_callback(&self) -> bool {
        self.template.callback
    }

    /// The call for `key` as an operator may see it in a task's history: the method and the
    /// URL without its query string, fragment or user info (where templates carry credentials),
    /// with configured header secrets masked, e.g. `GET http://api.example/v1/jobs/abc`. None
    /// when no URL can be built for the key (the error then says why).
    pub fn shown_call(&self, key: &str) -> Option<String> {
        let mut url = self.url_for(key).ok()?;
        url.set_query(None);
        url.set_fragment(None);
        let _ = url.set_username("");
        let _ = url.set_password(None);
        let mut shown = format!("{} {url}", self.method);
        for secret in self.headers.values().filter_map(|v| v.to_str().ok()) {
            if secret.len() >= 4 {
                shown = shown.replace(secret, "***");
            }
        }
        Some(truncate(&shown, SHOWN_CALL_MAX))
    }

    /// Polls the upstream once for `key`.
    pub async fn query(&self, key: &str) -> Result<Answer, UpstreamError> {
        self.query_with_callback(key, None).await
    }

    /// Polls the upstream once for `key`, offering `callback` where the template asks for it.
    pub async fn query_with_callback(
        &self,
        key: &str,
        callback: Option<&str>,
    ) -> Result<Answer, UpstreamError> {
        let url = self.template.url_for(key, callback)?;
        let resp = self
            .client
            .request(self.method.clone(), url)
            .headers(self.headers.clone())
            .send()
            .await
            .map_err(|e| self.classify(e))?;
        let status = resp.status();
        let retry_after = resp
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_retry_after);
        if !status.is_success() {
            return Err(UpstreamError::Status {
                code: status.as_u16(),
                retry_after,
                message: self.error_message(resp).await,
            });
        }
        let body = self.read_body(resp).await?;
        let value: Value = serde_json::from_slice(&body)
            .map_err(|e| UpstreamError::BadBody(format!("not JSON: {e}")))?;
        self.reader.read(&value, retry_after)
    }

    async fn read_body(&self, mut resp: reqwest::Response) -> Result<Vec<u8>, UpstreamError> {
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| self.classify(e))? {
            if body.len() + chunk.len() > self.max_body {
                return Err(UpstreamError::BadBody(format!(
                    "body larger than {} bytes",
                    self.max_body
                )));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// The message of an error answer: its error pointer if the body is JSON, else a short
    /// plain-text body (not an HTML page). At most [`ERROR_BODY_MAX`] bytes are read, and a
    /// body that fails or stalls just gives no message. Configured secrets are masked, in case
    /// the upstream quotes the request.
    async fn error_message(&self, mut resp: reqwest::Response) -> Option<String> {
        let cap = ERROR_BODY_MAX.min(self.max_body);
        let mut body = Vec::new();
        while body.len() < cap {
            let Ok(Some(chunk)) = resp.chunk().await else {
                break;
            };
            let room = cap - body.len();
            body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        }
        let text = match serde_json::from_slice::<Value>(&body) {
            Ok(v) => match v.pointer(&self.reader.error_pointer) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => return None,
                Some(other) => other.to_string(),
            },
            Err(_) => {
                let text = String::from_utf8_lossy(&body).into_owned();
                if text.trim_start().starts_with('<') {
                    return None;
                }
                text
            }
        };
        let mut text: String = text
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        for secret in self.headers.values().filter_map(|v| v.to_str().ok()) {
            if secret.len() >= 4 {
                text = text.replace(secret, "***");
            }
        }
        let text = text.trim();
        (!text.is_empty()).then(|| truncate(text, ERROR_MESSAGE_MAX))
    }

    fn classify(&self, e: reqwest::Error) -> UpstreamError {
        if e.is_timeout() {
            return UpstreamError::Timeout {
                after_ms: u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX),
            };
        }
        if e.is_decode() {
            return UpstreamError::BadBody(error_chain(&e.without_url()));
        }
        // Connect failures, and connections cut mid-request or mid-body: the URL is left out
        // of the message since a template may carry a credential in its query string.
        UpstreamError::Connect(error_chain(&e.without_url()))
    }
}

/// Longest call shown in a history entry (a long query in the path is cut).
const SHOWN_CALL_MAX: usize = 300;

/// Stands in for `{key}` while the template itself is parsed (lowercase: hosts are lowercased).
const KEY_MARK: &str = "repoll-key-0mark";
/// Stands for `{callback_url}` while the template is parsed.
const CALLBACK_MARK: &str = "repoll-callback-0mark";
/// The callback placeholder (see [`crate::callback`]).
pub const CALLBACK_PLACEHOLDER: &str = "{callback_url}";

/// The URL template, with where `{key}` sits in it.
#[derive(Clone, Debug)]
struct Template {
    raw: String,
    /// `{key}` is (also) in the path, where a dot segment would be resolved.
    in_path: bool,
    /// The template's path segments: `Some(fixed)`, or `None` where `{key}` is part of one.
    segments: Vec<Option<String>>,
    /// Scheme, host and port, which no key may change.
    origin: String,
    /// `{callback_url}` stands in the query string: each call carries its task's callback URL.
    callback: bool,
}

impl Template {
    /// Checks the template: one or more `{key}`, in the path or the query string only.
    fn parse(raw: &str) -> Result<Template, ConfigError> {
        let marks = raw.matches("{key}").count();
        if marks == 0 {
            return Err(ConfigError(format!(
                "the URL template has no {{key}}: {raw}"
            )));
        }
        let callbacks = raw.matches(CALLBACK_PLACEHOLDER).count();
        let url = Url::parse(
            &raw.replace("{key}", KEY_MARK)
                .replace(CALLBACK_PLACEHOLDER, CALLBACK_MARK),
        )
        .map_err(|e| ConfigError(format!("bad URL template: {e}")))?;
        if callbacks > 0 && url.query().map_or(0, |q| q.matches(CALLBACK_MARK).count()) != callbacks
        {
            return Err(ConfigError(
                "{callback_url} may stand in the URL's query string only".into(),
            ));
        }
        let count = |part: Option<&str>| part.map_or(0, |p| p.matches(KEY_MARK).count());
        if count(url.host_str()) + count(Some(url.username())) + count(url.password()) > 0 {
            return Err(ConfigError(
                "{key} may stand in the URL's path or query string, not in its host or user".into(),
            ));
        }
        if count(url.fragment()) > 0 {
            return Err(ConfigError(
                "{key} in the URL's fragment (after '#') is never sent to the server".into(),
            ));
        }
        let in_path = count(Some(url.path()));
        if in_path + count(url.query()) != marks {
            // E.g. `/{key}/..`: parsing the template resolved the key away.
            return Err(ConfigError(format!(
                "a {{key}} is lost when the URL template is parsed: {raw}"
            )));
        }
        let segments = url
            .path_segments()
            .ok_or_else(|| ConfigError(format!("the URL template has no path: {raw}")))?
            .map(|s| (!s.contains(KEY_MARK)).then(|| s.to_string()))
            .collect();
        Ok(Template {
            raw: raw.to_string(),
            in_path: in_path > 0,
            segments,
            origin: url.origin().ascii_serialization(),
            callback: callbacks > 0,
        })
    }

    /// `callback`: the task's callback URL, put where `{callback_url}` stands (percent-encoded;
    /// empty when the task has none).
    fn url_for(&self, key: &str, callback: Option<&str>) -> Result<Url, UpstreamError> {
        // Encodes all but `A-Z a-z 0-9 - _ . ~`: `/ ? # % \` and spaces cannot split anything.
        let encoded = urlencoding::encode(key);
        let refuse = || {
            UpstreamError::BadKey(format!(
                "query '{}' cannot be placed in the URL path",
                truncate(key, 80)
            ))
        };
        if self.in_path && is_dot_segment(&encoded) {
            return Err(refuse());
        }
        let raw = if self.callback {
            self.raw.replace(
                CALLBACK_PLACEHOLDER,
                &urlencoding::encode(callback.unwrap_or("")),
            )
        } else {
            self.raw.clone()
        };
        let url = Url::parse(&raw.replace("{key}", &encoded)).map_err(|e| {
            UpstreamError::BadKey(format!(
                "query '{}' does not make a valid URL: {e}",
                truncate(key, 80)
            ))
        })?;
        // Defence in depth: whatever the encoding did, the URL must have the template's shape.
        if !self.has_shape(&url) {
            return Err(refuse());
        }
        Ok(url)
    }

    /// Same origin, same number of path segments, and the fixed segments unchanged.
    fn has_shape(&self, url: &Url) -> bool {
        let same_path = url.path_segments().is_some_and(|built| {
            let built: Vec<&str> = built.collect();
            built.len() == self.segments.len()
                && built
                    .iter()
                    .zip(&self.segments)
                    .all(|(b, t)| t.as_deref().is_none_or(|fixed| fixed == *b))
        });
        same_path && url.origin().ascii_serialization() == self.origin
    }
}

/// `.` or `..`, also percent-encoded (`%2e`, `.%2E`, ...), which URL parsers resolve.
fn is_dot_segment(segment: &str) -> bool {
    let s = segment.to_ascii_lowercase().replace("%2e", ".");
    s == "." || s == ".."
}

/// `Retry-After` as delay-seconds or as an HTTP date (RFC 9110 allows both; a date in the
/// past means "now"). Anything else is ignored.
pub fn parse_retry_after(v: &str) -> Option<Duration> {
    parse_retry_after_at(v, std::time::SystemTime::now())
}

/// [`parse_retry_after`] against a given clock (for tests). The date is compared with this
/// host's clock: the upstream's clock is all an HTTP date can be measured against.
pub fn parse_retry_after_at(v: &str, now: std::time::SystemTime) -> Option<Duration> {
    let v = v.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(inner) = cur {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        cur = inner.source();
    }
    truncate(&s, 300)
}

fn truncate(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn reader() -> AnswerReader {
        AnswerReader::new(&UpstreamArgs::default())
    }

    #[test]
    fn reads_the_three_answers() {
        let r = reader();
        let ra = Some(Duration::from_secs(2));
        assert_eq!(
            r.read(&json!({"status": "processing", "data": {"k": 1}}), ra),
            Ok(Answer::Processing {
                data: json!({"k": 1}),
                retry_after: ra
            })
        );
        assert_eq!(
            r.read(&json!({"status": "DONE", "data": [1]}), None),
            Ok(Answer::Done { data: json!([1]) })
        );
        assert_eq!(
            r.read(&json!({"status": "failed", "error": "nope"}), None),
            Ok(Answer::Failed {
                message: "nope".into(),
                data: Value::Null
            })
        );
    }

    #[test]
    fn wrong_shapes_are_bad_bodies() {
        let r = reader();
        for body in [
            json!({"result": 1}),
            json!({"status": "weird"}),
            json!([1, 2]),
        ] {
            assert!(
                matches!(r.read(&body, None), Err(UpstreamError::BadBody(_))),
                "{body}"
            );
        }
    }

    #[test]
    fn custom_pointers_and_values() {
        let args = UpstreamArgs {
            status_pointer: "/job/state".into(),
            data_pointer: "".into(),
            processing_values: list("RUNNING"),
            done_values: list("SUCCEEDED"),
            ..UpstreamArgs::default()
        };
        let r = AnswerReader::new(&args);
        let body = json!({"job": {"state": "SUCCEEDED"}, "rows": 3});
        assert_eq!(r.read(&body, None), Ok(Answer::Done { data: body.clone() }));
    }

    #[test]
    fn url_is_encoded_and_config_checked() {
        let up = Upstream::new(&UpstreamArgs {
            url: "http://h/q?key={key}".into(),
            ..UpstreamArgs::default()
        })
        .expect("valid");
        assert_eq!(
            up.url_for("a b&c=d/é").expect("url").as_str(),
            "http://h/q?key=a%20b%26c%3Dd%2F%C3%A9"
        );
        for bad in [
            UpstreamArgs {
                url: "http://h/q".into(),
                ..UpstreamArgs::default()
            },
            UpstreamArgs {
                headers: vec!["no colon".into()],
                ..UpstreamArgs::default()
            },
            UpstreamArgs {
                method: "GE T".into(),
                ..UpstreamArgs::default()
            },
        ] {
            assert!(Upstream::new(&bad).is_err(), "{bad:?}");
        }
    }

    const PATH_TEMPLATE: &str = "https://api.example.com/v2/reports/{key}/status";

    fn upstream(url: &str) -> Upstream {
        Upstream::new(&UpstreamArgs {
            url: url.into(),
            ..UpstreamArgs::default()
        })
        .expect(url)
    }

    #[test]
    fn the_shown_call_has_no_query_string_user_info_or_secret() {
        let up = Upstream::new(&UpstreamArgs {
            url:
                "http://ops:hunter22@api.example:8080/v1/sekr3t-token/jobs/{key}?api_key=abc123&q=1"
                    .into(),
            api_key: Some(Secret::new("sekr3t-token")),
            ..UpstreamArgs::default()
        })
        .unwrap();
        assert_eq!(
            up.shown_call("report 7").as_deref(),
            Some("GET http://api.example:8080/v1/***/jobs/report%207")
        );
        let long = "x".repeat(1000);
        let shown = up.shown_call(&long).unwrap();
        assert!(shown.chars().count() <= SHOWN_CALL_MAX + 1 && shown.ends_with('…'));
        let query_key = upstream("http://api.example/poll?q={key}");
        assert_eq!(
            query_key.shown_call("a&b").as_deref(),
            Some("GET http://api.example/poll")
        );
    }

    #[test]
    fn a_query_in_a_path_segment_cannot_change_the_path() {
        let up = upstream(PATH_TEMPLATE);
        for key in [".", ".."] {
            let err = up.url_for(key).expect_err(key);
            assert_eq!(
                err.to_string(),
                format!("query '{key}' cannot be placed in the URL path")
            );
            assert!(err.is_permanent(), "{err:?}");
            assert_eq!(err.kind(), "bad_key");
        }
        // A percent sign is encoded too, so "%2e" arrives as the three characters, no dot.
        for (key, segment) in [
            ("%2e%2E", "%252e%252E"),
            ("%2e", "%252e"),
            ("a/../b", "a%2F..%2Fb"),
            ("a\\b", "a%5Cb"),
            ("?x", "%3Fx"),
            ("#x", "%23x"),
            ("...", "..."),
            ("a b", "a%20b"),
        ] {
            let url = up.url_for(key).expect(key);
            assert_eq!(url.path(), format!("/v2/reports/{segment}/status"), "{key}");
            assert_eq!((url.query(), url.fragment()), (None, None), "{key}");
            assert_eq!(url.host_str(), Some("api.example.com"));
        }
        // Dot segments in any spelling URL parsers resolve.
        for s in [".", "..", "%2e", "%2E", ".%2e", "%2E.", "%2e%2E"] {
            assert!(is_dot_segment(s), "{s}");
        }
        for s in ["...", "a.", "%252e", ""] {
            assert!(!is_dot_segment(s), "{s}");
        }
    }

    #[test]
    fn a_built_url_must_keep_the_template_shape() {
        let t = Template::parse(PATH_TEMPLATE).expect("valid");
        let ok = Url::parse("https://api.example.com/v2/reports/x%2Fy/status").expect("url");
        assert!(t.has_shape(&ok));
        for bad in [
            "https://api.example.com/v2/status",
            "https://api.example.com/v2/reports/a/b/status",
            "https://api.example.com/v2/other/x/status",
            "https://evil.example.com/v2/reports/x/status",
            "http://api.example.com/v2/reports/x/status",
        ] {
            assert!(!t.has_shape(&Url::parse(bad).expect(bad)), "{bad}");
        }
        // Part of a segment: dots are still refused, the rest stays inside the segment.
        let up = upstream("https://api.example.com/v2/id-{key}.json");
        assert!(up.url_for("..").is_err());
        assert_eq!(up.url_for("a/b").expect("url").path(), "/v2/id-a%2Fb.json");
    }

    #[test]
    fn a_callback_url_goes_into_the_query_string_encoded() {
        let up = upstream("https://api.example.com/v2/reports?q={key}&notify={callback_url}");
        assert!(up.wants_callback());
        let url = up
            .template
            .url_for(
                "a b",
                Some("http://repoll.test/api/v1/callbacks/ab.1.2.ff?x=1&y"),
            )
            .expect("url");
        let pairs: Vec<(String, String)> = url.query_pairs().into_owned().collect();
        assert_eq!(
            pairs,
            [
                ("q".to_string(), "a b".to_string()),
                (
                    "notify".to_string(),
                    "http://repoll.test/api/v1/callbacks/ab.1.2.ff?x=1&y".to_string()
                )
            ]
        );
        // Shown calls never carry it (the query string is cut), and a plain template has none.
        assert!(!up.shown_call("k").unwrap().contains("notify"));
        assert!(!upstream("https://api.example.com/r?q={key}").wants_callback());
        // Anywhere but the query string is refused at start.
        for bad in [
            "https://api.example.com/{callback_url}/r?q={key}",
            "https://api.example.com/r?q={key}#{callback_url}",
        ] {
            let args = UpstreamArgs {
                url: bad.into(),
                ..UpstreamArgs::default()
            };
            assert!(Upstream::new(&args).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_query_in_the_query_string_stays_a_value() {
        let up = upstream("https://api.example.com/v2/reports?query={key}&fmt=json");
        for (key, query) in [
            ("..", "query=..&fmt=json"),
            (".", "query=.&fmt=json"),
            ("#x", "query=%23x&fmt=json"),
            ("a&fmt=xml", "query=a%26fmt%3Dxml&fmt=json"),
            ("a/../b", "query=a%2F..%2Fb&fmt=json"),
        ] {
            let url = up.url_for(key).expect(key);
            assert_eq!(url.path(), "/v2/reports", "{key}");
            assert_eq!(url.query(), Some(query), "{key}");
            assert_eq!(url.fragment(), None, "{key}");
        }
    }

    #[test]
    fn key_in_the_host_user_or_fragment_is_refused_at_start() {
        for url in [
            "https://{key}.example.com/v2/reports",
            "https://{key}/v2",
            "https://{key}@api.example.com/v2",
            "https://api.example.com/v2#{key}",
            "https://api.example.com/v2/{key}/../x",
            "https://api.example.com/v2/reports",
        ] {
            let err = Upstream::new(&UpstreamArgs {
                url: url.into(),
                ..UpstreamArgs::default()
            })
            .expect_err(url);
            assert!(err.0.contains("{key}"), "{url}: {err}");
        }
        // Path and query together are fine.
        let up = upstream("https://api.example.com/v2/{key}?q={key}");
        assert_eq!(
            up.url_for("a/b").expect("url").as_str(),
            "https://api.example.com/v2/a%2Fb?q=a%2Fb"
        );
        assert!(up.url_for("..").is_err());
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

    #[test]
    fn permanent_errors() {
        let s = |code| UpstreamError::Status {
            code,
            retry_after: None,
            message: None,
        };
        assert!(s(404).is_permanent());
        assert!(!s(429).is_permanent());
        assert!(!s(503).is_permanent());
        assert_eq!(parse_retry_after(" 3 "), Some(Duration::from_secs(3)));
        // HTTP dates: the delay until then; a past date is "now"; garbage is ignored.
        let now = httpdate::parse_http_date("Wed, 21 Oct 2015 07:28:00 GMT").unwrap();
        assert_eq!(
            parse_retry_after_at("Wed, 21 Oct 2015 07:28:30 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            parse_retry_after_at("Wed, 21 Oct 2015 07:27:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after_at("soon", now), None);
        assert_eq!(parse_retry_after_at("-5", now), None);
    }
}
