//! Selecting a bulk action's tasks: the state's set(s) read page by page in each slot (or
//! the chosen ids), the records' short fields matched against the filter, one scan budget
//! shared by the slots. [`Queue::scan_matching`] is the one walk; the bulk selection keeps
//! ids from it, the dashboard's facets and dead work groups (`read::facets`) tally it.

use redis::AsyncCommands;

use crate::decode::{self, array};
use crate::error::Result;
use crate::keys::Keys;
use crate::model::TaskId;
use crate::queue::Queue;
use crate::slot::Slot;

use super::{BulkFilter, BulkSample, BulkSelection, BulkState, BULK_SCAN_MAX, SCAN_PAGE};

/// The record fields a filter reads, in this order (`BulkFilter::matches` and the tallies
/// index them): query, last error, created, updated, state, tenant, dead reason.
pub(crate) const FIELDS: [&str; 7] = ["q", "e", "c", "u", "s", "tn", "dr"];

/// Which end of a state's set a bounded walk starts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Walk {
    /// Lowest score (or list head) first: a bulk run takes the longest-waiting work first.
    OldestFirst,
    /// Highest score (or list tail) first: triage counts, when bounded, describe what is
    /// happening now — the latest deaths after an outage, not the oldest leftovers; for
    /// waiting and leased work the latest due times and lease deadlines.
    NewestFirst,
}

impl Queue {
    /// The tasks `filter` selects: counts all matches (up to [`BULK_SCAN_MAX`] candidates
    /// looked at) and keeps the first `keep` ids. Plain reads, page by page.
    pub async fn bulk_select(&self, filter: &BulkFilter, keep: usize) -> Result<BulkSelection> {
        self.select_bounded(filter, keep, BULK_SCAN_MAX).await
    }

    /// [`Queue::bulk_select`] looking at no more than `max_scan` members of the state's set
    /// (the dashboard's search answers within its time budget with a smaller bound).
    pub async fn select_bounded(
        &self,
        filter: &BulkFilter,
        keep: usize,
        max_scan: u64,
    ) -> Result<BulkSelection> {
        let mut out = BulkSelection::default();
        let (scanned, complete) = self
            .scan_matching(filter, max_scan, Walk::OldestFirst, &mut |id, f| {
                out.matched += 1;
                if out.sample.is_none() {
                    let field = |i: usize| f.get(i).cloned().flatten();
                    out.sample = Some(BulkSample {
                        id: id.clone(),
                        error: field(1),
                        dead_reason: field(6),
                    });
                }
                if out.ids.len() < keep {
                    out.ids.push(id);
                }
            })
            .await?;
        out.scanned = scanned;
        out.complete = complete;
        Ok(out)
    }

    /// Walks what `filter` selects — the state's set(s) slot after slot, or its chosen ids —
    /// looking at no more than `max_scan` members, and hands each matching task's id and
    /// record fields ([`FIELDS`]) to `visit`. Returns (members looked at, whether that was
    /// all of them).
    pub(crate) async fn scan_matching(
        &self,
        filter: &BulkFilter,
        max_scan: u64,
        walk: Walk,
        visit: &mut (dyn FnMut(TaskId, &[Option<String>]) + Send),
    ) -> Result<(u64, bool)> {
        if let Some(ids) = &filter.ids {
            return self.scan_ids(filter, ids, max_scan, visit).await;
        }
        // Slot after slot, sharing the one scan budget.
        let (mut scanned, mut complete) = (0u64, true);
        for slot in self.slots() {
            let left = max_scan.saturating_sub(scanned);
            if left == 0 {
                complete = false;
                break;
            }
            let (n, all) = slot.scan_matching(filter, left, walk, visit).await?;
            scanned += n;
            complete &= all;
        }
        Ok((scanned, complete))
    }

    /// [`Queue::scan_matching`] of the chosen `ids` that are (still) in the filter's state and
    /// match its other parts, in the order given, duplicates once.
    async fn scan_ids(
        &self,
        filter: &BulkFilter,
        ids: &[TaskId],
        max_scan: u64,
        visit: &mut (dyn FnMut(TaskId, &[Option<String>]) + Send),
    ) -> Result<(u64, bool)> {
        let mut seen = std::collections::BTreeSet::new();
        let unique: Vec<_> = ids.iter().filter(|id| seen.insert(*id)).cloned().collect();
        let look = usize::try_from(max_scan).unwrap_or(usize::MAX);
        let mut scanned = 0u64;
        for page in unique[..unique.len().min(look)].chunks(SCAN_PAGE) {
            let cutoff = self.cutoff(filter).await?;
            // One HMGET per id, sent together on the multiplexed connections (each id to
            // its own slot).
            let records: Vec<Vec<Option<String>>> =
                futures::future::try_join_all(page.iter().map(|id| {
                    let slot = self.slot_of(id.as_str());
                    let mut c = slot.conn.clone();
                    let key = slot.keys().task(id);
                    async move {
                        redis::cmd("HMGET")
                            .arg(key)
                            .arg(&FIELDS)
                            .query_async::<Vec<Option<String>>>(&mut c)
                            .await
                    }
                }))
                .await?;
            scanned += page.len() as u64;
            for (id, f) in page.iter().zip(records) {
                if filter.selects(&f, cutoff) {
                    visit(id.clone(), &f);
                }
            }
        }
        Ok((scanned, unique.len() <= look))
    }

    /// The window's start (Redis time − window), if the filter has one.
    async fn cutoff(&self, filter: &BulkFilter) -> Result<Option<i64>> {
        Ok(match filter.within_ms {
            None => None,
            Some(w) => Some(
                self.now_ms()
                    .await?
                    .saturating_sub(i64::try_from(w).unwrap_or(i64::MAX)),
            ),
        })
    }
}

impl BulkFilter {
    /// Whether a record read with [`FIELDS`] is in the filter's state and matches it.
    fn selects(&self, f: &[Option<String>], cutoff: Option<i64>) -> bool {
        f.len() >= 5
            && f[4].as_deref() == Some(self.state.record_state())
            && self.matches(f, cutoff)
    }
}

impl Slot {
    /// [`Queue::scan_matching`] in this slot: its state's set(s) page by page.
    async fn scan_matching(
        &self,
        filter: &BulkFilter,
        max_scan: u64,
        walk: Walk,
        visit: &mut (dyn FnMut(TaskId, &[Option<String>]) + Send),
    ) -> Result<(u64, bool)> {
        let k = self.keys();
        let now = self.now_ms().await?;
        let cutoff = filter
            .within_ms
            .map(|w| now.saturating_sub(i64::try_from(w).unwrap_or(i64::MAX)));
        // (key, is a list): ready work also waits in the fair zset, as "<tenant>|<id>".
        let sources: Vec<(&String, bool)> = match filter.state {
            BulkState::Dead => vec![(&k.dead, false)],
            BulkState::Waiting => vec![(&k.due, false)],
            BulkState::Leased => vec![(&k.lease, false)],
            BulkState::Ready => vec![(&k.fair, false), (&k.ready, true), (&k.ready_bg, true)],
        };
        let (mut scanned, mut complete) = (0u64, true);
        let mut c = self.conn.clone();
        'sources: for (src, lists) in sources {
            let mut offset = 0usize;
            loop {
                if scanned >= max_scan {
                    complete = false;
                    break 'sources;
                }
                let page = SCAN_PAGE.min(usize::try_from(max_scan - scanned).unwrap_or(SCAN_PAGE));
                let (start, stop) = (offset as isize, (offset + page - 1) as isize);
                let v: redis::Value = match (walk, lists) {
                    (Walk::OldestFirst, true) => c.lrange(src, start, stop).await?,
                    (Walk::OldestFirst, false) => c.zrange(src, start, stop).await?,
                    // A list's newest members are at its tail (pushed right): the page
                    // counted from the end, then turned round.
                    (Walk::NewestFirst, true) => {
                        let v: redis::Value = c.lrange(src, -stop - 1, -start - 1).await?;
                        let mut members = array(v)?;
                        members.reverse();
                        redis::Value::Array(members)
                    }
                    (Walk::NewestFirst, false) => c.zrevrange(src, start, stop).await?,
                };
                let ids = array(v)?
                    .iter()
                    .map(|m| {
                        let m = decode::string(m)?;
                        decode::parse_id(Keys::split_fair_member(&m).1)
                    })
                    .collect::<Result<Vec<_>>>()?;
                if ids.is_empty() {
                    break;
                }
                offset += ids.len();
                scanned += ids.len() as u64;
                let mut p = redis::pipe();
                for id in &ids {
                    p.cmd("HMGET").arg(k.task(id)).arg(&FIELDS);
                }
                let records: Vec<Vec<Option<String>>> = p.query_async(&mut c).await?;
                for (id, f) in ids.into_iter().zip(records) {
                    if filter.selects(&f, cutoff) {
                        visit(id, &f);
                    }
                }
            }
        }
        Ok((scanned, complete))
    }
}
