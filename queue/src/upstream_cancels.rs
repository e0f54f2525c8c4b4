//! Upstream cancels of a job API's jobs: an operator's cancel or purge of a task that holds a
//! job leaves the job in the slot's `cancels` zset (cancel.lua, purge.lua), and workers take
//! the due ones under a lease ([`Queue::take_upstream_cancels`]), call the upstream, and settle
//! each ([`Queue::settle_upstream_cancel`]): done, or back in the set after a backoff. The
//! operator's action never waits for the upstream, and an upstream that is down at that moment
//! gets the cancel later.

use crate::decode::{array, int, string};
use crate::error::{corrupt, Result};
use crate::queue::{clamp_ms, Queue};
use crate::scripts::SCRIPTS;
use crate::slot::Slot;

/// One job to cancel upstream, as a worker took it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamCancel {
    /// The entry as stored (`<tries>|<id>|<job>`): what settles it.
    pub member: String,
    /// The task the job was for.
    pub id: String,
    /// The job's reference (its id, or the URL it was followed at).
    pub job: String,
    /// Earlier tries that failed.
    pub tries: u32,
}

impl UpstreamCancel {
    fn parse(member: String) -> Result<UpstreamCancel> {
        let mut parts = member.splitn(3, '|');
        let (Some(tries), Some(id), Some(job)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(corrupt("cancels: bad member"));
        };
        let tries = tries
            .parse()
            .map_err(|_| corrupt("cancels: bad try count"))?;
        Ok(UpstreamCancel {
            id: id.to_string(),
            job: job.to_string(),
            tries,
            member,
        })
    }
}

/// How an upstream cancel ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CancelOutcome {
    /// The upstream took it (or had nothing to cancel any more): removed.
    Done,
    /// Try again after this many ms.
    RetryAfter(u64),
}

impl Queue {
    /// Up to `n` due upstream cancels of every slot, each leased to the caller for
    /// `lease_ms` (a caller that dies leaves them due again after the lease).
    pub async fn take_upstream_cancels(
        &self,
        n: usize,
        lease_ms: u64,
    ) -> Result<Vec<UpstreamCancel>> {
        let all = self
            .fan(|s| async move { s.take_upstream_cancels(n, lease_ms).await })
            .await?;
        Ok(all.into_iter().flatten().take(n.max(1)).collect())
    }

    /// Settles one taken cancel; `what` (cut to 200 bytes) goes to the task's history if it
    /// still has one. Ok(false): it was settled already (another worker took it after the
    /// lease ran out).
    pub async fn settle_upstream_cancel(
        &self,
        c: &UpstreamCancel,
        outcome: CancelOutcome,
        what: &str,
    ) -> Result<bool> {
        let (mode, delay) = match outcome {
            CancelOutcome::Done => ("done", 0),
            CancelOutcome::RetryAfter(ms) => ("retry", clamp_ms(ms)),
        };
        let slot = self.slot_of(&c.id);
        let mut inv = slot.invocation(&SCRIPTS.cancel_settle);
        inv.for_task(&c.id)
            .arg(&c.member)
            .arg(mode)
            .arg(delay)
            .arg(what);
        Ok(int(&slot.run(&inv).await?)? == 1)
    }
}

impl Slot {
    async fn take_upstream_cancels(&self, n: usize, lease_ms: u64) -> Result<Vec<UpstreamCancel>> {
        let mut inv = self.invocation(&SCRIPTS.cancel_take);
        inv.arg(n.clamp(1, 1000)).arg(clamp_ms(lease_ms).max(1));
        array(self.run(&inv).await?)?
            .iter()
            .map(|m| UpstreamCancel::parse(string(m)?))
            .collect()
    }
}
