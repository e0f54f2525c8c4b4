//! Dashboard sessions, stored next to the queue they guard (`{name}:session:<digest>`, with
//! the session's time to live).
//!
//! The store knows only digests: the caller (the web app) hands out a random id in a cookie and
//! keys the session by a hash of it, so reading Redis (a backup, `MONITOR`, a replica) never
//! yields a usable cookie. What a session holds is the caller's type, stored as JSON.

use redis::AsyncCommands;
use serde::{de::DeserializeOwned, Serialize};

use crate::conn::RedisConn;
use crate::error::{corrupt, Result};
use crate::keys::Keys;
use crate::queue::Queue;

/// Shortest time a session is kept: a shorter one would end before its first page loads.
pub const MIN_SESSION_TTL_S: u64 = 60;

/// The session store of one queue ([`Queue::sessions`]).
pub struct Sessions {
    conn: RedisConn,
    keys: Keys,
}

impl Queue {
    /// The dashboard's session store of this queue (keys in the control slot `{name}`).
    pub fn sessions(&self) -> Sessions {
        Sessions {
            conn: self.conn.clone(),
            keys: self.keys().clone(),
        }
    }
}

/// A digest is 64 hex characters (sha256); anything else names no session, so it never
/// reaches a key.
fn is_digest(d: &str) -> bool {
    d.len() == 64 && d.bytes().all(|b| b.is_ascii_hexdigit())
}

impl Sessions {
    /// Stores `session` under `digest` for `ttl_s` seconds (at least [`MIN_SESSION_TTL_S`]).
    pub async fn put<T: Serialize>(&self, digest: &str, session: &T, ttl_s: u64) -> Result<()> {
        if !is_digest(digest) {
            return Err(corrupt("a session key must be a sha256 digest"));
        }
        let body = serde_json::to_string(session).map_err(|e| corrupt(e.to_string()))?;
        let mut c = self.conn.clone();
        let _: () = c
            .set_ex(
                self.keys.session(digest),
                body,
                ttl_s.max(MIN_SESSION_TTL_S),
            )
            .await?;
        Ok(())
    }

    /// The session under `digest`, if it exists and has not expired. A record that does not
    /// parse counts as no session (signing in again replaces it).
    pub async fn get<T: DeserializeOwned>(&self, digest: &str) -> Result<Option<T>> {
        if !is_digest(digest) {
            return Ok(None);
        }
        let mut c = self.conn.clone();
        let body: Option<String> = c.get(self.keys.session(digest)).await?;
        Ok(body.and_then(|b| serde_json::from_str(&b).ok()))
    }

    /// Ends the session (signing out).
    pub async fn delete(&self, digest: &str) -> Result<()> {
        if !is_digest(digest) {
            return Ok(());
        }
        let mut c = self.conn.clone();
        let _: () = c.del(self.keys.session(digest)).await?;
        Ok(())
    }
}
