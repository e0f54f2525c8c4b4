//! Selecting a bulk action's tasks: the state's set(s) read page by page in each slot, the
//! records' short fields matched against the filter, one scan budget shared by the slots.

use redis::AsyncCommands;

use crate::decode::{self, array};
use crate::error::Result;
use crate::keys::Keys;
use crate::queue::Queue;
use crate::slot::Slot;

use super::{BulkFilter, BulkSelection, BulkState, BULK_SCAN_MAX, SCAN_PAGE};

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
        if let Some(ids) = &filter.ids {
            return self.select_ids(filter, ids, keep, max_scan).await;
        }
        // Slot after slot, sharing the one scan budget.
        let mut out = BulkSelection {
            complete: true,
            ..BulkSelection::default()
        };
        for slot in self.slots() {
            let left = max_scan.saturating_sub(out.scanned);
            if left == 0 {
                out.complete = false;
                break;
            }
            let s = slot
                .select_bounded(filter, keep.saturating_sub(out.ids.len()), left)
                .await?;
            out.scanned += s.scanned;
            out.matched += s.matched;
            out.ids.extend(s.ids);
            out.complete &= s.complete;
        }
        Ok(out)
    }
}

impl Queue {
    /// The chosen `ids` that are (still) in the filter's state and match its other parts, in
    /// the order given, duplicates once; at most `max_scan` of them looked at. The same record
    /// fields and match as the scan of a whole state.
    async fn select_ids(
        &self,
        filter: &BulkFilter,
        ids: &[crate::model::TaskId],
        keep: usize,
        max_scan: u64,
    ) -> Result<BulkSelection> {
        let mut seen = std::collections::BTreeSet::new();
        let unique: Vec<_> = ids.iter().filter(|id| seen.insert(*id)).cloned().collect();
        let look = usize::try_from(max_scan).unwrap_or(usize::MAX);
        let mut out = BulkSelection {
            complete: unique.len() <= look,
            ..BulkSelection::default()
        };
        for page in unique[..unique.len().min(look)].chunks(SCAN_PAGE) {
            let now = self.now_ms().await?;
            let cutoff = filter
                .within_ms
                .map(|w| now.saturating_sub(i64::try_from(w).unwrap_or(i64::MAX)));
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
                            .arg(&["q", "e", "c", "u", "s", "tn"])
                            .query_async::<Vec<Option<String>>>(&mut c)
                            .await
                    }
                }))
                .await?;
            out.scanned += page.len() as u64;
            for (id, f) in page.iter().zip(records) {
                if f.len() < 5 || f[4].as_deref() != Some(filter.state.record_state()) {
                    continue;
                }
                if filter.matches(&f, cutoff) {
                    out.matched += 1;
                    if out.ids.len() < keep {
                        out.ids.push(id.clone());
                    }
                }
            }
        }
        Ok(out)
    }
}

impl Slot {
    /// [`Queue::select_bounded`] in this slot: its state's set(s) page by page.
    async fn select_bounded(
        &self,
        filter: &BulkFilter,
        keep: usize,
        max_scan: u64,
    ) -> Result<BulkSelection> {
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
        let mut out = BulkSelection {
            complete: true,
            ..BulkSelection::default()
        };
        let mut c = self.conn.clone();
        'sources: for (src, lists) in sources {
            let mut offset = 0usize;
            loop {
                if out.scanned >= max_scan {
                    out.complete = false;
                    break 'sources;
                }
                let stop = (offset + SCAN_PAGE - 1) as isize;
                let v: redis::Value = if lists {
                    c.lrange(src, offset as isize, stop).await?
                } else {
                    c.zrange(src, offset as isize, stop).await?
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
                out.scanned += ids.len() as u64;
                let mut p = redis::pipe();
                for id in &ids {
                    p.cmd("HMGET")
                        .arg(k.task(id))
                        .arg("q")
                        .arg("e")
                        .arg("c")
                        .arg("u")
                        .arg("s")
                        .arg("tn");
                }
                let records: Vec<Vec<Option<String>>> = p.query_async(&mut c).await?;
                for (id, f) in ids.into_iter().zip(records) {
                    if f.len() < 5 || f[4].as_deref() != Some(filter.state.record_state()) {
                        continue;
                    }
                    if filter.matches(&f, cutoff) {
                        out.matched += 1;
                        if out.ids.len() < keep {
                            out.ids.push(id);
                        }
                    }
                }
            }
        }
        Ok(out)
    }
}
