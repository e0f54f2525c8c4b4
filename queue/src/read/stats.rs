//! Counts per state: one read-only script per slot (a consistent snapshot, O(log n) each),
//! summed over the slots (`merge::stats`).

use redis::Value;

use crate::decode::{array, int};
use crate::error::{corrupt, Result};
use crate::model::{Stats, ThroughputBucket};
use crate::queue::{clamp_ms, Queue};
use crate::scripts::SCRIPTS;
use crate::slot::Slot;

use super::{merge, STATS_BUCKETS};

impl Queue {
    /// Counts per state, oldest ready age, stuck leases and the last hour of throughput.
    /// Errors: Redis unreachable, or a reply of an unexpected shape (`Corrupt`).
    pub async fn stats(&self) -> Result<Stats> {
        let all = self
            .fan(|s| async move { s.stats(STATS_BUCKETS).await })
            .await?;
        Ok(merge::stats(all))
    }

    /// [`Queue::stats`] without the throughput (what the attention strip reads on every
    /// admin page: the counts alone skip the 660 counter fields of the hour).
    pub async fn counts(&self) -> Result<Stats> {
        let all = self.fan(|s| async move { s.stats(0).await }).await?;
        Ok(merge::stats(all))
    }
}

impl Slot {
    /// [`Queue::stats`] of this slot alone (stats.lua), with `buckets` minutes of throughput.
    pub(crate) async fn stats(&self, buckets: usize) -> Result<Stats> {
        let mut inv = self.invocation(&SCRIPTS.stats);
        inv.arg(clamp_ms(self.config().result_life_ms()))
            .arg(buckets);
        let a = array(self.run(&inv).await?)?;
        if a.len() < 11 {
            return Err(corrupt("stats: short reply"));
        }
        let u = |i: usize| -> Result<u64> {
            u64::try_from(int(&a[i])?).map_err(|_| corrupt("stats: negative count"))
        };
        let now = int(&a[9])?;
        let oldest = int(&a[7])?;
        let mut throughput = Vec::with_capacity(STATS_BUCKETS);
        for b in &a[11..] {
            let row = array(b.clone())?;
            let [m, c, f, p, ts, tc, fresh, stale, miss, negative, ahead, rfail, dead] =
                row.as_slice()
            else {
                return Err(corrupt("stats: bad bucket"));
            };
            let n = |v: &Value| -> Result<u64> {
                u64::try_from(int(v)?).map_err(|_| corrupt("stats: negative counter"))
            };
            throughput.push(ThroughputBucket {
                minute_ms: int(m)?,
                completed: n(c)?,
                failed: n(f)?,
                polled: n(p)?,
                ttr_sum_ms: n(ts)?,
                ttr_count: n(tc)?,
                fresh: n(fresh)?,
                stale: n(stale)?,
                miss: n(miss)?,
                negative: n(negative)?,
                ahead: n(ahead)?,
                refresh_failed: n(rfail)?,
                dead: n(dead)?,
                ..ThroughputBucket::default()
            });
        }
        Ok(Stats {
            ready: u(0)?,
            ready_background: u(10)?,
            waiting: u(1)?,
            retrying: u(2)?,
            leased: u(3)?,
            stuck: u(4)?,
            dead: u(5)?,
            results: u(6)?,
            oldest_ready_age_ms: if oldest >= 0 && oldest <= now {
                now - oldest
            } else {
                0
            },
            paused: int(&a[8])? == 1,
            now_ms: now,
            throughput,
        })
    }
}
