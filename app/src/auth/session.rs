//! Sessions: a random 256-bit id in the `repoll_session` cookie, the session itself in Redis.
//!
//! Redis stores only sha256(id) as the key, so reading Redis (a backup, `MONITOR`, a replica)
//! does not yield a usable cookie. The queue's session store keeps it under the queue's hash
//! tag, next to the data it guards, with the session's time to live; signing out deletes it.
//!
//! A session ends with the credential it was made with: it keeps a fingerprint of that
//! credential (`Credential::fingerprint`), and a lookup that finds another one configured now
//! for its role — the password changed, or the role has no password any more — finds no
//! session. The record stays until its time to live runs out rather than being deleted: while
//! processes with the old and the new settings run side by side (a rolling restart), each
//! refuses the other's sessions without destroying them. "Sign out every session" deletes them
//! all ([`Sessions::end_all`]).

use argon2::password_hash::rand_core::{OsRng, RngCore};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{AuthConfig, Role};

/// Name of the session cookie.
pub const COOKIE: &str = "repoll_session";

/// What a session records.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    pub user: String,
    pub role: Role,
    pub created_ms: i64,
    /// The fingerprint of the credential the session was made with (empty in a record written
    /// before sessions kept one: such a session is no longer valid).
    #[serde(default)]
    pub credential: String,
}

/// The sessions of one queue under the credentials configured now: cookie ids in, the queue's
/// session store (keyed by digest) behind.
pub struct Sessions {
    store: queue::Sessions,
    auth: AuthConfig,
}

/// The store's key for a cookie id: its sha256, never the id itself.
fn digest(id: &str) -> String {
    hex::encode(Sha256::digest(id.as_bytes()))
}

impl Sessions {
    /// The sessions of the app's queue, checked against its configured credentials.
    pub fn of(ctx: &crate::context::AppContext) -> Sessions {
        Sessions {
            store: ctx.queue.sessions(),
            auth: ctx.admin.clone(),
        }
    }

    /// Stores a new session for `role` (made with the credential configured for it now), for
    /// the configured session lifetime, and returns its id (64 hex chars) for the cookie.
    pub async fn create(&self, role: Role, created_ms: i64) -> queue::Result<String> {
        let mut bytes = [0u8; 32];
        OsRng.fill_bytes(&mut bytes);
        let id = hex::encode(bytes);
        let session = Session {
            user: role.as_str().into(),
            role,
            created_ms,
            // A role without a credential has no fingerprint: the session would never be
            // valid (nobody can have signed in as it; this only keeps `create` total).
            credential: self.auth.fingerprint(role).unwrap_or_default(),
        };
        let ttl_s = self.auth.settings().session_ttl_s;
        self.store.put(&digest(&id), &session, ttl_s).await?;
        Ok(id)
    }

    /// The session of `id`, if it exists, has not expired and was made with the credential its
    /// role has now. A record that does not parse counts as no session.
    pub async fn get(&self, id: &str) -> queue::Result<Option<Session>> {
        if !valid_id(id) {
            return Ok(None);
        }
        let found: Option<Session> = self.store.get(&digest(id)).await?;
        Ok(found.filter(|s| self.made_with_current_credential(s)))
    }

    fn made_with_current_credential(&self, s: &Session) -> bool {
        self.auth
            .fingerprint(s.role)
            .is_some_and(|now| constant_time_eq(now.as_bytes(), s.credential.as_bytes()))
    }

    pub async fn delete(&self, id: &str) -> queue::Result<()> {
        if !valid_id(id) {
            return Ok(());
        }
        self.store.delete(&digest(id)).await
    }

    /// Ends every session ("sign out every session"); returns how many were live.
    pub async fn end_all(&self) -> queue::Result<u64> {
        self.store.delete_all().await
    }
}

/// Equal without an early exit (the length may show; both are 64 hex chars when set).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Only ids we could have issued are looked up (bounded key size, no odd bytes in keys).
fn valid_id(id: &str) -> bool {
    id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The session id in the request's `Cookie` headers, if any.
pub fn cookie_id(headers: &http::HeaderMap) -> Option<String> {
    cookie_value(headers, COOKIE).filter(|v| valid_id(v))
}

/// The value of cookie `name` in the request's `Cookie` headers (the first one sent).
pub fn cookie_value(headers: &http::HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, value)| value.trim().to_string())
}

/// The `Set-Cookie` value that hands out a session: never readable by scripts, never sent on
/// cross-site requests, `Secure` over https.
pub fn set_cookie(id: &str, ttl_s: u64, secure: bool) -> String {
    format!(
        "{COOKIE}={id}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{}",
        ttl_s.max(60),
        if secure { "; Secure" } else { "" }
    )
}

/// The `Set-Cookie` value that removes the cookie.
pub fn clear_cookie(secure: bool) -> String {
    format!(
        "{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{}",
        if secure { "; Secure" } else { "" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_cookie_among_others() {
        let id = "a".repeat(64);
        let mut h = http::HeaderMap::new();
        h.append(http::header::COOKIE, "x=1; other=2".parse().unwrap());
        h.append(
            http::header::COOKIE,
            format!("y=3; {COOKIE}={id}").parse().unwrap(),
        );
        assert_eq!(cookie_id(&h), Some(id));
        let mut bad = http::HeaderMap::new();
        bad.append(
            http::header::COOKIE,
            format!("{COOKIE}=short").parse().unwrap(),
        );
        assert_eq!(cookie_id(&bad), None);
    }

    #[test]
    fn cookie_attributes() {
        let c = set_cookie("ab", 3600, true);
        assert!(c.contains("HttpOnly") && c.contains("SameSite=Strict") && c.contains("Secure"));
        assert!(!set_cookie("ab", 3600, false).contains("Secure"));
        assert!(clear_cookie(false).contains("Max-Age=0"));
    }
}
