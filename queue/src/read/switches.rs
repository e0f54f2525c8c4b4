//! The switches and shares an operator watches: the pause flag, the upstream's circuit
//! breaker, and the busiest tenants.

use std::collections::BTreeMap;

use redis::AsyncCommands;

use crate::error::Result;
use crate::keys::Keys;
use crate::model::{BreakerInfo, BreakerState, PauseInfo, TenantCount};
use crate::slot::Slot;
use crate::Queue;

use super::{merge, TENANT_SCAN_MAX};

impl Queue {
    /// Since when and by whom the queue is paused (the pause script's flag, "at|who"), or
    /// None while it runs. One `GET`, so every dashboard page can show its banner cheaply. A
    /// flag in another shape still means paused.
    ///
    /// Every slot holds its own copy of the flag (the pause is written to all of them), so
    /// the first slot's is read.
    pub async fn pause_info(&self) -> Result<Option<PauseInfo>> {
        self.slots()[0].pause_info().await
    }

    /// The busiest tenants (most ready + leased tasks first), at most `top`: ready counts from
    /// the first [`TENANT_SCAN_MAX`] members of the fair zset (so bounded in time; the
    /// counts are exact below that), leases from the per-tenant lease counts.
    pub async fn tenants(&self, top: usize) -> Result<Vec<TenantCount>> {
        let all = self.fan(|s| async move { s.tenant_counts().await }).await?;
        Ok(busiest(merge::tenant_counts(all), top))
    }

    /// The upstream's circuit breaker, or None while it is closed. One `HGETALL`.
    ///
    /// A partitioned queue has a breaker per partition (partition.rs): the one most open
    /// (open before half-open, then the one open longest).
    pub async fn breaker(&self) -> Result<Option<BreakerInfo>> {
        let all = self.fan(|s| async move { s.breaker().await }).await?;
        Ok(merge::breaker(all))
    }
}

impl Slot {
    /// [`Queue::pause_info`] of this slot.
    pub(crate) async fn pause_info(&self) -> Result<Option<PauseInfo>> {
        let mut c = self.conn.clone();
        let flag: Option<String> = c.get(&self.keys().paused).await?;
        Ok(flag.map(|f| parse_pause_flag(&f)))
    }

    /// This slot's tenants with work: tenant -> (ready, leased).
    pub(crate) async fn tenant_counts(&self) -> Result<BTreeMap<String, (u64, u64)>> {
        let k = self.keys();
        let mut c = self.conn.clone();
        let (members, held): (Vec<String>, Vec<(String, i64)>) = redis::pipe()
            .zrange(&k.fair, 0, TENANT_SCAN_MAX as isize - 1)
            .hgetall(&k.fairc)
            .query_async(&mut c)
            .await?;
        // tenant -> (ready, leased)
        let mut by: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        for m in &members {
            by.entry(Keys::split_fair_member(m).0.to_string())
                .or_default()
                .0 += 1;
        }
        for (t, n) in held.into_iter().filter(|(_, n)| *n > 0) {
            by.entry(t).or_default().1 = n.unsigned_abs();
        }
        Ok(by)
    }

    /// This slot's breaker, or None while it is closed.
    pub(crate) async fn breaker(&self) -> Result<Option<BreakerInfo>> {
        let mut c = self.conn.clone();
        let h: std::collections::HashMap<String, String> = c.hgetall(&self.keys().breaker).await?;
        let Some(st) = h.get("st") else {
            return Ok(None);
        };
        let n = |f: &str| h.get(f).and_then(|v| v.parse::<i64>().ok()).unwrap_or(0);
        let text = |f: &str| h.get(f).cloned().unwrap_or_default();
        let state = if st == "half" {
            BreakerState::HalfOpen
        } else {
            BreakerState::Open
        };
        Ok(Some(BreakerInfo {
            state,
            since_ms: n("since"),
            until_ms: if state == BreakerState::HalfOpen {
                n("pd")
            } else {
                n("to")
            },
            reason: text("why"),
            by: text("by"),
            probe: h.get("probe").filter(|p| !p.is_empty()).cloned(),
        }))
    }
}

/// The busiest of `by` (tenant -> (ready, leased)): most work first, then by name.
fn busiest(by: BTreeMap<String, (u64, u64)>, top: usize) -> Vec<TenantCount> {
    let mut out: Vec<TenantCount> = by
        .into_iter()
        .map(|(tenant, (ready, leased))| TenantCount {
            tenant,
            ready,
            leased,
        })
        .collect();
    out.sort_by(|a, b| {
        (b.ready + b.leased)
            .cmp(&(a.ready + a.leased))
            .then_with(|| a.tenant.cmp(&b.tenant))
    });
    out.truncate(top);
    out
}

/// "at|who" as the pause script writes it.
fn parse_pause_flag(flag: &str) -> PauseInfo {
    let (at, who) = flag.split_once('|').unwrap_or(("0", ""));
    PauseInfo {
        at_ms: at.parse().unwrap_or(0),
        who: who.to_string(),
    }
}

#[cfg(test)]
mod pause_flag_tests {
    #[test]
    fn parses_the_flag() {
        let p = super::parse_pause_flag("1796107267215|admin");
        assert_eq!((p.at_ms, p.who.as_str()), (1_796_107_267_215, "admin"));
        let p = super::parse_pause_flag("1");
        assert_eq!((p.at_ms, p.who.as_str()), (0, ""));
    }
}
