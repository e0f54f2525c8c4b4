//! Failed sign-ins per client address, counted in Redis for one minute.
//!
//! Counting in Redis (not in process memory) keeps the limit when several web processes
//! share a queue. Only failures count, so a user who types the password right is never
//! locked out by their own earlier success.

use queue::redis;

/// Window of the failure count.
const WINDOW_S: i64 = 60;

pub struct LoginLimiter {
    conn: queue::RedisConn,
    key: String,
    max: u32,
}

impl LoginLimiter {
    /// The limiter of `client` (an address, or "unknown") in `queue`.
    pub fn new(queue: &queue::Queue, client: &str, max_failures: u32) -> LoginLimiter {
        LoginLimiter {
            conn: queue.connection(),
            key: format!("{{{}}}:loginfail:{client}", queue.config().name),
            max: max_failures.max(1),
        }
    }

    /// Whether this client used up its failures for now.
    pub async fn blocked(&self) -> redis::RedisResult<bool> {
        let mut c = self.conn.clone();
        let n: Option<u32> = redis::cmd("GET").arg(&self.key).query_async(&mut c).await?;
        Ok(n.unwrap_or(0) >= self.max)
    }

    /// Counts one failure; the window starts at the first one.
    pub async fn failed(&self) -> redis::RedisResult<()> {
        let mut c = self.conn.clone();
        redis::pipe()
            .cmd("INCR")
            .arg(&self.key)
            .ignore()
            .cmd("EXPIRE")
            .arg(&self.key)
            .arg(WINDOW_S)
            .arg("NX")
            .ignore()
            .query_async::<()>(&mut c)
            .await
    }
}
