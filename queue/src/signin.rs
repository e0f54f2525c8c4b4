//! Sign-in attempts per client address, counted in Redis for one minute.
//!
//! Counting in Redis (not in process memory) keeps the limit when several web processes
//! share a queue. An attempt is counted **before** the password is checked (one atomic
//! function of the library, `lua/login_attempt.lua`): checking "blocked?" first and counting the failure after
//! the slow password check let a burst of parallel guesses all pass the check. A successful
//! sign-in gives its attempt back, so a user who types the password right is never locked out
//! by their own success.

use crate::conn::RedisConn;
use crate::error::Result;
use crate::library::Invocation;
use crate::queue::Queue;
use crate::scripts::SCRIPTS;

/// Window of the attempt count.
pub const SIGN_IN_WINDOW_MS: u64 = 60_000;

/// Longest client name kept in a key; longer ones are cut (an address is at most 45 bytes).
const MAX_CLIENT: usize = 64;

/// One client's sign-in attempts ([`Queue::sign_in_attempts`]).
pub struct SignInLimiter {
    conn: RedisConn,
    key: String,
    max: u32,
}

impl Queue {
    /// The sign-in limiter of `client` (an address, or "unknown"): at most `max_attempts` in
    /// [`SIGN_IN_WINDOW_MS`].
    pub fn sign_in_attempts(&self, client: &str, max_attempts: u32) -> SignInLimiter {
        SignInLimiter {
            conn: self.conn.clone(),
            key: self.keys().sign_in_attempts(&client_name(client)),
            max: max_attempts.max(1),
        }
    }
}

/// The client as it may appear in a key: bounded, and never a brace (which would move the
/// key out of the queue's hash tag) or other odd byte.
fn client_name(client: &str) -> String {
    client
        .chars()
        .take(MAX_CLIENT)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | ':' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

impl SignInLimiter {
    /// Counts one attempt; `Ok(false)` when the client has used up its attempts for now (the
    /// password must then not be checked at all).
    pub async fn take(&self) -> Result<bool> {
        let n = self.call("take").await?;
        Ok(n <= i64::from(self.max))
    }

    /// Returns the attempt of a successful sign-in.
    pub async fn give_back(&self) -> Result<()> {
        self.call("give").await.map(drop)
    }

    async fn call(&self, mode: &str) -> Result<i64> {
        // A library function without the queue's common ARGV (it needs none of them).
        let mut inv = Invocation::new(&SCRIPTS.login_attempt, None);
        inv.given("attempts", self.key.as_str())
            .arg(SIGN_IN_WINDOW_MS)
            .arg(mode);
        let reply = crate::library::call(&self.conn, &inv).await?;
        match reply {
            redis::Value::Int(n) => Ok(n),
            other => Err(crate::error::corrupt(format!(
                "login_attempt: expected a count, got {other:?}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn client_names_stay_inside_the_hash_tag() {
        assert_eq!(super::client_name("10.0.0.1"), "10.0.0.1");
        assert_eq!(super::client_name("::1"), "::1");
        assert_eq!(super::client_name("a}{b c"), "a__b_c");
        assert_eq!(super::client_name(&"x".repeat(200)).len(), 64);
    }
}
