//! Job APIs: an upstream that is asked once ("submit") and then followed by the job it made —
//! Replicate's predictions, Azure's and RFC 9110's `202` + `Operation-Location`, Google's
//! long-running operations. The repeating shape (the same call again until it says done)
//! stays the default; an upstream is of the job kind when it has a submit URL.
//!
//! What this file decides, without HTTP (the client makes the calls, the worker stores the job
//! under the lease's fencing token):
//! - the submit: its URL (a template: `{key}`, `{callback_url}`, `{idempotency_key}`), method
//!   and JSON body (a template whose string values are placeholders, so the body is parsed once
//!   at start and every submit of one job is byte-identical);
//! - the idempotency key: derived from the task, its life (creation time) and a per-deployment
//!   secret, never random, so every submit of one task's one job carries the same key and an
//!   upstream that honours it makes one job however often a killed worker's successor re-sends;
//! - the job's reference, read from the submit's answer: an id at `JOB_POINTER` (for a `{job}`
//!   poll template), or the URL to follow, from a header (`header:Operation-Location`) or the
//!   body (`body:/urls/get`);
//! - the origin guard: a URL taken from an answer is used only on the upstream's own origin
//!   (the submit URL's scheme, host and port) or one listed in `ALLOWED_ORIGINS`; credentials
//!   (the API key, the configured headers) go to the upstream's own origin only.

use std::fmt;

use hmac::{Hmac, Mac};
use reqwest::header::{HeaderMap, HeaderName};
use reqwest::{Method, Url};
use serde_json::Value;
use sha2::Sha256;

use super::{truncate, ConfigError, JobArgs, UpstreamError, Webhooks};

/// The submit's placeholders.
pub const KEY: &str = "{key}";
pub const CALLBACK_URL: &str = "{callback_url}";
pub const IDEMPOTENCY_KEY: &str = "{idempotency_key}";
/// The submit body's structured input: as a whole string value, the query's input object
/// (`model::input`; a plain query goes in as a string); inside a longer string, its text.
pub const INPUT: &str = "{input}";
/// The poll template's placeholder.
pub const JOB: &str = "{job}";

/// Longest job reference kept (an id, or the URL of the job): it is stored in the task record.
pub const MAX_JOB_BYTES: usize = 2048;

/// Where a URL comes from: the poll URL (from the submit's answer) or the result URL (from
/// the final poll's answer).
#[derive(Clone, Debug, PartialEq)]
enum UrlSource {
    /// A template with `{job}` (for the poll URL, the job reference is then the id).
    Template(String),
    /// A header of the answer (for the poll URL, the job reference is then that URL).
    Header(HeaderName),
    /// A URL at a JSON pointer in the answer's body (likewise).
    Body(String),
}

/// A job API, checked at start: every call built from it is one that passed these checks.
#[derive(Clone)]
pub struct JobApi {
    submit_url: String,
    pub(super) submit_method: Method,
    submit_body: Option<Value>,
    /// Headers of the submit only (`REPOLL_UPSTREAM_SUBMIT_HEADERS`), values sensitive.
    pub(super) submit_headers: HeaderMap,
    job_pointer: String,
    poll: UrlSource,
    result: Option<UrlSource>,
    result_pointer: String,
    /// The cancel URL template (with `{job}`) and method.
    cancel: Option<(String, Method)>,
    pub(super) idempotency_header: Option<HeaderName>,
    /// The upstream's own origin (the submit URL's): credentials go there and nowhere else.
    own_origin: String,
    allowed_origins: Vec<String>,
    secret: Vec<u8>,
    webhooks: Option<Webhooks>,
}

impl fmt::Debug for JobApi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobApi")
            .field("submit_method", &self.submit_method)
            .field("poll", &self.poll)
            .field("own_origin", &self.own_origin)
            .finish_non_exhaustive()
    }
}

/// A sample idempotency key: what templates are checked with at start.
const SAMPLE_KEY: &str = "00000000-0000-8000-8000-000000000000";

impl JobApi {
    /// The job API these settings describe; `None` without a submit URL.
    pub fn new(args: &JobArgs) -> Result<Option<JobApi>, ConfigError> {
        let Some(submit_url) = args.submit_url.as_deref().map(str::trim) else {
            return Ok(None);
        };
        let bad = |what: &str| ConfigError(format!("REPOLL_UPSTREAM_SUBMIT_URL: {what}"));
        let sample = fill_url(submit_url, "k", "", SAMPLE_KEY)
            .map_err(|_| bad("not a URL (with its placeholders filled in)"))?;
        if !matches!(sample.scheme(), "http" | "https") {
            return Err(bad("http or https only"));
        }
        let own_origin = sample.origin().ascii_serialization();
        let submit_method = Method::from_bytes(
            args.submit_method.trim().to_ascii_uppercase().as_bytes(),
        )
        .map_err(|_| {
            ConfigError(format!(
                "REPOLL_UPSTREAM_SUBMIT_METHOD: bad method {:?}",
                args.submit_method
            ))
        })?;
        let submit_body =
            match args.submit_body.as_deref().map(str::trim) {
                None | Some("") => None,
                Some(text) => Some(serde_json::from_str::<Value>(text).map_err(|e| {
                    ConfigError(format!("REPOLL_UPSTREAM_SUBMIT_BODY: not JSON: {e}"))
                })?),
            };
        let mut submit_headers = HeaderMap::new();
        super::append_header_lines(
            &mut submit_headers,
            &args.submit_headers,
            "REPOLL_UPSTREAM_SUBMIT_HEADERS",
        )?;
        let job_pointer = args.job_pointer.trim().to_string();
        if !job_pointer.starts_with('/') {
            return Err(ConfigError(format!(
                "REPOLL_UPSTREAM_JOB_POINTER: a JSON pointer starts with '/': {job_pointer:?}"
            )));
        }
        let poll = parse_url_source(args.poll_url.as_deref(), "REPOLL_UPSTREAM_POLL_URL")?;
        let result = match args.result_url.as_deref().map(str::trim) {
            None | Some("") => None,
            raw => Some(parse_url_source(raw, "REPOLL_UPSTREAM_RESULT_URL")?),
        };
        let cancel = match args.cancel_url.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(t) if !t.contains(JOB) => {
                return Err(ConfigError(
                    "REPOLL_UPSTREAM_CANCEL_URL: a template needs {job}".into(),
                ))
            }
            Some(t) => {
                let method =
                    Method::from_bytes(args.cancel_method.trim().to_ascii_uppercase().as_bytes())
                        .map_err(|_| {
                        ConfigError(format!(
                            "REPOLL_UPSTREAM_CANCEL_METHOD: bad method {:?}",
                            args.cancel_method
                        ))
                    })?;
                Some((t.to_string(), method))
            }
        };
        let result_pointer = args
            .result_data_pointer
            .as_deref()
            .unwrap_or("")
            .trim()
            .to_string();
        if !result_pointer.is_empty() && !result_pointer.starts_with('/') {
            return Err(ConfigError(format!(
                "REPOLL_UPSTREAM_RESULT_DATA_POINTER: a JSON pointer starts with '/': {result_pointer:?}"
            )));
        }
        let idempotency_header = match args.idempotency_header.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(name) => Some(HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                ConfigError(format!(
                    "REPOLL_UPSTREAM_IDEMPOTENCY_HEADER: bad header name {name:?}"
                ))
            })?),
        };
        let mut allowed_origins = Vec::new();
        for o in args
            .allowed_origins
            .iter()
            .map(|o| o.trim())
            .filter(|o| !o.is_empty())
        {
            let url = Url::parse(o).ok().filter(|u| {
                matches!(u.scheme(), "http" | "https") && u.path() == "/" && u.query().is_none()
            });
            let url = url.ok_or_else(|| {
                ConfigError(format!(
                    "REPOLL_UPSTREAM_ALLOWED_ORIGINS: {:?} is not an origin (scheme://host[:port])",
                    truncate(o, 100)
                ))
            })?;
            allowed_origins.push(url.origin().ascii_serialization());
        }
        let mut api = JobApi {
            submit_url: submit_url.to_string(),
            submit_method,
            submit_body,
            submit_headers,
            job_pointer,
            poll,
            result,
            result_pointer,
            cancel,
            idempotency_header,
            own_origin,
            allowed_origins,
            secret: args
                .idempotency_secret
                .as_ref()
                .map(|s| s.expose().as_bytes().to_vec())
                .unwrap_or_default(),
            webhooks: None,
        };
        for (source, setting) in [
            (Some(&api.poll), "REPOLL_UPSTREAM_POLL_URL"),
            (api.result.as_ref(), "REPOLL_UPSTREAM_RESULT_URL"),
        ] {
            if let Some(UrlSource::Template(t)) = source {
                let url = fill_job(t, "sample-job")
                    .map_err(|_| ConfigError(format!("{setting}: not a URL")))?;
                if !api.origin_allowed(&url) {
                    return Err(ConfigError(format!(
                        "{setting}: on an origin that is neither the submit URL's nor allowed"
                    )));
                }
            }
        }
        api.webhooks = Webhooks::new(
            args,
            match &api.poll {
                UrlSource::Body(pointer) => Some(pointer),
                _ => None,
            },
            matches!(api.poll, UrlSource::Template(_)).then_some(api.job_pointer.as_str()),
        )?;
        Ok(Some(api))
    }

    /// The provider's webhooks, when a webhook secret is set.
    pub fn webhooks(&self) -> Option<&Webhooks> {
        self.webhooks.as_ref()
    }

    /// Whether the submit URL or body asks for the task's callback URL.
    pub fn wants_callback(&self) -> bool {
        self.submit_url.contains(CALLBACK_URL)
            || self
                .submit_body
                .as_ref()
                .is_some_and(|b| b.to_string().contains(CALLBACK_URL))
    }

    /// The idempotency key of one task's one job: a UUID (version 8, RFC 9562) made from an
    /// HMAC-SHA256 of the queue, the task and its life's creation time. Never random: a
    /// re-sent submit carries the same key; a new life (a refresh, a re-run after a purge) has
    /// another creation time, so another key and another job.
    pub fn idempotency_key(&self, queue: &str, id: &str, created_ms: i64) -> String {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.secret)
            .expect("HMAC takes a key of any length");
        mac.update(format!("repoll-idempotency\n{queue}\n{id}\n{created_ms}").as_bytes());
        let d = mac.finalize().into_bytes();
        let mut b = [0u8; 16];
        b.copy_from_slice(&d[..16]);
        b[6] = (b[6] & 0x0f) | 0x80; // version 8
        b[8] = (b[8] & 0x3f) | 0x80; // variant RFC 9562
        let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
        format!(
            "{}-{}-{}-{}-{}",
            &h[0..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..32]
        )
    }

    /// The submit's URL for `key`.
    pub fn submit_url(&self, key: &str, callback: &str, idem: &str) -> Result<Url, UpstreamError> {
        let url = fill_url(&self.submit_url, key, callback, idem)?;
        // `{key}` is percent-encoded: it cannot move the call elsewhere; checked anyway.
        if url.origin().ascii_serialization() != self.own_origin {
            return Err(UpstreamError::BadKey(format!(
                "query '{}' changes the submit URL's origin",
                truncate(key, 80)
            )));
        }
        Ok(url)
    }

    /// The submit's body for `key` (None: the submit has no body).
    pub fn submit_body(&self, key: &str, callback: &str, idem: &str) -> Option<Vec<u8>> {
        let mut body = self.submit_body.clone()?;
        let input = model::parse_input(key).unwrap_or_else(|| Value::String(key.to_string()));
        fill_whole(&mut body, INPUT, &input);
        fill_value(
            &mut body,
            &[
                (KEY, key),
                (CALLBACK_URL, callback),
                (IDEMPOTENCY_KEY, idem),
                (INPUT, key),
            ],
        );
        Some(body.to_string().into_bytes())
    }

    /// The job's reference in the submit's answer: the id at the job pointer (`{job}` poll
    /// template), or the URL to follow (header or body), resolved against the submit URL and
    /// checked by the origin guard.
    pub fn job_from_answer(
        &self,
        submit: &Url,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<String, UpstreamError> {
        let job = match &self.poll {
            UrlSource::Template(_) => {
                let json = parse_answer(body, "submit")?;
                scalar_at(&json, &self.job_pointer, "submit")?
            }
            source => {
                let url = url_from(source, "", submit, headers, body, "submit")?;
                self.guard(&url)?;
                url.to_string()
            }
        };
        if job.is_empty() || job.len() > MAX_JOB_BYTES {
            return Err(UpstreamError::BadBody(format!(
                "the submit answer's job reference is empty or longer than {MAX_JOB_BYTES} bytes"
            )));
        }
        Ok(job)
    }

    /// The cancel call of `job` (method and URL, through the origin guard); None without a
    /// cancel URL. When the job is a URL (a `header:` / `body:` poll URL), `{job}` is that
    /// URL as it is; otherwise the id goes in as into the poll template.
    pub fn cancel_call(&self, job: &str) -> Result<Option<(Method, Url)>, UpstreamError> {
        let Some((template, method)) = &self.cancel else {
            return Ok(None);
        };
        let url = match (&self.poll, template.strip_prefix(JOB)) {
            (UrlSource::Header(_) | UrlSource::Body(_), Some(rest)) => {
                Url::parse(&format!("{job}{rest}")).map_err(|_| {
                    UpstreamError::BadBody("the job's cancel URL is not a URL".into())
                })?
            }
            _ => fill_job(template, job)?,
        };
        self.guard(&url)?;
        Ok(Some((method.clone(), url)))
    }

    /// Whether a done job's result is fetched from a URL of its own.
    pub fn has_result_url(&self) -> bool {
        self.result.is_some()
    }

    /// The URL of a done job's result, from the final poll's answer (`poll` was its URL) or the
    /// `{job}` template; checked by the origin guard. None without a result URL.
    pub fn result_url(
        &self,
        job: &str,
        poll: &Url,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<Option<Url>, UpstreamError> {
        let Some(source) = &self.result else {
            return Ok(None);
        };
        let url = url_from(source, job, poll, headers, body, "final poll")?;
        self.guard(&url)?;
        Ok(Some(url))
    }

    /// The final data in the result URL's answer (at the result data pointer).
    pub fn result_data(&self, body: &[u8]) -> Result<Value, UpstreamError> {
        let json = parse_answer(body, "result")?;
        if self.result_pointer.is_empty() {
            return Ok(json);
        }
        json.pointer(&self.result_pointer).cloned().ok_or_else(|| {
            UpstreamError::BadBody(format!(
                "the result answer has nothing at {}",
                self.result_pointer
            ))
        })
    }

    /// The URL that follows `job` (a reference [`JobApi::job_from_answer`] made).
    pub fn poll_url(&self, job: &str) -> Result<Url, UpstreamError> {
        let url = match &self.poll {
            UrlSource::Template(t) => fill_job(t, job)?,
            UrlSource::Header(_) | UrlSource::Body(_) => Url::parse(job)
                .map_err(|_| UpstreamError::BadBody("the stored job URL is not a URL".into()))?,
        };
        self.guard(&url)?;
        Ok(url)
    }

    /// The origin guard: `url` is on the upstream's own origin or an allowed one, over http(s),
    /// without user info. Otherwise the call is never made (a permanent error: the task dies
    /// `fatal` with the reason).
    pub fn guard(&self, url: &Url) -> Result<(), UpstreamError> {
        if !url.username().is_empty() || url.password().is_some() {
            return Err(UpstreamError::Redirect(
                "a URL from the upstream's answer carries user info; not followed".into(),
            ));
        }
        if !self.origin_allowed(url) {
            return Err(UpstreamError::Redirect(format!(
                "a URL from the upstream's answer is on another origin ({}); not followed",
                truncate(&url.origin().ascii_serialization(), 120)
            )));
        }
        Ok(())
    }

    fn origin_allowed(&self, url: &Url) -> bool {
        matches!(url.scheme(), "http" | "https") && {
            let o = url.origin().ascii_serialization();
            o == self.own_origin || self.allowed_origins.contains(&o)
        }
    }

    /// Whether a call to `url` carries the API key and configured headers: on the upstream's
    /// own origin only (an allowed origin is someone else's, e.g. storage).
    pub fn sends_credentials(&self, url: &Url) -> bool {
        url.origin().ascii_serialization() == self.own_origin
    }
}

/// A URL taken from an answer (`what` names it in errors): a header's or a body pointer's
/// value resolved against `base`, or the template with `job` put in.
fn url_from(
    source: &UrlSource,
    job: &str,
    base: &Url,
    headers: &HeaderMap,
    body: &[u8],
    what: &str,
) -> Result<Url, UpstreamError> {
    let raw = match source {
        UrlSource::Template(t) => return fill_job(t, job),
        UrlSource::Body(pointer) => scalar_at(&parse_answer(body, what)?, pointer, what)?,
        UrlSource::Header(name) => headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.trim().to_string())
            .ok_or_else(|| {
                UpstreamError::BadBody(format!("the {what} answer has no {name} header"))
            })?,
    };
    base.join(&raw).map_err(|_| {
        UpstreamError::BadBody(format!(
            "the {what} answer's URL is not a URL: {}",
            truncate(&raw, 80)
        ))
    })
}

fn parse_answer(body: &[u8], what: &str) -> Result<Value, UpstreamError> {
    serde_json::from_slice(body)
        .map_err(|e| UpstreamError::BadBody(format!("the {what} answer is not JSON: {e}")))
}

fn parse_url_source(raw: Option<&str>, setting: &str) -> Result<UrlSource, ConfigError> {
    let raw = raw.map(str::trim).unwrap_or("");
    let bad = |what: String| ConfigError(format!("{setting}: {what}"));
    if raw.is_empty() {
        return Err(bad(
            "needed with a submit URL: a template with {job}, header:<Name> or body:<pointer>"
                .into(),
        ));
    }
    if let Some(name) = raw.strip_prefix("header:") {
        return HeaderName::from_bytes(name.trim().as_bytes())
            .map(UrlSource::Header)
            .map_err(|_| bad(format!("bad header name {:?}", name.trim())));
    }
    if let Some(pointer) = raw.strip_prefix("body:") {
        let pointer = pointer.trim();
        if !pointer.starts_with('/') {
            return Err(bad(format!("a JSON pointer starts with '/': {pointer:?}")));
        }
        return Ok(UrlSource::Body(pointer.to_string()));
    }
    if !raw.contains(JOB) {
        return Err(bad(
            "a template needs {job} (or use header:<Name> / body:<pointer>)".into(),
        ));
    }
    Ok(UrlSource::Template(raw.to_string()))
}

/// The submit URL template filled in: `{key}` and `{callback_url}` percent-encoded, the
/// idempotency key (a UUID) as it is.
fn fill_url(template: &str, key: &str, callback: &str, idem: &str) -> Result<Url, UpstreamError> {
    let raw = template
        .replace(CALLBACK_URL, &urlencoding::encode(callback))
        .replace(IDEMPOTENCY_KEY, &urlencoding::encode(idem))
        .replace(KEY, &urlencoding::encode(key));
    Url::parse(&raw).map_err(|e| {
        UpstreamError::BadKey(format!(
            "query '{}' does not make a valid submit URL: {e}",
            truncate(key, 80)
        ))
    })
}

/// The poll template with `job` put in: percent-encoded but for `/` (a Google operation's
/// name is `operations/…`); a dot segment is refused (URL parsing would resolve it).
fn fill_job(template: &str, job: &str) -> Result<Url, UpstreamError> {
    let encoded: Vec<String> = job
        .split('/')
        .map(|s| urlencoding::encode(s).into_owned())
        .collect();
    if encoded
        .iter()
        .any(|s| s == "." || s == ".." || s.is_empty())
    {
        return Err(UpstreamError::BadBody(format!(
            "job reference '{}' cannot be placed in the poll URL",
            truncate(job, 80)
        )));
    }
    Url::parse(&template.replace(JOB, &encoded.join("/")))
        .map_err(|e| UpstreamError::BadBody(format!("the poll URL is not a URL: {e}")))
}

/// Every string value of `v` that is exactly `mark` replaced by `value` (any JSON).
fn fill_whole(v: &mut Value, mark: &str, value: &Value) {
    match v {
        Value::String(s) if s == mark => *v = value.clone(),
        Value::Array(items) => items.iter_mut().for_each(|i| fill_whole(i, mark, value)),
        Value::Object(map) => map.values_mut().for_each(|i| fill_whole(i, mark, value)),
        _ => {}
    }
}

/// Every string in `v` with a placeholder filled: a string that is exactly a placeholder
/// becomes its value; one inside a longer string is inserted as text.
fn fill_value(v: &mut Value, fills: &[(&str, &str)]) {
    match v {
        Value::String(s) => {
            for (mark, value) in fills {
                if s.contains(mark) {
                    *s = s.replace(mark, value);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|i| fill_value(i, fills)),
        Value::Object(map) => map.values_mut().for_each(|i| fill_value(i, fills)),
        _ => {}
    }
}

/// A string or number at `pointer` of the `what` answer, as text.
fn scalar_at(v: &Value, pointer: &str, what: &str) -> Result<String, UpstreamError> {
    match v.pointer(pointer) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Number(n)) => Ok(n.to_string()),
        _ => Err(UpstreamError::BadBody(format!(
            "the {what} answer has nothing at {pointer}"
        ))),
    }
}

#[cfg(test)]
#[cfg(test)]
#[path = "job_tests.rs"]
mod tests;
