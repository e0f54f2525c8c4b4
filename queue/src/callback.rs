//! A task ended by the upstream's callback (the web process receives it; the token was
//! checked there, see `worker::callback`), not by a worker's poll: completed with the
//! upstream's final data, or dead when the upstream says it gave up. A job API provider's
//! webhook (checked there too, see `worker::Webhooks`) finds its task through the job index
//! kept here ([`Queue::index_job`], [`Queue::find_job`]) and ends it, or makes its next poll
//! due now.

use crate::decode::int;
use crate::error::Result;
use crate::queue::{clamp_ms, Queue};
use crate::scripts::SCRIPTS;
use crate::slot::Slot;

/// What a callback or a provider's webhook asks of a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallbackEffect<'a> {
    /// Done: the final data, stored as the result.
    Done(&'a str),
    /// The upstream gave up on the key: its message, the dead task's last error.
    Failed(&'a str),
    /// "Look now" (a webhook that carries no result): a task waiting for a later poll is made
    /// due at once.
    Look,
}

/// What the queue did with a provider's webhook ([`Queue::apply_webhook`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WebhookApplied {
    /// The task ended (done or failed), or was made due now (look).
    Applied,
    /// No live task of that life (ended, cancelled, another life): nothing written.
    Gone,
    /// The webhook id was seen before: nothing written.
    Replay,
    /// The task holds another job (a refresh made a new one): nothing written.
    OtherJob,
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
        let hook = Hook::default();
        let done = CallbackEffect::Done(result);
        let r = self
            .slot_of(id)
            .end_by_callback(id, created_ms, expires_ms, done, hook);
        Ok(r.await? == WebhookApplied::Applied)
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
        let hook = Hook::default();
        let failed = CallbackEffect::Failed(message);
        let r = self
            .slot_of(id)
            .end_by_callback(id, created_ms, expires_ms, failed, hook);
        Ok(r.await? == WebhookApplied::Applied)
    }

    /// A provider's authentic webhook about `job`, for the life of task `id` created at
    /// `created_ms` (as [`Queue::find_job`] gave them): applied only while that life is live
    /// and still holds `job`, and only once per `webhook_id` ("" = the provider sends none),
    /// which is remembered for `memory_ms` with the change.
    pub async fn apply_webhook(
        &self,
        id: &str,
        created_ms: i64,
        job: &str,
        webhook_id: &str,
        memory_ms: u64,
        effect: CallbackEffect<'_>,
    ) -> Result<WebhookApplied> {
        let hook = Hook {
            job,
            id: webhook_id,
            memory_ms,
        };
        self.slot_of(id)
            .end_by_callback(id, created_ms, 0, effect, hook)
            .await
    }

    /// Remembers that `job` belongs to the life of task `id` created at `created_ms`, for
    /// `life_ms`: how a provider's webhook, which names only its job, finds its task. Kept in
    /// the task's slot; a later life's job has its own entry, and the webhook's change checks
    /// the task still holds the job, so a stale entry can do nothing.
    pub async fn index_job(
        &self,
        job: &str,
        id: &str,
        created_ms: i64,
        life_ms: u64,
    ) -> Result<()> {
        let slot = self.slot_of(id);
        let mut c = slot.conn.clone();
        let () = redis::cmd("SET")
            .arg(slot.keys().job_index(job))
            .arg(format!("{created_ms} {id}"))
            .arg("PX")
            .arg(life_ms.max(1))
            .query_async(&mut c)
            .await?;
        Ok(())
    }

    /// The task (its id and life's creation time) whose job `job` is, if the index still
    /// has it: asked of every slot at once (the job names no task, so no slot).
    pub async fn find_job(&self, job: &str) -> Result<Option<(String, i64)>> {
        let asks = self.slots().iter().map(|slot| async move {
            let mut c = slot.conn.clone();
            let v: Option<String> = redis::cmd("GET")
                .arg(slot.keys().job_index(job))
                .query_async(&mut c)
                .await?;
            Ok::<_, crate::error::QueueError>(v)
        });
        for found in futures::future::try_join_all(asks)
            .await?
            .into_iter()
            .flatten()
        {
            let parsed = found
                .split_once(' ')
                .and_then(|(c, id)| Some((id.to_string(), c.parse().ok()?)));
            if parsed.is_some() {
                return Ok(parsed);
            }
        }
        Ok(None)
    }
}

/// A webhook's checks of callback.lua (all off for a callback by token).
#[derive(Clone, Copy, Debug)]
struct Hook<'a> {
    /// The job the task must hold ("" = not checked).
    job: &'a str,
    /// The webhook id ("" = none).
    id: &'a str,
    memory_ms: u64,
}

impl Default for Hook<'_> {
    fn default() -> Self {
        Hook {
            job: "",
            id: "",
            memory_ms: 1,
        }
    }
}

impl Slot {
    /// [`Queue::complete_by_callback`], [`Queue::fail_by_callback`] and
    /// [`Queue::apply_webhook`] in this slot (callback.lua).
    async fn end_by_callback(
        &self,
        id: &str,
        created_ms: i64,
        expires_ms: i64,
        effect: CallbackEffect<'_>,
        hook: Hook<'_>,
    ) -> Result<WebhookApplied> {
        let (kind, text) = match effect {
            CallbackEffect::Done(result) => ("done", result),
            CallbackEffect::Failed(message) => ("failed", message),
            CallbackEffect::Look => ("look", ""),
        };
        let mut inv = self.invocation(&SCRIPTS.callback);
        inv.for_task(id)
            .given("seen", self.keys().webhook_seen(hook.id))
            .arg(id)
            .arg(created_ms)
            .arg(expires_ms)
            .arg(kind)
            .arg(text)
            .arg(clamp_ms(self.config().result_life_ms()))
            .arg(hook.job)
            .arg(hook.id)
            .arg(hook.memory_ms.max(1));
        Ok(match int(&self.run(&inv).await?)? {
            1 => WebhookApplied::Applied,
            2 => WebhookApplied::Replay,
            3 => WebhookApplied::OtherJob,
            _ => WebhookApplied::Gone,
        })
    }
}
