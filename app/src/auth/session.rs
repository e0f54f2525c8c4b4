//! Sessions: a random 256-bit id in the `repoll_session` cookie, the session itself in Redis.
//!
//! Redis stores only sha256(id) as the key, so reading Redis (a backup, `MONITOR`, a replica)
//! does not yield a usable cookie. The key lives under the queue's hash tag, next to the data
//! it guards, with the session's time to live; signing out deletes it.

use argon2::password_hash::rand_core::{OsRng, RngCore};
use queue::redis::{self, AsyncCommands};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::Role;

/// Name of the session cookie.
pub const COOKIE: &str = "repoll_session";

/// What a session records.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    pub user: String,
    pub role: Role,
    pub created_ms: i64,
}

/// The session store of one queue.
pub struct Sessions {
    conn: queue::RedisConn,
    prefix: String,
}

impl Sessions {
    pub fn of(queue: &queue::Queue) -> Sessions {
        Sessions {
            conn: queue.connection(),
            prefix: format!("{{{}}}:session:", queue.config().name),
        }
    }

    fn key(&self, id: &str) -> String {
        format!(
            "{}{}",
            self.prefix,
            hex::encode(Sha256::digest(id.as_bytes()))
        )
    }

    /// Stores a new session and returns its id (64 hex chars) for the cookie.
    pub async fn create(&self, session: &Session, ttl_s: u64) -> redis::RedisResult<String> {
        let mut bytes = [0u8; 32];
        OsRng.fill_bytes(&mut bytes);
        let id = hex::encode(bytes);
        let body = serde_json::to_string(session).unwrap_or_default();
        let mut c = self.conn.clone();
        let _: () = c.set_ex(self.key(&id), body, ttl_s.max(60)).await?;
        Ok(id)
    }

    /// The session of `id`, if it exists and has not expired. A record that does not parse
    /// counts as no session.
    pub async fn get(&self, id: &str) -> redis::RedisResult<Option<Session>> {
        if !valid_id(id) {
            return Ok(None);
        }
        let mut c = self.conn.clone();
        let body: Option<String> = c.get(self.key(id)).await?;
        Ok(body.and_then(|b| serde_json::from_str(&b).ok()))
    }

    pub async fn delete(&self, id: &str) -> redis::RedisResult<()> {
        if !valid_id(id) {
            return Ok(());
        }
        let mut c = self.conn.clone();
        c.del(self.key(id)).await
    }
}

/// Only ids we could have issued are looked up (bounded key size, no odd bytes in keys).
fn valid_id(id: &str) -> bool {
    id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The session id in the request's `Cookie` headers, if any.
pub fn cookie_id(headers: &http::HeaderMap) -> Option<String> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.trim().to_string())
        .filter(|v| valid_id(v))
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
