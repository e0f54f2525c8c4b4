//! Callbacks: an upstream that can call back ends the wait early.
//!
//! Where the URL template holds `{callback_url}`, each call carries
//! `<base>/api/v1/callbacks/<token>`, and the upstream may `POST` its final answer there; the
//! web process checks the token and completes the task at once (`Queue::complete_by_callback`).
//! Polling goes on as the safety net: a callback that never comes costs nothing but the wait.
//!
//! The token is `<task id>.<created ms>.<expires ms>.<signature>`: HMAC-SHA256 over the first
//! three parts with `REPOLL_CALLBACK_SECRET`, hex. Why each part:
//! - the **signature** makes it unguessable: nobody without the secret can name a task;
//! - **created** names one life of the task: once it completed (or was cancelled) the record
//!   is gone, and a new task for the same query has another creation time, so a replayed
//!   token finds nothing to complete;
//! - **expires** is the task's whole-life deadline (0 when it has none), checked by the queue
//!   against Redis time, so a leaked token is dead when the task would be.

use std::fmt;

use hmac::{Hmac, Mac};
use queue::TaskId;
use sha2::Sha256;

use crate::upstream::{ConfigError, Secret};

/// Shortest secret accepted: 32 bytes, the HMAC-SHA256 key size that makes guessing hopeless.
pub const MIN_SECRET_LEN: usize = 32;

/// Longest token looked at (a task id is 32 characters, a signature 64, two numbers ≤ 20 each).
pub const MAX_TOKEN_LEN: usize = 200;

/// The path callbacks arrive on, below the base URL.
pub const CALLBACK_PATH: &str = "/api/v1/callbacks/";

/// Settings of callbacks (both sides: workers sign, the web process checks). `Default` is
/// "no callbacks", the environment ignored.
#[derive(clap::Args, Clone, Default)]
pub struct CallbackArgs {
    /// Address the upstream reaches this deployment's web process at, e.g.
    /// `https://repoll.example.com`; callback URLs are this plus `/api/v1/callbacks/<token>`.
    /// Needed (with REPOLL_CALLBACK_SECRET) when the URL template holds `{callback_url}`.
    #[arg(long = "callback-base-url", env = "REPOLL_CALLBACK_BASE_URL")]
    pub base_url: Option<String>,
    /// Key that signs callback tokens, from `REPOLL_CALLBACK_SECRET` only (never a flag: a
    /// flag shows in `ps`); at least 32 characters; the same on every process of a deployment.
    #[arg(skip = std::env::var("REPOLL_CALLBACK_SECRET").ok().filter(|k| !k.is_empty()).map(Secret::from))]
    pub secret: Option<Secret>,
}

impl fmt::Debug for CallbackArgs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallbackArgs")
            .field("base_url", &self.base_url)
            .field("secret", &self.secret.as_ref().map(|_| "***"))
            .finish()
    }
}

/// What a valid token names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallbackToken {
    pub id: TaskId,
    pub created_ms: i64,
    /// 0 = the task has no deadline.
    pub expires_ms: i64,
    /// The named upstream whose queue holds the task ("" = the default one).
    pub upstream: String,
}

/// Signs and checks callback tokens. Cheap to clone.
#[derive(Clone)]
pub struct Callbacks {
    key: Secret,
    base_url: Option<String>,
    /// The named upstream the tokens signed here belong to ("" = the default one).
    upstream: String,
}

impl fmt::Debug for Callbacks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Callbacks")
            .field("base_url", &self.base_url)
            .field("upstream", &self.upstream)
            .finish_non_exhaustive()
    }
}

impl Callbacks {
    /// `None` without a secret (callbacks off). A secret shorter than [`MIN_SECRET_LEN`] or a
    /// base URL that is not http(s) is refused, so a misconfiguration stops the start.
    pub fn new(args: &CallbackArgs) -> Result<Option<Callbacks>, ConfigError> {
        let Some(key) = args.secret.clone() else {
            return Ok(None);
        };
        if key.expose().len() < MIN_SECRET_LEN {
            return Err(ConfigError(format!(
                "REPOLL_CALLBACK_SECRET must be at least {MIN_SECRET_LEN} characters"
            )));
        }
        let base_url = match args.base_url.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(b) => {
                let url = reqwest::Url::parse(b)
                    .map_err(|e| ConfigError(format!("bad REPOLL_CALLBACK_BASE_URL: {e}")))?;
                if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
                    return Err(ConfigError(
                        "REPOLL_CALLBACK_BASE_URL must be an http(s) URL with a host".into(),
                    ));
                }
                Some(b.trim_end_matches('/').to_string())
            }
        };
        Ok(Some(Callbacks {
            key,
            base_url,
            upstream: String::new(),
        }))
    }

    /// The same key and base URL, signing tokens of a named upstream's tasks: the name is
    /// part of the signed token, so the receiver knows which upstream's queue (and answer
    /// pointers) a callback is for, and a token of one upstream cannot name another's task.
    pub fn for_upstream(&self, upstream: &str) -> Callbacks {
        let upstream = if upstream == queue::DEFAULT_UPSTREAM {
            ""
        } else {
            upstream
        };
        Callbacks {
            upstream: upstream.to_string(),
            ..self.clone()
        }
    }

    /// Whether workers can build callback URLs (a base URL is set).
    pub fn can_sign_urls(&self) -> bool {
        self.base_url.is_some()
    }

    /// The callback URL of one life of a task, `None` without a base URL.
    pub fn url_for(&self, id: &str, created_ms: i64, expires_ms: i64) -> Option<String> {
        let base = self.base_url.as_deref()?;
        Some(format!(
            "{base}{CALLBACK_PATH}{}",
            self.token(id, created_ms, expires_ms)
        ))
    }

    /// The token of one life of a task.
    pub fn token(&self, id: &str, created_ms: i64, expires_ms: i64) -> String {
        let mut body = format!("{id}.{created_ms}.{expires_ms}");
        if !self.upstream.is_empty() {
            body.push('.');
            body.push_str(&self.upstream);
        }
        let sig = hex::encode(self.mac(&body).finalize().into_bytes());
        format!("{body}.{sig}")
    }

    /// What a token names, if its signature is right (checked in constant time). Whether that
    /// task still lives, and the expiry, are the queue's to check (Redis time).
    pub fn verify(&self, token: &str) -> Option<CallbackToken> {
        if token.len() > MAX_TOKEN_LEN {
            return None;
        }
        let (body, sig) = token.rsplit_once('.')?;
        // One text per token: the signature exactly as `token` writes it (64 lower-case hex
        // digits). Upper-case digits decode to the same MAC, so without this check a token
        // had 2^n spellings (n: its letter digits), each a distinct URL, log line and key.
        if sig.len() != 64 || !sig.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return None;
        }
        let sig = hex::decode(sig).ok()?;
        self.mac(body).verify_slice(&sig).ok()?;
        let mut parts = body.split('.');
        let id = TaskId::parse(parts.next()?).ok()?;
        let created_ms = parts.next()?.parse().ok()?;
        let expires_ms = parts.next()?.parse().ok()?;
        let upstream = match parts.next() {
            None => String::new(),
            Some(u) if queue::is_valid_upstream_name(u) && u != queue::DEFAULT_UPSTREAM => {
                u.to_string()
            }
            Some(_) => return None,
        };
        if parts.next().is_some() {
            return None;
        }
        Some(CallbackToken {
            id,
            created_ms,
            expires_ms,
            upstream,
        })
    }

    fn mac(&self, body: &str) -> Hmac<Sha256> {
        // A domain prefix, so a signature made here can never be one of another use of the key.
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(self.key.expose().as_bytes())
            .expect("HMAC takes a key of any length");
        m.update(b"repoll-callback-v1|");
        m.update(body.as_bytes());
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "0123456789abcdef0123456789abcdef";

    fn cb(secret: &str) -> Callbacks {
        Callbacks::new(&CallbackArgs {
            base_url: Some("http://127.0.0.1:3000/".into()),
            secret: Some(Secret::from(secret)),
        })
        .unwrap()
        .unwrap()
    }

    #[test]
    fn a_token_names_its_task_life_and_nothing_else() {
        let c = cb("k".repeat(32).as_str());
        let t = c.token(ID, 1_700_000_000_000, 1_700_000_600_000);
        let v = c.verify(&t).unwrap();
        assert_eq!(v.id.as_str(), ID);
        assert_eq!(v.created_ms, 1_700_000_000_000);
        assert_eq!(v.expires_ms, 1_700_000_600_000);
        assert_eq!(v.upstream, "");
        // A named upstream's token names it, under the signature: it cannot be moved to the
        // default upstream (or another) by editing the text.
        let r = c.for_upstream("reports");
        let tr = r.token(ID, 1, 2);
        assert!(tr.contains(".reports."), "{tr}");
        assert_eq!(c.verify(&tr).unwrap().upstream, "reports");
        assert!(c.verify(&tr.replace(".reports.", ".search.")).is_none());
        assert!(c.verify(&tr.replace(".reports.", ".")).is_none());
        assert_eq!(c.for_upstream("default").token(ID, 1, 2), c.token(ID, 1, 2));
        assert_eq!(
            c.url_for(ID, 1, 2).unwrap(),
            format!(
                "http://127.0.0.1:3000/api/v1/callbacks/{}",
                c.token(ID, 1, 2)
            )
        );
        // Any change of a part, or another key, breaks the signature.
        let forged = t.replace(".1700000600000.", ".1700009999999.");
        assert!(c.verify(&forged).is_none());
        assert!(cb("x".repeat(32).as_str()).verify(&t).is_none());
        let mut flipped = t.clone();
        let last = flipped.pop().unwrap();
        flipped.push(if last == '0' { '1' } else { '0' });
        assert!(c.verify(&flipped).is_none());
        for junk in [
            "",
            ".",
            "a.b.c.d",
            &"f".repeat(MAX_TOKEN_LEN + 1),
            "zz.1.2.00",
        ] {
            assert!(c.verify(junk).is_none(), "{junk:?}");
        }
    }

    /// The signature is hex outside the MAC: its upper-case spelling decodes to the same
    /// bytes. Only the canonical (lower-case) text of a valid token is accepted.
    #[test]
    fn only_the_canonical_text_of_a_token_is_accepted() {
        let c = cb("k".repeat(32).as_str());
        let t = c.token(ID, 1_700_000_000_000, 0);
        assert!(c.verify(&t).is_some());
        let (body, sig) = t.rsplit_once('.').unwrap();
        assert!(sig.bytes().any(|b| b.is_ascii_alphabetic()), "{sig}");
        for variant in [
            format!("{body}.{}", sig.to_ascii_uppercase()),
            // One digit's case is enough to make another text of the same MAC.
            {
                let i = sig.find(|ch: char| ch.is_ascii_alphabetic()).unwrap();
                let mut s = sig.to_string();
                s.replace_range(i..=i, &sig[i..=i].to_ascii_uppercase());
                format!("{body}.{s}")
            },
        ] {
            assert_eq!(
                hex::decode(variant.rsplit_once('.').unwrap().1).unwrap(),
                hex::decode(sig).unwrap()
            );
            assert!(c.verify(&variant).is_none(), "{variant}");
        }
    }

    #[test]
    fn a_short_secret_or_a_bad_base_url_stops_the_start() {
        let args = |secret: &str, base: Option<&str>| CallbackArgs {
            base_url: base.map(str::to_string),
            secret: Some(Secret::from(secret)),
        };
        assert!(Callbacks::new(&args("short", None)).is_err());
        assert!(Callbacks::new(&args(&"k".repeat(32), Some("ftp://x"))).is_err());
        assert!(Callbacks::new(&args(&"k".repeat(32), Some("not a url"))).is_err());
        assert!(Callbacks::new(&CallbackArgs::default()).unwrap().is_none());
        let c = Callbacks::new(&args(&"k".repeat(32), None))
            .unwrap()
            .unwrap();
        assert!(!c.can_sign_urls() && c.url_for(ID, 1, 2).is_none());
        // The secret never shows.
        let shown = format!("{:?} {:?}", args(&"s".repeat(40), None), c);
        assert!(!shown.contains(&"s".repeat(40)) && !shown.contains(&"k".repeat(32)));
    }
}
