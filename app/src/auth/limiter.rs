//! Sign-in attempts per client address, counted in Redis for one minute.
//!
//! Counting in Redis (not in process memory) keeps the limit when several web processes
//! share a queue. An attempt is counted **before** the password is checked (one atomic
//! script, see `login_attempt.lua`): checking "blocked?" first and counting the failure after
//! the slow argon2 check let a burst of parallel guesses all pass the check. A successful
//! sign-in gives its attempt back, so a user who types the password right is never locked out
//! by their own success.

use queue::redis;

/// Window of the attempt count.
const WINDOW_MS: u64 = 60_000;

/// See `login_attempt.lua` for the script's keys and arguments.
static SCRIPT: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(include_str!("login_attempt.lua")));

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

    /// Counts one attempt; `Ok(false)` when the client has used up its attempts for now (the
    /// password must then not be checked at all).
    pub async fn take(&self) -> redis::RedisResult<bool> {
        let n = self.call("take").await?;
        Ok(n <= i64::from(self.max))
    }

    /// Returns the attempt of a successful sign-in.
    pub async fn give_back(&self) -> redis::RedisResult<()> {
        self.call("give").await.map(drop)
    }

    async fn call(&self, mode: &str) -> redis::RedisResult<i64> {
        let mut c = self.conn.clone();
        SCRIPT
            .key(&self.key)
            .arg(WINDOW_MS)
            .arg(mode)
            .invoke_async(&mut c)
            .await
    }
}
