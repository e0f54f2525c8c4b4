//! Dashboard sessions, stored next to the queue they guard (`{name}:session:<digest>`, with
//! the session's time to live).
//!
//! The store knows only digests: the caller (the web app) hands out a random id in a cookie and
//! keys the session by a hash of it, so reading Redis (a backup, `MONITOR`, a replica) never
//! yields a usable cookie. What a session holds is the caller's type, stored as JSON.
//!
//! Every session's digest is also listed in `{name}:sessions` (a sorted set scored by when the
//! session expires), so "sign out every session" deletes exactly the live ones — no scan of
//! the keyspace, which on a cluster would have to visit every node. Entries of sessions that
//! expired on their own are trimmed as new ones are added.

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

/// How long an expired session's entry may stay in the index before a new sign-in trims it:
/// generous, so hosts whose clocks disagree by minutes never trim a live session's entry (the
/// scores are Redis time, but a cluster's nodes each have their own clock).
const INDEX_SLACK_MS: i64 = 3_600_000;

/// Sessions deleted per round trip by [`Sessions::delete_all`] (a human count, but unbounded).
const DELETE_CHUNK: usize = 500;

impl Sessions {
    /// Stores `session` under `digest` for `ttl_s` seconds (at least [`MIN_SESSION_TTL_S`]),
    /// listed in the index first. One pipeline, not a transaction (no MULTI/EXEC anywhere: a
    /// cluster connection has none), so the order is what keeps it safe: cut short, it leaves
    /// an index entry without a session (harmless), never a session missing from the index —
    /// which "sign out every session" would not end.
    pub async fn put<T: Serialize>(&self, digest: &str, session: &T, ttl_s: u64) -> Result<()> {
        if !is_digest(digest) {
            return Err(corrupt("a session key must be a sha256 digest"));
        }
        let body = serde_json::to_string(session).map_err(|e| corrupt(e.to_string()))?;
        let ttl_s = ttl_s.max(MIN_SESSION_TTL_S);
        let now = crate::conn::redis_now_ms(&self.conn).await?;
        let expires_ms =
            now.saturating_add(i64::try_from(ttl_s.saturating_mul(1000)).unwrap_or(i64::MAX));
        let index = self.keys.session_index();
        let mut c = self.conn.clone();
        redis::pipe()
            .zadd(&index, digest, expires_ms)
            .ignore()
            .zrembyscore(&index, "-inf", now - INDEX_SLACK_MS)
            .ignore()
            .set_ex(self.keys.session(digest), body, ttl_s)
            .ignore()
            .query_async::<()>(&mut c)
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

    /// Ends the session (signing out), then drops its index entry (cut short in between: an
    /// entry without a session, harmless).
    pub async fn delete(&self, digest: &str) -> Result<()> {
        if !is_digest(digest) {
            return Ok(());
        }
        let mut c = self.conn.clone();
        redis::pipe()
            .del(self.keys.session(digest))
            .ignore()
            .zrem(self.keys.session_index(), digest)
            .ignore()
            .query_async::<()>(&mut c)
            .await?;
        Ok(())
    }

    /// Ends every session listed when it runs ("sign out every session") and returns how many
    /// were still live. A session started meanwhile is not in the list read and stays. Each
    /// chunk deletes the sessions before their index entries, as [`Sessions::delete`] does.
    pub async fn delete_all(&self) -> Result<u64> {
        let index = self.keys.session_index();
        let mut c = self.conn.clone();
        let digests: Vec<String> = c.zrange(&index, 0, -1).await?;
        let mut ended = 0u64;
        for chunk in digests.chunks(DELETE_CHUNK) {
            let keys: Vec<String> = chunk
                .iter()
                .filter(|d| is_digest(d))
                .map(|d| self.keys.session(d))
                .collect();
            let mut pipe = redis::pipe();
            if !keys.is_empty() {
                pipe.del(&keys);
            }
            pipe.zrem(&index, chunk).ignore();
            let deleted: Vec<u64> = pipe.query_async(&mut c).await?;
            ended += deleted.first().copied().unwrap_or(0);
        }
        Ok(ended)
    }
}
