//! A task ended by the upstream's callback (the web process receives it; the token was
//! checked there, see `worker::callback`), not by a worker's poll: completed with the
//! upstream's final data, or dead when the upstream says it gave up.

use crate::decode::int;
use crate::error::Result;
use crate::queue::{clamp_ms, Queue};
use crate::scripts::SCRIPTS;
use crate::slot::Slot;

/// A final answer an upstream posted to a task's callback URL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome<'a> {
    /// Done: the final data, stored as the result.
    Done(&'a str),
    /// The upstream gave up on the key: its message, the dead task's last error.
    Failed(&'a str),
}

impl Queue {
    /// Stores `result` as the final data of the life of task `id` created at `created_ms` and
    /// ends it, whether it waits or is leased (the lease holder's later write then finds no
    /// record and writes nothing). `expires_ms` (0 = never) is checked against Redis time.
    /// Ok(false) when no live task of that life exists (done already, cancelled, dead,
    /// another life) or the token has expired: nothing is written then.
    pub async fn complete_by_callback(
        &self,
        id: &str,
        created_ms: i64,
        expires_ms: i64,
        result: &str,
    ) -> Result<bool> {
        self.slot_of(id)
            .end_by_callback(id, created_ms, expires_ms, Outcome::Done(result))
            .await
    }

    /// The upstream called back to say it gave up on the key: the life of task `id` ends
    /// dead at once, as a poll reading "failed" ends it (reason `fatal`, `message` as its last
    /// error), under the same checks as [`Queue::complete_by_callback`]: only that life,
    /// before `expires_ms`, fencing out the lease holder. Ok(false): nothing written.
    pub async fn fail_by_callback(
        &self,
        id: &str,
        created_ms: i64,
        expires_ms: i64,
        message: &str,
    ) -> Result<bool> {
        self.slot_of(id)
            .end_by_callback(id, created_ms, expires_ms, Outcome::Failed(message))
            .await
    }
}

impl Slot {
    /// [`Queue::complete_by_callback`] and [`Queue::fail_by_callback`] in this slot
    /// (callback.lua).
    async fn end_by_callback(
        &self,
        id: &str,
        created_ms: i64,
        expires_ms: i64,
        outcome: Outcome<'_>,
    ) -> Result<bool> {
        let (kind, text) = match outcome {
            Outcome::Done(result) => ("done", result),
            Outcome::Failed(message) => ("failed", message),
        };
        let mut inv = self.invocation(&SCRIPTS.callback);
        inv.for_task(id)
            .arg(id)
            .arg(created_ms)
            .arg(expires_ms)
            .arg(kind)
            .arg(text)
            .arg(clamp_ms(self.config().result_life_ms()));
        Ok(int(&self.run(&inv).await?)? == 1)
    }
}
