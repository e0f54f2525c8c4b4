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
//!
//! One file per job: `secret` (the key), `args` (the settings), `answer` (what an
//! answer means, read without HTTP), `template` (the URL and its shape check), `job` (a job
//! API's submit, job reference, poll and result URLs, origin guard), `job_args` (its
//! settings), `webhook` (a provider's webhooks: proof, job, effect),
//! `client` (the HTTP calls), `retry_after` (the header).

mod answer;
mod args;
mod client;
mod job;
mod job_args;
mod retry_after;
mod secret;
mod template;
mod webhook;

pub use answer::{Answer, AnswerReader, ConfigError, UpstreamError};
pub use args::{simulator_url, RateLimit, StatusFallback, StatusFrom, UpstreamArgs, DEFAULT_URL};
pub use client::Upstream;
pub use job::JobApi;
pub use job_args::JobArgs;
pub use retry_after::{parse_retry_after, parse_retry_after_at};
pub use secret::Secret;
pub use template::CALLBACK_PLACEHOLDER;
pub use webhook::{
    Delivery, Refused, WebhookMode, Webhooks, REPLAY_MEMORY_MS as WEBHOOK_REPLAY_MEMORY_MS,
};

/// The most chars of an upstream's own message kept: an error answer's body, or a "failed"
/// answer's message. It becomes the task's last error (stored in its record and history, shown
/// on the dashboard), so however long the upstream makes it, this much is kept.
const MESSAGE_MAX: usize = 200;

/// `s` cut to `max` chars with an ellipsis (messages, keys and statuses quoted in errors).
fn truncate(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// Appends `lines` ("Name: value", blank ones skipped) to `headers`, each value marked
/// sensitive; `setting` names where they came from in an error. No message quotes a line: it
/// may hold a secret (even a misplaced one).
fn append_header_lines(
    headers: &mut reqwest::header::HeaderMap,
    lines: &[String],
    setting: &str,
) -> Result<(), ConfigError> {
    use reqwest::header::{HeaderName, HeaderValue};
    for h in lines.iter().filter(|h| !h.trim().is_empty()) {
        let (name, value) = h.split_once(':').ok_or_else(|| {
            ConfigError(format!(
                "{setting}: a header must look like \"Name: value\""
            ))
        })?;
        let name = HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| {
            ConfigError(format!(
                "{setting}: bad header name (a header must look like \"Name: value\")"
            ))
        })?;
        let mut value = HeaderValue::from_str(value.trim())
            .map_err(|_| ConfigError(format!("{setting}: bad value for header {name}")))?;
        value.set_sensitive(true);
        headers.append(name, value);
    }
    Ok(())
}
