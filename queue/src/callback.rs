//! A task completed by the upstream's callback (the web process receives it; the token was
//! checked there, see `worker::callback`), not by a worker's poll.

use crate::decode::int;
use crate::error::Result;
use crate::queue::{clamp_ms, Queue};
use crate::scripts::SCRIPTS;
use crate::slot::Slot;

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
            .complete_by_callback(id, created_ms, expires_ms, result)
            .await
    }
}

impl Slot {
    /// [`Queue::complete_by_callback`] in this slot (callback.lua).
    async fn complete_by_callback(
        &self,
        id: &str,
        created_ms: i64,
        expires_ms: i64,
        result: &str,
    ) -> Result<bool> {
        let k = self.keys();
        let mut inv = self.invocation(&SCRIPTS.callback);
        inv.key(k.task(id))
            .key(k.hist(id))
            .key(k.result(id))
            .key(k.partial(id))
            .key(&k.ready)
            .key(&k.ready_bg)
            .key(&k.due)
            .key(&k.lease)
            .key(&k.retry)
            .key(&k.results)
            .key(&k.tp)
            .key(&k.tpmin)
            .key(&k.events)
            .key(&k.fair)
            .key(&k.fairc)
            .arg(id)
            .arg(created_ms)
            .arg(expires_ms)
            .arg(result)
            .arg(clamp_ms(self.config().result_ttl_ms));
        Ok(int(&self.run(&inv).await?)? == 1)
    }
}
