//! Partitions: one logical queue over P hash tags, so a Redis Cluster can spread one queue's
//! tasks and results over all its nodes.
//!
//! A Lua script may only touch keys of one slot, and with one hash tag a queue is one slot:
//! one node, one core, and all its stored results in one node's memory. With
//! [`QueueConfig::partitions`] = P > 1, task `id` lives in partition
//! [`partition_of`]`(id, P)` (FNV-1a of the id, mod P), whose keys carry the tag `{name#i}`
//! (or `{name#i.k}`: `keys::partition_tag` spaces the tags evenly over the cluster's slots).
//! Each partition is a whole one-partition queue: the same scripts, the same keys, the same
//! transitions, so every script stays single-slot and atomic, and nothing in the Lua changes.
//! What this module adds is how the [`Queue`] handle works across them:
//!
//! - **By id** (enqueue, join, renew, complete, reschedule, fail, release, retry, cancel, get,
//!   the callback): straight to the task's partition, one call as before.
//! - **Claims** sweep the partitions from a rotating start until the batch is full; a claim
//!   after a wake-up goes to the partition whose wake-up list woke the process (each partition
//!   has its own list; a worker process waits on all of them). A busy slot's chained claim
//!   (`complete_and_claim`) stays in the partition of the task it finished (one call per
//!   task), except every `CHAIN_ROTATE`-th hop, which goes to the next partition of the
//!   rotation, so a partition whose tasks nobody is chaining cannot wait behind another's
//!   backlog for long.
//! - **Reads** (stats, lists, tenants, events, throughput, stuck leases) ask every partition,
//!   at most `FAN_OUT` at once, and merge: sorted-set pages by (score, id) with the same
//!   cursor to each partition (so the merged order and paging are exact), the ready work
//!   partition after partition.
//! - **Switches** an operator flips (pause, the breaker by hand) are written to every
//!   partition, since every partition's claim reads its own copy.
//! - **Limits**: the upstream's rate limit is one key in the control slot `{name}` (exactly
//!   global, as before). The breaker's threshold and the per-tenant limits are checked inside
//!   the claim and fail scripts, so each partition holds its own, set to an even share of the
//!   configured value (`part_config`): ids are uniform hashes, so each partition sees ~1/P of
//!   the calls and of each tenant's tasks.
//! - **The control slot** `{name}` keeps what belongs to no task: sessions, sign-in limits,
//!   the audit log, the worker registry, the upstream rate limit, bulk-run state, and the
//!   partition count the queue was created with (`check_layout`).

use std::future::Future;

use futures::{StreamExt, TryStreamExt};

use crate::error::{config, corrupt, QueueError, Result};
use crate::model::QueueConfig;
use crate::slot::Slot;
use crate::Queue;

/// Most partitions a queue may have.
pub const MAX_PARTITIONS: u16 = 1024;

/// A chained claim goes to another partition once in this many hops (see the module doc).
pub(crate) const CHAIN_ROTATE: usize = 8;

/// Most partitions one fan-out read asks at once.
pub(crate) const FAN_OUT: usize = 16;

/// The partition of task `id` among `n` (FNV-1a 64 of its bytes, mod n): stable across
/// processes, versions and hosts, since every process must find a task in the same place.
pub fn partition_of(id: &str, n: usize) -> usize {
    if n <= 1 {
        return 0;
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % n as u64) as usize
}

/// The hash tag (braces included) under which queue `name` of `partitions` partitions keeps
/// task `id`'s keys: `{name}` for one partition. For tools that read a task's keys directly
/// (the chaos suite reads histories).
pub fn task_tag(name: &str, id: &str, partitions: usize) -> String {
    crate::keys::Keys::slot(name, partition_of(id, partitions), partitions)
        .tag()
        .to_string()
}

/// The configuration of each partition of a queue configured with `cfg`: one partition, and
/// the limits that are checked inside a partition's scripts set to their even share (at least
/// one): the breaker's error count, the per-tenant concurrency, rate and burst.
pub(crate) fn part_config(cfg: &QueueConfig) -> QueueConfig {
    let p = u32::from(cfg.partitions.max(1));
    let share = |v: u32| if v == 0 { 0 } else { v.div_ceil(p).max(1) };
    let mut c = cfg.clone();
    c.partitions = 1;
    c.breaker.failures = share(cfg.breaker.failures);
    c.tenants.concurrency = share(cfg.tenants.concurrency);
    c.tenants.burst = share(cfg.tenants.burst.max(1));
    if cfg.tenants.rate_per_sec.is_finite() && cfg.tenants.rate_per_sec > 0.0 {
        c.tenants.rate_per_sec = cfg.tenants.rate_per_sec / f64::from(p);
    }
    c
}

/// Keys of a one-partition queue that hold tasks: if any exists under `{name}`, the queue was
/// used with one partition.
fn single_layout_keys(q: &Queue) -> [String; 6] {
    let k = q.keys();
    [
        k.ready.clone(),
        k.ready_bg.clone(),
        k.due.clone(),
        k.lease.clone(),
        k.dead.clone(),
        k.fair.clone(),
    ]
}

/// "1 partition", "4 partitions".
fn partitions(n: u16) -> String {
    match n {
        1 => "1 partition".to_string(),
        n => format!("{n} partitions"),
    }
}

/// Records the partition count of a queue on its first use, and refuses a process that asks
/// for another: its tasks would be looked for in the wrong partitions (a second task for a
/// query already queued, results not found). A queue used before counts were recorded has one
/// partition if it holds tasks under `{name}`.
pub(crate) async fn check_layout(q: &Queue) -> Result<()> {
    let want = q.config().partitions;
    let meta = q.keys().meta();
    let mut c = q.conn.clone();
    let moving: Option<u16> = redis::cmd("HGET")
        .arg(&meta)
        .arg("moving_to")
        .query_async(&mut c)
        .await?;
    if let Some(to) = moving {
        return Err(config(format!(
            "queue {:?} is being moved to {to} partitions (repoll admin repartition); run that \
             command again to finish it before starting this process",
            q.config().name
        )));
    }
    let have: Option<u16> = redis::cmd("HGET")
        .arg(&meta)
        .arg("partitions")
        .query_async(&mut c)
        .await?;
    let have = match have {
        Some(n) => n,
        None => {
            let mut n = want;
            if want > 1 {
                let found: u32 = redis::cmd("EXISTS")
                    .arg(&single_layout_keys(q)[..])
                    .query_async(&mut c)
                    .await?;
                if found > 0 {
                    n = 1;
                }
            }
            // HSETNX: two processes starting at once agree on the first one's count.
            let _: bool = redis::cmd("HSETNX")
                .arg(&meta)
                .arg("partitions")
                .arg(n)
                .query_async(&mut c)
                .await?;
            redis::cmd("HGET")
                .arg(&meta)
                .arg("partitions")
                .query_async::<Option<u16>>(&mut c)
                .await?
                .unwrap_or(n)
        }
    };
    if have != want {
        return Err(config(format!(
            "queue {:?} has {} and this process asks for {want} (REPOLL_PARTITIONS): its tasks \
             would be looked for in the wrong place. Keep REPOLL_PARTITIONS={have}, or change \
             the count as docs/operations.md \"Partitions\" says",
            q.config().name,
            partitions(have)
        )));
    }
    Ok(())
}

impl Queue {
    /// How many partitions this queue has (1: one hash tag).
    pub fn partitions(&self) -> usize {
        self.inner.slots.len()
    }

    /// The hash tag of partition `i` (braces included; see `keys::partition_tag`), or
    /// the queue's one tag. An `i` past the last partition is read as the last.
    pub fn partition_tag(&self, i: usize) -> String {
        let slots = self.slots();
        slots[i.min(slots.len() - 1)].keys().tag().to_string()
    }

    /// The partition of `id` in this queue.
    pub fn partition_of(&self, id: &str) -> usize {
        partition_of(id, self.partitions())
    }

    /// The partition count this handle runs with (the slots' `layout`).
    pub(crate) fn layout_partitions(&self) -> u16 {
        self.inner.slots[0].layout()
    }

    /// The error of a handle whose queue now has (or is moving to) `now` partitions; the
    /// handle remembers it (see [`Queue::layout_changed`]) and says so in the log once.
    pub(crate) fn moved(&self, now: u16) -> QueueError {
        use std::sync::atomic::Ordering;
        let e = QueueError::LayoutChanged {
            queue: self.config().name.clone(),
            have: self.layout_partitions(),
            now,
        };
        if self
            .inner
            .moved_to
            .swap(u32::from(now.max(1)), Ordering::Relaxed)
            == 0
        {
            tracing::error!("{e}; its claims and reads by id refuse too");
        }
        e
    }

    /// Records what a heartbeat read of the queue's meta hash (`partitions`, `moving_to`):
    /// a repartition that started or finished since this process connected sets the flag,
    /// a layout that is still this handle's clears it (a repartition refused half-way gives
    /// the old one back: `repartition.rs`).
    pub(crate) fn note_layout(&self, partitions: Option<u16>, moving_to: Option<u16>) {
        use std::sync::atomic::Ordering;
        match moving_to.or(partitions.filter(|p| *p != self.layout_partitions())) {
            Some(now) => {
                self.moved(now);
            }
            None => self.inner.moved_to.store(0, Ordering::Relaxed),
        }
    }

    /// [`QueueError::LayoutChanged`] when this process has learnt (by a heartbeat, or an
    /// enqueue the queue refused) that the queue was repartitioned while it ran: its claims
    /// and reads by id would look in the old layout, so they refuse too. `None` while the
    /// layout is this handle's (or nothing has said otherwise yet; an enqueue checks for
    /// itself, inside its script).
    pub fn layout_changed(&self) -> Option<QueueError> {
        use std::sync::atomic::Ordering;
        let now = self.inner.moved_to.load(Ordering::Relaxed);
        (now != 0).then(|| QueueError::LayoutChanged {
            queue: self.config().name.clone(),
            have: self.layout_partitions(),
            now: u16::try_from(now).unwrap_or(u16::MAX),
        })
    }

    /// The queue's slots, one per partition (never empty).
    pub(crate) fn slots(&self) -> &[Slot] {
        &self.inner.slots
    }

    /// The slot task `id` lives in.
    pub(crate) fn slot_of(&self, id: &str) -> &Slot {
        &self.inner.slots[self.partition_of(id)]
    }

    /// The next partition of this process's rotation.
    pub(crate) fn next_partition(&self) -> usize {
        use std::sync::atomic::Ordering;
        self.inner.next_part.fetch_add(1, Ordering::Relaxed) % self.partitions()
    }

    /// Whether the next chained claim should go to the rotation's next partition instead of
    /// staying in the finished task's (once in [`CHAIN_ROTATE`] hops).
    pub(crate) fn chain_rotates(&self) -> bool {
        use std::sync::atomic::Ordering;
        self.inner.chain_hops.fetch_add(1, Ordering::Relaxed) % CHAIN_ROTATE == CHAIN_ROTATE - 1
    }

    /// Runs `f` on every slot (at most [`FAN_OUT`] at once); the answers in slot order. `f`
    /// gets a slot of its own (a cheap clone), so the futures borrow nothing from the queue
    /// (which keeps them `Send` for any caller). Every read or switch that concerns the whole
    /// queue goes through here; the merges of the answers are in `read::merge`.
    pub(crate) async fn fan<T, F, Fut>(&self, f: F) -> Result<Vec<T>>
    where
        F: FnMut(Slot) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let futs: Vec<Fut> = self.slots().iter().cloned().map(f).collect();
        futures::stream::iter(futs)
            .buffered(FAN_OUT)
            .try_collect()
            .await
    }

    /// Groups `ids` by slot: (slot, the indices of its ids in `ids`), slots without ids left
    /// out.
    pub(crate) fn group_by_slot<S: AsRef<str>>(&self, ids: &[S]) -> Vec<(usize, Vec<usize>)> {
        let n = self.partitions();
        let mut groups: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (i, id) in ids.iter().enumerate() {
            groups[partition_of(id.as_ref(), n)].push(i);
        }
        groups
            .into_iter()
            .enumerate()
            .filter(|(_, g)| !g.is_empty())
            .collect()
    }

    /// Runs `f` on each slot with the items of `items` that live there (in their order; at
    /// most [`FAN_OUT`] slots at once) and returns the answers as (slot's items' indices in
    /// `items`, its answer), so a caller can put per-item answers back in item order or sum
    /// the counts.
    pub(crate) async fn by_slot<I, T, F, Fut>(
        &self,
        items: &[I],
        id_of: impl Fn(&I) -> &str,
        mut f: F,
    ) -> Result<Vec<(Vec<usize>, T)>>
    where
        I: Clone,
        F: FnMut(Slot, Vec<I>) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let ids: Vec<&str> = items.iter().map(&id_of).collect();
        let futs: Vec<_> = self
            .group_by_slot(&ids)
            .into_iter()
            .map(|(s, idx)| {
                let chunk: Vec<I> = idx.iter().map(|&i| items[i].clone()).collect();
                let fut = f(self.slots()[s].clone(), chunk);
                async move { Ok::<_, crate::QueueError>((idx, fut.await?)) }
            })
            .collect();
        futures::stream::iter(futs)
            .buffered(FAN_OUT)
            .try_collect()
            .await
    }

    /// Keeps the breaker global across partitions: a partition's breaker that opened by
    /// itself (its share of the errors) opens the closed ones for the rest of its cool-down
    /// (breaker.lua, mode `mirror`). Each partition then sends its own probe after the
    /// cool-down (at most P probes), and each closes on its probe's success. Run by every
    /// worker's reaper (each second by default), so the others follow within about a second.
    /// A queue of one slot has no other breaker to open: nothing to read.
    pub(crate) async fn mirror_breakers(&self) -> Result<()> {
        if self.partitions() < 2 {
            return Ok(());
        }
        let all = self.fan(|s| async move { s.breaker().await }).await?;
        let Some((i, open)) = all
            .iter()
            .enumerate()
            .filter_map(|(i, b)| b.as_ref().map(|b| (i, b)))
            .filter(|(_, b)| b.state == crate::BreakerState::Open && b.by == "auto")
            .max_by_key(|(_, b)| b.until_ms)
        else {
            return Ok(());
        };
        if all.iter().all(Option::is_some) {
            return Ok(());
        }
        let now = self.now_ms().await?;
        let left = open.until_ms - now;
        if left <= 0 {
            return Ok(());
        }
        let who = format!("partition {i}");
        for (s, b) in self.slots().iter().zip(&all) {
            if b.is_none() {
                s.breaker_action("mirror", &who, left.unsigned_abs())
                    .await?;
            }
        }
        Ok(())
    }

    /// A batched write (completions, reschedules, a failure): each slot's items in one call, and the
    /// `next_n` tasks asked for claimed in the slot of the last item (or, every
    /// [`CHAIN_ROTATE`]-th time, in the rotation's next one: then it is a call of its own
    /// unless that slot has items too). No items is a plain claim: a sweep of the slots from
    /// the rotation's next, as `claim` does. Results in item order.
    pub(crate) async fn chained_write<I, R, F, Fut>(
        &self,
        items: &[I],
        id_of: impl Fn(&I) -> &str,
        next_n: usize,
        call: F,
    ) -> Result<(Vec<R>, Vec<crate::Claimed>)>
    where
        I: Clone,
        F: Fn(Slot, Vec<I>, usize) -> Fut,
        Fut: Future<Output = Result<(Vec<R>, Vec<crate::Claimed>)>>,
    {
        // Nothing new from a layout that is not the queue's any more (claim_woken_at).
        let next_n = if self.layout_changed().is_some() {
            0
        } else {
            next_n
        };
        let slots = self.slots();
        let ids: Vec<&str> = items.iter().map(&id_of).collect();
        let groups = self.group_by_slot(&ids);
        let claim_in = match ids.last() {
            Some(last) if !self.chain_rotates() => partition_of(last, slots.len()),
            _ => self.next_partition(),
        };
        let mut out: Vec<Option<R>> = (0..items.len()).map(|_| None).collect();
        let mut claimed = Vec::new();
        let mut claimed_done = next_n == 0;
        for (s, idx) in &groups {
            let next = if *s == claim_in { next_n } else { 0 };
            claimed_done |= *s == claim_in;
            let chunk: Vec<I> = idx.iter().map(|&i| items[i].clone()).collect();
            let (rs, cl) = call(slots[*s].clone(), chunk, next).await?;
            if rs.len() != idx.len() {
                return Err(corrupt("chained write: reply length differs"));
            }
            for (&i, r) in idx.iter().zip(rs) {
                out[i] = Some(r);
            }
            claimed.extend(cl);
        }
        if !claimed_done && items.is_empty() {
            for i in 0..slots.len() {
                let want = next_n - claimed.len();
                let s = &slots[(claim_in + i) % slots.len()];
                let (_, cl) = call(s.clone(), Vec::new(), want).await?;
                claimed.extend(cl);
                if claimed.len() >= next_n {
                    break;
                }
            }
        } else if !claimed_done {
            let (_, cl) = call(slots[claim_in].clone(), Vec::new(), next_n).await?;
            claimed.extend(cl);
        }
        let out = out
            .into_iter()
            .map(|r| r.ok_or_else(|| corrupt("chained write: item without an answer")))
            .collect::<Result<Vec<R>>>()?;
        Ok((out, claimed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::TaskId;

    #[test]
    fn partition_of_is_stable_and_spread() {
        // Fixed values: a change here moves every task of every partitioned queue.
        assert_eq!(partition_of("abc", 1), 0);
        assert_eq!(
            partition_of("", 12),
            (0xcbf2_9ce4_8422_2325u64 % 12) as usize
        );
        let mut counts = [0u32; 12];
        for i in 0..12_000 {
            let id = TaskId::of_upstream_query("", &format!("q{i}"));
            counts[partition_of(id.as_str(), 12)] += 1;
        }
        // Uniform within ±15 % (1,000 expected each).
        assert!(
            counts.iter().all(|&c| (850..=1150).contains(&c)),
            "{counts:?}"
        );
    }

    #[test]
    fn part_config_shares_the_limits() {
        let mut cfg = QueueConfig {
            partitions: 12,
            ..QueueConfig::default()
        };
        cfg.breaker.failures = 20;
        cfg.tenants.concurrency = 5;
        cfg.tenants.rate_per_sec = 24.0;
        cfg.tenants.burst = 3;
        let p = part_config(&cfg);
        assert_eq!(p.partitions, 1);
        assert_eq!(p.breaker.failures, 2);
        assert_eq!(p.tenants.concurrency, 1);
        assert_eq!(p.tenants.rate_per_sec, 2.0);
        assert_eq!(p.tenants.burst, 1);
        cfg.breaker.failures = 0;
        cfg.tenants.concurrency = 0;
        assert_eq!(part_config(&cfg).breaker.failures, 0);
        assert_eq!(part_config(&cfg).tenants.concurrency, 0);
    }
}
