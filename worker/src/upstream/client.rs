//! The HTTP client ([`Upstream`]): one call per poll, with the configured method, headers
//! and key, a capped body, and errors that never quote a secret.

use std::fmt;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use reqwest::{Method, Url};
use serde_json::Value;

use tracing::Instrument;

use super::job::JobApi;
use super::template::Template;
use super::truncate;
use super::{
    parse_retry_after, Answer, AnswerReader, ConfigError, RateLimit, UpstreamArgs, UpstreamError,
};
use crate::trace_spans;

/// The most bytes of an error answer's body read for its message (the rest is not read).
const ERROR_BODY_MAX: usize = 4096;

/// The configured upstream client. Cheap to clone (reqwest's client is shared).
#[derive(Clone)]
pub struct Upstream {
    client: reqwest::Client,
    pub(super) template: Template,
    method: Method,
    headers: HeaderMap,
    timeout: Duration,
    max_body: usize,
    max_result: usize,
    reader: AnswerReader,
    rate: Option<RateLimit>,
    /// A job API's settings; `None` for the repeating kind.
    job: Option<JobApi>,
    /// The `upstream` label of its call metrics ([`Upstream::labelled`]).
    label: String,
}

/// What a call to the upstream is for (the `call` label of `repoll_upstream_calls_total`).
#[derive(Clone, Copy, Debug)]
enum Call {
    /// A job API's submit.
    Submit,
    /// A poll: the repeating call, or a job's.
    Poll,
    /// A done job's result, fetched from its own URL.
    Result,
    /// A job's cancel.
    Cancel,
}

impl Call {
    fn as_str(self) -> &'static str {
        match self {
            Call::Submit => "submit",
            Call::Poll => "poll",
            Call::Result => "result",
            Call::Cancel => "cancel",
        }
    }
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
        let job = JobApi::new(&args.job)?;
        if job.is_some() && args.url != super::DEFAULT_URL {
            return Err(ConfigError(
                "REPOLL_UPSTREAM_URL and REPOLL_UPSTREAM_SUBMIT_URL are both set: an upstream is \
                 polled at one URL (the repeating kind) or submitted to (a job API), not both"
                    .into(),
            ));
        }
        let method = Method::from_bytes(args.method.trim().to_ascii_uppercase().as_bytes())
            .map_err(|_| ConfigError(format!("bad method {:?}", args.method)))?;
        let mut headers = HeaderMap::new();
        super::append_header_lines(&mut headers, &args.headers, "REPOLL_UPSTREAM_HEADERS")?;
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
        if args.max_result_bytes == 0 {
            return Err(ConfigError(
                "the largest result stored (max_result_bytes) must be > 0".into(),
            ));
        }
        let timeout = Duration::from_millis(args.timeout_ms);
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(5)))
            .pool_idle_timeout(Duration::from_secs(30))
            .redirect(same_origin_redirects())
            .build()
            .map_err(|e| ConfigError(format!("HTTP client: {e}")))?;
        Ok(Upstream {
            client,
            template,
            method,
            headers,
            timeout,
            max_body: args.max_body_bytes,
            max_result: args.max_result_bytes,
            reader: AnswerReader::new(args),
            rate: (args.upstream_rate_per_sec > 0).then(|| RateLimit {
                per_sec: args.upstream_rate_per_sec,
                burst: args.upstream_rate_burst.max(1),
            }),
            job,
            label: "default".into(),
        })
    }

    /// This client with its call metrics labelled `upstream="<label>"` (the worker's label).
    pub fn labelled(mut self, label: &str) -> Upstream {
        self.label = label.to_string();
        self
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

    /// Largest data stored per task, in bytes (`REPOLL_UPSTREAM_MAX_RESULT`): a final result
    /// larger ends the task dead, a larger partial is not stored.
    pub fn max_result(&self) -> usize {
        self.max_result
    }

    /// Whether the URL template asks for a callback URL (`{callback_url}`).
    pub fn wants_callback(&self) -> bool {
        match &self.job {
            Some(job) => job.wants_callback(),
            None => self.template.callback,
        }
    }

    /// The call for `key` as an operator may see it in a task's history: the method and the
    /// URL without its query string, fragment or user info (where templates carry credentials),
    /// with configured header secrets masked, e.g. `GET http://api.example/v1/jobs/abc`. None
    /// when no URL can be built for the key (the error then says why).
    pub fn shown_call(&self, key: &str) -> Option<String> {
        self.shown_task_call(key, None)
    }

    /// [`Upstream::shown_call`] of a task's next call: for a job API, its submit (no `job`
    /// yet) or the poll of its `job`.
    pub fn shown_task_call(&self, key: &str, job: Option<&str>) -> Option<String> {
        match (&self.job, job) {
            (None, _) => Some(self.shown_url(&self.method, &self.url_for(key).ok()?)),
            (Some(api), None) => {
                let url = api.submit_url(key, "", "").ok()?;
                Some(self.shown_url(&api.submit_method, &url))
            }
            (Some(api), Some(job)) => Some(self.shown_url(&Method::GET, &api.poll_url(job).ok()?)),
        }
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
        let shown = self.shown_call(key).unwrap_or_default();
        let (status, _, retry_after, body) = self
            .send(Call::Poll, self.method.clone(), url, None, &shown, true)
            .await?;
        self.reader.read_answer(status, &body, retry_after)
    }

    /// Whether this upstream is a job API (it has a submit URL).
    pub fn is_job_api(&self) -> bool {
        self.job.is_some()
    }

    /// The provider's webhooks, when this upstream is a job API with a webhook secret.
    pub fn webhooks(&self) -> Option<&super::Webhooks> {
        self.job.as_ref().and_then(JobApi::webhooks)
    }

    /// The job API's settings, if this upstream is one.
    pub fn job_api(&self) -> Option<&JobApi> {
        self.job.as_ref()
    }

    /// Submits `key`'s job: the submit URL and body, the idempotency key `idem` in its header
    /// when one is configured. Answers [`Answer::Submitted`] with the job's reference.
    pub async fn submit(
        &self,
        key: &str,
        callback: Option<&str>,
        idem: &str,
    ) -> Result<Answer, UpstreamError> {
        let Some(job) = &self.job else {
            return Err(UpstreamError::BadKey(
                "this upstream takes no submit".into(),
            ));
        };
        let callback = callback.unwrap_or("");
        let url = job.submit_url(key, callback, idem)?;
        let shown = self.shown_url(&job.submit_method, &url);
        let mut extra = job.submit_headers.clone();
        if let Some(name) = &job.idempotency_header {
            if let Ok(v) = HeaderValue::from_str(idem) {
                extra.insert(name.clone(), v);
            }
        }
        let body = job.submit_body(key, callback, idem);
        let (_, headers, retry_after, answer) = self
            .send(
                Call::Submit,
                job.submit_method.clone(),
                url.clone(),
                Some((body, extra)),
                &shown,
                true,
            )
            .await?;
        let reference = job.job_from_answer(&url, &headers, &answer)?;
        Ok(Answer::Submitted {
            job: reference,
            retry_after,
        })
    }

    /// Polls a job (a reference [`Upstream::submit`] returned): a `GET` of its poll URL,
    /// checked by the origin guard, with credentials only on the upstream's own origin.
    pub async fn poll_job(&self, reference: &str) -> Result<Answer, UpstreamError> {
        let Some(job) = &self.job else {
            return Err(UpstreamError::BadKey("this upstream has no jobs".into()));
        };
        let url = job.poll_url(reference)?;
        let shown = self.shown_url(&Method::GET, &url);
        let credentials = job.sends_credentials(&url);
        let (status, headers, retry_after, body) = self
            .send(
                Call::Poll,
                Method::GET,
                url.clone(),
                None,
                &shown,
                credentials,
            )
            .await?;
        let answer = self.reader.read_answer(status, &body, retry_after)?;
        if !matches!(answer, Answer::Done { .. }) || !job.has_result_url() {
            return Ok(answer);
        }
        // Done, and the result lives elsewhere: one GET there is the final data. A failed
        // fetch is an error of this poll (retried: the next poll finds the job done again).
        let Some(result) = job.result_url(reference, &url, &headers, &body)? else {
            return Ok(answer);
        };
        let shown = self.shown_url(&Method::GET, &result);
        let credentials = job.sends_credentials(&result);
        let (_, _, _, body) = self
            .send(Call::Result, Method::GET, result, None, &shown, credentials)
            .await?;
        Ok(Answer::Done {
            data: job.result_data(&body)?,
        })
    }

    /// Cancels a job (a reference [`Upstream::submit`] returned) at the cancel URL; the answer's
    /// HTTP status. `Ok(None)`: no cancel URL is configured.
    pub async fn cancel_job(&self, reference: &str) -> Result<Option<u16>, UpstreamError> {
        let Some(job) = &self.job else {
            return Ok(None);
        };
        let Some((method, url)) = job.cancel_call(reference)? else {
            return Ok(None);
        };
        let shown = self.shown_url(&method, &url);
        let credentials = job.sends_credentials(&url);
        let (status, ..) = self
            .send(
                Call::Cancel,
                method,
                url,
                Some((None, HeaderMap::new())),
                &shown,
                credentials,
            )
            .await?;
        Ok(Some(status))
    }

    /// A call shown as a task's history shows it: no query string, fragment or user info,
    /// configured secrets masked.
    fn shown_url(&self, method: &Method, url: &Url) -> String {
        let mut url = url.clone();
        url.set_query(None);
        url.set_fragment(None);
        let _ = url.set_username("");
        let _ = url.set_password(None);
        self.masked(format!("{method} {url}"))
    }

    fn masked(&self, mut shown: String) -> String {
        for secret in self.headers.values().filter_map(|v| v.to_str().ok()) {
            if secret.len() >= 4 {
                shown = shown.replace(secret, "***");
            }
        }
        truncate(&shown, SHOWN_CALL_MAX)
    }

    /// One HTTP call: the configured headers (with `credentials`) and the extra ones, a CLIENT
    /// span named by `shown`, a non-2xx answer as [`UpstreamError::Status`], the body capped,
    /// counted in `repoll_upstream_calls_total{call, outcome}`. Returns the status code, the
    /// headers, the `Retry-After` and the body.
    async fn send(
        &self,
        call: Call,
        method: Method,
        url: Url,
        body: Option<(Option<Vec<u8>>, HeaderMap)>,
        shown: &str,
        credentials: bool,
    ) -> Result<(u16, HeaderMap, Option<Duration>, Vec<u8>), UpstreamError> {
        let r = self
            .send_uncounted(method, url, body, shown, credentials)
            .await;
        let outcome = match &r {
            Ok(_) => "ok",
            Err(e) => e.kind(),
        };
        metrics::counter!(crate::telemetry::UPSTREAM_CALLS, "upstream" => self.label.clone(),
            "call" => call.as_str(), "outcome" => outcome)
        .increment(1);
        r
    }

    async fn send_uncounted(
        &self,
        method: Method,
        url: Url,
        body: Option<(Option<Vec<u8>>, HeaderMap)>,
        shown: &str,
        credentials: bool,
    ) -> Result<(u16, HeaderMap, Option<Duration>, Vec<u8>), UpstreamError> {
        // The CLIENT span names the call as the task's history shows it (no query string, no
        // credentials), and the upstream gets its context so its own traces join ours.
        let span = if trace_spans::enabled() {
            let url = shown.split_once(' ').map_or("", |(_, url)| url);
            trace_spans::client_span(method.as_str(), url)
        } else {
            tracing::Span::none()
        };
        let mut request = self.client.request(method, url);
        if credentials {
            request = request.headers(self.headers.clone());
        }
        if let Some((payload, extra)) = body {
            request = request.headers(extra);
            if let Some(payload) = payload {
                request = request
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(payload);
            }
        }
        if let Some(tp) = trace_spans::traceparent_of(&span) {
            request = request.header("traceparent", tp);
        }
        let resp = request.send().instrument(span.clone()).await.map_err(|e| {
            trace_spans::mark_error(&span);
            self.classify(e)
        })?;
        let status = resp.status();
        span.record("http.response.status_code", status.as_u16());
        if !status.is_success() {
            trace_spans::mark_error(&span);
        }
        let retry_after = resp
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_retry_after);
        if !status.is_success() {
            let body = self.error_body(resp).await;
            return Err(UpstreamError::Status {
                code: status.as_u16(),
                retry_after,
                message: self.error_message(&body),
                body: self.reader.body_start(&body),
            });
        }
        let headers = resp.headers().clone();
        let body = self.read_body(resp).await?;
        Ok((status.as_u16(), headers, retry_after, body))
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

    /// The start of an error answer's body: at most [`ERROR_BODY_MAX`] bytes are read, and a
    /// body that fails or stalls gives what came before.
    async fn error_body(&self, mut resp: reqwest::Response) -> Vec<u8> {
        let cap = ERROR_BODY_MAX.min(self.max_body);
        let mut body = Vec::new();
        while body.len() < cap {
            let Ok(Some(chunk)) = resp.chunk().await else {
                break;
            };
            let room = cap - body.len();
            body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        }
        body
    }

    /// The message of an error answer: its error pointer if the body is JSON, else a short
    /// plain-text body (not an HTML page). Kept as a "failed" answer's message is
    /// ([`AnswerReader::message`]: cut short, configured secrets masked).
    fn error_message(&self, body: &[u8]) -> Option<String> {
        let text = match serde_json::from_slice::<Value>(body) {
            Ok(v) => match v.pointer(&self.reader.error_pointer) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => return None,
                Some(other) => other.to_string(),
            },
            Err(_) => {
                let text = String::from_utf8_lossy(body).into_owned();
                if text.trim_start().starts_with('<') {
                    return None;
                }
                text
            }
        };
        self.reader.message(&text)
    }

    fn classify(&self, e: reqwest::Error) -> UpstreamError {
        if e.is_timeout() {
            return UpstreamError::Timeout {
                after_ms: u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX),
            };
        }
        if e.is_redirect() {
            // The policy's own reason (same_origin_redirects); the URL stays out of it.
            let mut reason = e.to_string();
            let mut cur = std::error::Error::source(&e);
            while let Some(inner) = cur {
                reason = inner.to_string();
                cur = inner.source();
            }
            return UpstreamError::Redirect(truncate(&reason, 300));
        }
        if e.is_decode() {
            return UpstreamError::BadBody(error_chain(&e.without_url()));
        }
        // Connect failures, and connections cut mid-request or mid-body: the URL is left out
        // of the message since a template may carry a credential in its query string.
        UpstreamError::Connect(error_chain(&e.without_url()))
    }
}

/// Redirects followed for one call, at most (each on the upstream's own origin).
const MAX_REDIRECTS: usize = 5;

/// The client follows a redirect only on the origin of the call it made (scheme, host and
/// port; a relative `Location` is resolved first) and without user info in the target: the
/// configured API key and headers go to the upstream and nowhere else, and an answer cannot
/// turn a worker into a client of another host (an internal address, say). reqwest's default
/// would follow ten hops anywhere, stripping only `Authorization` and `Cookie` on the way.
/// Any other redirect fails the call with the reason (UpstreamError::Redirect).
fn same_origin_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let Some(first) = attempt.previous().first() else {
            return attempt.error("redirect without a first request");
        };
        let (from, to) = (first.origin(), attempt.url().origin());
        if attempt.previous().len() > MAX_REDIRECTS {
            attempt.error(format!(
                "the upstream redirected more than {MAX_REDIRECTS} times; not followed"
            ))
        } else if to != from {
            let shown = to.ascii_serialization();
            attempt.error(format!(
                "the upstream redirected to another origin ({}); not followed",
                truncate(&shown, 120)
            ))
        } else if !attempt.url().username().is_empty() || attempt.url().password().is_some() {
            attempt.error("the upstream redirected to a URL with user info; not followed")
        } else {
            attempt.follow()
        }
    })
}

/// Longest call shown in a history entry (a long query in the path is cut).
pub(super) const SHOWN_CALL_MAX: usize = 300;

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
