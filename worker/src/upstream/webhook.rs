//! Webhooks from a job API's provider ([`Webhooks`]): how one is proved authentic, where its
//! job is named, and what it may do. The web process receives them
//! (`server/src/api/webhooks.rs`); the queue applies them under its own checks (callback.lua).
//!
//! - **Authentic**: signed the Standard Webhooks way (`webhook-id`, `webhook-timestamp`,
//!   `webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">`, the key being the
//!   base64 bytes after `whsec_`; a space-separated list, any matching `v1` entry accepted,
//!   compared in constant time), or, for providers that let the caller choose a header and its
//!   value (AssemblyAI), that header with the secret as its value.
//! - **Fresh**: a signed timestamp within five minutes of Redis time, either side, and a
//!   `webhook-id` not seen before (the queue remembers it with the change it made, so a replay
//!   changes nothing).
//! - **Which job**: the string at the webhook job pointer; the queue's job index finds its task,
//!   and the task's stored job must be that very job (a refreshed task has another, so an old
//!   job's webhook can never end it).
//! - **What it does**: `result` — the body is the job as a poll would read it, and a final one
//!   ends the task at once (a non-final one changes nothing: polls go on); `notify` — the body
//!   only says "look now" (AssemblyAI, OpenAI), and the task's next poll is made due now.

use std::fmt;

use hmac::{Hmac, Mac};
use reqwest::header::{HeaderMap, HeaderName};
use serde_json::Value;
use sha2::Sha256;

use super::{ConfigError, JobArgs, Secret};

/// How far a signed timestamp may be from Redis time, either side (Standard Webhooks' own
/// recommendation).
pub const TOLERANCE_MS: i64 = 5 * 60 * 1000;
/// How long a `webhook-id` is remembered: past the whole window in which its timestamp is
/// accepted, so a replay is refused as stale or as seen, never taken.
pub const REPLAY_MEMORY_MS: u64 = 2 * TOLERANCE_MS as u64 + 60_000;
/// Longest `webhook-id` taken (providers use ids of a few dozen characters).
pub const MAX_WEBHOOK_ID: usize = 256;
/// Longest `webhook-signature` header read (a rotation lists a few signatures).
const MAX_SIGNATURES_HEADER: usize = 4096;

/// What an authentic webhook does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WebhookMode {
    /// Its body is the job as a poll reads it: a final one ends the task at once.
    Result,
    /// It only says "look now": the task's next poll is made due at once.
    Notify,
}

#[derive(Clone)]
enum Auth {
    /// Standard Webhooks: the HMAC key (the bytes after `whsec_`, base64-decoded).
    Standard(Vec<u8>),
    /// A header the provider sends with the secret as its value.
    Header(HeaderName, Secret),
}

/// A job API's webhooks, checked at start (`REPOLL_UPSTREAM_WEBHOOK_*`).
#[derive(Clone)]
pub struct Webhooks {
    auth: Auth,
    job_pointer: String,
    pub mode: WebhookMode,
    /// How long a job → task entry of the queue's index lives.
    pub index_life_ms: u64,
}

impl fmt::Debug for Webhooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let auth = match &self.auth {
            Auth::Standard(_) => "standard webhooks".to_string(),
            Auth::Header(name, _) => format!("header {name}"),
        };
        f.debug_struct("Webhooks")
            .field("auth", &auth)
            .field("job_pointer", &self.job_pointer)
            .field("mode", &self.mode)
            .field("index_life_ms", &self.index_life_ms)
            .finish()
    }
}

/// What an authentic webhook's headers said.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Delivery {
    /// The `webhook-id` (Standard Webhooks): remembered so a replay changes nothing.
    pub id: Option<String>,
    /// The signed `webhook-timestamp`, in ms since the epoch.
    pub timestamp_ms: Option<i64>,
}

/// Why a webhook was refused: the text is the client error's message (it names no secret).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("missing or malformed {0} header")]
    Header(&'static str),
    #[error("no valid signature")]
    Signature,
}

impl Refused {
    /// The metric's label.
    pub fn label(&self) -> &'static str {
        match self {
            Refused::Header(_) => "malformed",
            Refused::Signature => "forged",
        }
    }
}

impl Webhooks {
    /// The webhooks these settings describe; None without a webhook secret. `poll_body_pointer`
    /// is the poll URL's `body:` pointer, the default job pointer when the job is that URL;
    /// `id_pointer` the job pointer, the default when the job is an id.
    pub(super) fn new(
        args: &JobArgs,
        poll_body_pointer: Option<&str>,
        id_pointer: Option<&str>,
    ) -> Result<Option<Webhooks>, ConfigError> {
        let Some(secret) = args.webhook_secret.as_ref() else {
            return Ok(None);
        };
        let bad = |setting: &str, what: &str| ConfigError(format!("{setting}: {what}"));
        let header = args
            .webhook_header
            .as_deref()
            .map(str::trim)
            .filter(|h| !h.is_empty());
        let auth = match (secret.expose().strip_prefix("whsec_"), header) {
            (_, Some(name)) => Auth::Header(
                HeaderName::from_bytes(name.as_bytes())
                    .map_err(|_| bad("REPOLL_UPSTREAM_WEBHOOK_HEADER", "bad header name"))?,
                secret.clone(),
            ),
            (Some(b64), None) => {
                use base64::Engine as _;
                let key = base64::engine::general_purpose::STANDARD
                    .decode(b64.trim())
                    .ok()
                    .filter(|k| !k.is_empty())
                    .ok_or_else(|| {
                        bad(
                            "REPOLL_UPSTREAM_WEBHOOK_SECRET",
                            "the part after whsec_ is not base64",
                        )
                    })?;
                Auth::Standard(key)
            }
            (None, None) => {
                return Err(bad(
                    "REPOLL_UPSTREAM_WEBHOOK_SECRET",
                    "a Standard Webhooks secret starts with whsec_ (or set \
                     REPOLL_UPSTREAM_WEBHOOK_HEADER for a header-secret webhook)",
                ))
            }
        };
        let job_pointer = match args.webhook_job_pointer.as_deref().map(str::trim) {
            Some(p) if !p.is_empty() => p.to_string(),
            _ => poll_body_pointer
                .or(id_pointer)
                .map(str::to_string)
                .ok_or_else(|| {
                    bad(
                        "REPOLL_UPSTREAM_WEBHOOK_JOB_POINTER",
                        "needed when the poll URL comes from a header",
                    )
                })?,
        };
        if !job_pointer.starts_with('/') {
            return Err(bad(
                "REPOLL_UPSTREAM_WEBHOOK_JOB_POINTER",
                "a JSON pointer starts with '/'",
            ));
        }
        let mode = match args.webhook_mode.trim() {
            "result" => WebhookMode::Result,
            "notify" => WebhookMode::Notify,
            other => {
                return Err(ConfigError(format!(
                    "REPOLL_UPSTREAM_WEBHOOK_MODE: result or notify, not {:?}",
                    super::truncate(other, 40)
                )))
            }
        };
        if args.job_index_life_ms == 0 {
            return Err(bad(
                "REPOLL_UPSTREAM_JOB_INDEX_LIFE_MS",
                "at least 1 (webhooks find their task through the index)",
            ));
        }
        Ok(Some(Webhooks {
            auth,
            job_pointer,
            mode,
            index_life_ms: args.job_index_life_ms,
        }))
    }

    /// Whether `headers` prove `body` came from the provider. Only the headers and the body
    /// are read: freshness against Redis time is [`Webhooks::fresh`].
    pub fn verify(&self, headers: &HeaderMap, body: &[u8]) -> Result<Delivery, Refused> {
        match &self.auth {
            Auth::Header(name, secret) => {
                let given = headers.get(name).ok_or(Refused::Signature)?.as_bytes();
                // The HMAC of both under one throwaway key, compared in constant time: equal
                // exactly when the values are, and no early exit on the first differing byte.
                let mac = |v: &[u8]| {
                    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(b"repoll header secret")
                        .expect("HMAC takes a key of any length");
                    m.update(v);
                    m
                };
                let want = mac(secret.expose().as_bytes()).finalize().into_bytes();
                mac(given)
                    .verify_slice(&want)
                    .map_err(|_| Refused::Signature)?;
                Ok(Delivery::default())
            }
            Auth::Standard(key) => {
                let text = |name: &'static str, max: usize| {
                    headers
                        .get(name)
                        .and_then(|v| v.to_str().ok())
                        .map(str::trim)
                        .filter(|v| !v.is_empty() && v.len() <= max)
                        .ok_or(Refused::Header(name))
                };
                let id = text("webhook-id", MAX_WEBHOOK_ID)?;
                let ts = text("webhook-timestamp", 20)?;
                let seconds: i64 = ts
                    .parse()
                    .map_err(|_| Refused::Header("webhook-timestamp"))?;
                let signatures = text("webhook-signature", MAX_SIGNATURES_HEADER)?;
                let mut signed = Vec::with_capacity(id.len() + ts.len() + body.len() + 2);
                signed.extend_from_slice(format!("{id}.{ts}.").as_bytes());
                signed.extend_from_slice(body);
                let any = signatures.split(' ').any(|entry| {
                    let Some(b64) = entry.strip_prefix("v1,") else {
                        return false; // v1a (asymmetric) and unknown versions: not ours
                    };
                    use base64::Engine as _;
                    let Ok(sig) = base64::engine::general_purpose::STANDARD.decode(b64) else {
                        return false;
                    };
                    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key)
                        .expect("HMAC takes a key of any length");
                    mac.update(&signed);
                    mac.verify_slice(&sig).is_ok()
                });
                if !any {
                    return Err(Refused::Signature);
                }
                Ok(Delivery {
                    id: Some(id.to_string()),
                    timestamp_ms: Some(seconds.saturating_mul(1000)),
                })
            }
        }
    }

    /// Whether the signed timestamp (if any) is within [`TOLERANCE_MS`] of `now_ms` (Redis
    /// time), either side.
    pub fn fresh(delivery: &Delivery, now_ms: i64) -> bool {
        delivery
            .timestamp_ms
            .is_none_or(|t| (now_ms - t).abs() <= TOLERANCE_MS)
    }

    /// The job the webhook's body names (a string or number at the webhook job pointer).
    pub fn job_of(&self, body: &Value) -> Option<String> {
        match body.pointer(&self.job_pointer)? {
            Value::String(s) if !s.is_empty() => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    }
}

#[cfg(test)]
#[path = "webhook_tests.rs"]
mod tests;
