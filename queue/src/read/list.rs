//! Cursor pages of one state ([`Queue::list`]): the sorted sets merged over the slots by
//! (score, id), ready work slot after slot, and the records of the listed ids fetched from
//! their slots.

use crate::decode::parse_i64;
use crate::error::{corrupt, Result};
use crate::model::{ListState, Order, Page, StoredResult, Task};
use crate::Queue;

use super::{merge, ZPage, MAX_PAGE};

impl Queue {
    /// One page of tasks (or results) in a state, in `order`. For the sorted sets, by
    /// (score, id): due time for Waiting, lease deadline for Leased, time of death for Dead,
    /// completion for Results; the cursor is "score:id" of the last item, so paging is stable
    /// while tasks come and go (nothing is skipped or repeated that stayed put). Ready work is
    /// the due-now part of the due zset (polls and retries, by due time), then the interactive
    /// ready list, then the background one (each oldest first); there the cursor names the
    /// last id listed (`"i:<id>"`), found again with LPOS (O(n) in the list: a dashboard read,
    /// never a worker's). Pass the cursor back with the same order.
    ///
    /// Several slots: the same (score, id) cursor goes to every slot and their pages are
    /// merged by (score, id), so order and paging are exactly those of one set; ready work
    /// is listed slot after slot. Errors: a cursor of the wrong shape (`Corrupt`), Redis.
    pub async fn list(
        &self,
        state: ListState,
        order: Order,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page> {
        let limit = limit.clamp(1, MAX_PAGE);
        if state == ListState::Ready {
            return self.list_ready(order, cursor, limit).await;
        }
        // A ready cursor of a partitioned queue ("<partition>/<cursor>") is read as its cursor.
        let cursor = cursor.map(|c| c.split_once('/').map_or(c, |(_, rest)| rest));
        let (min, max) = match state {
            ListState::Waiting => ("after_now", "+inf"),
            _ => ("-inf", "+inf"),
        };
        let parsed = parse_cursor(cursor)?;
        let pages = self
            .fan(|s| {
                let parsed = parsed.clone();
                async move {
                    let k = s.keys();
                    let zset = match state {
                        ListState::Waiting => &k.due,
                        ListState::Leased => &k.lease,
                        ListState::Dead => &k.dead,
                        _ => &k.results,
                    };
                    s.zpage(zset, min, max, parsed, limit, order).await
                }
            })
            .await?;
        self.page_of(state, merge::zpages(pages, order, limit))
            .await
    }

    /// The page of a sorted set's rows: their records (or results), the cursor after them.
    async fn page_of(&self, state: ListState, z: ZPage) -> Result<Page> {
        let mut page = Page {
            total: z.total,
            next_cursor: if z.more { z.last_cursor() } else { None },
            ..Page::default()
        };
        if state == ListState::Results {
            page.results = self.fetch_results(&z.rows).await?;
        } else {
            let rows: Vec<(String, Option<i64>)> = z
                .rows
                .into_iter()
                .map(|(id, score)| (id, (state == ListState::Waiting).then_some(score)))
                .collect();
            page.items = self.fetch_tasks(&rows).await?;
        }
        Ok(page)
    }

    /// Ready work (see [`Queue::list`]): slot after slot, each slot's ready work in its
    /// segments' order; with several slots the cursor is `"<partition>/<slot cursor>"`, with
    /// one it is the slot's cursor.
    async fn list_ready(&self, order: Order, cursor: Option<&str>, limit: usize) -> Result<Page> {
        let now = self.now_ms().await?;
        let counts = self
            .fan(|s| async move { s.ready_count(now).await })
            .await?;
        let slots = self.slots();
        let seq: Vec<usize> = match order {
            Order::OldestFirst => (0..slots.len()).collect(),
            Order::NewestFirst => (0..slots.len()).rev().collect(),
        };
        let (first, mut inner) = match cursor {
            None | Some("") => (seq[0], None),
            Some(c) => resume_at(c, slots.len(), seq[0])?,
        };
        let mut page = Page {
            total: counts.iter().sum(),
            ..Page::default()
        };
        let start = seq.iter().position(|p| *p == first).unwrap_or(0);
        for (n, &p) in seq.iter().enumerate().skip(start) {
            let want = limit - page.items.len();
            if want == 0 {
                break;
            }
            if counts[p] == 0 && inner.is_none() {
                continue;
            }
            let got = slots[p]
                .list_ready(order, inner.take().as_deref(), want)
                .await?;
            page.items.extend(got.items);
            // The slot has more (its page was full, though records that vanished since they
            // were listed may leave this page short): resume in it.
            if let Some(c) = got.next_cursor {
                page.next_cursor = Some(ready_cursor(slots.len(), p, &c));
                break;
            }
            if page.items.len() >= limit {
                page.next_cursor = seq[n + 1..]
                    .iter()
                    .find(|q| counts[**q] > 0)
                    .map(|q| format!("{q}/"));
            }
        }
        Ok(page)
    }

    /// Records of `ids` (with their due score where known), in the order of `ids`, skipping
    /// ids whose record vanished since they were listed.
    pub(super) async fn fetch_tasks(&self, ids: &[(String, Option<i64>)]) -> Result<Vec<Task>> {
        let found = self
            .by_slot(
                ids,
                |(id, _)| id.as_str(),
                |s, sub| async move { s.fetch_tasks(&sub).await },
            )
            .await?;
        Ok(merge::in_item_order(ids.len(), found)
            .into_iter()
            .flatten()
            .flatten()
            .collect())
    }

    /// Stored results of `ids`, in the order of `ids`, skipping those expired since.
    async fn fetch_results(&self, ids: &[(String, i64)]) -> Result<Vec<StoredResult>> {
        let found = self
            .by_slot(
                ids,
                |(id, _)| id.as_str(),
                |s, sub| async move { s.fetch_results(&sub).await },
            )
            .await?;
        Ok(merge::in_item_order(ids.len(), found)
            .into_iter()
            .flatten()
            .flatten()
            .collect())
    }
}

/// The error of a cursor of the wrong shape.
pub(super) fn bad_cursor(c: &str) -> crate::error::QueueError {
    corrupt(format!("bad cursor {c:?}"))
}

/// Whether `c` has the shape of a cursor [`Queue::list`] hands out, so a caller can refuse an
/// edited one before asking: `<score>:<id>` in a sorted set; in the ready list's segments
/// `z:<score>:<id>` (due now), `f:<score>:<tenant>|<id>` (the tenants' fair queue),
/// `i:<id>` / `b:<id>` (the two ready lists), or a bare `z:`, `f:`, `i:`, `b:`.
///
/// A partitioned queue's ready cursor is `<partition>/<one of the above, or empty>`.
pub fn is_list_cursor(c: &str) -> bool {
    let scored = |rest: &str| parse_cursor(Some(rest)).is_ok_and(|p| p.is_some());
    if let Some((p, rest)) = c.split_once('/') {
        return p.len() <= 4
            && p.bytes().all(|b| b.is_ascii_digit())
            && !p.is_empty()
            && (rest.is_empty() || (!rest.contains('/') && is_list_cursor(rest)));
    }
    c.len() <= 200
        && match c.split_once(':') {
            Some(("i" | "b", id)) => id.len() <= 64,
            Some(("z" | "f", rest)) => rest.is_empty() || scored(rest),
            _ => scored(c),
        }
}

/// "score:id" (an empty one is the first page).
pub(super) fn parse_cursor(cursor: Option<&str>) -> Result<Option<(i64, String)>> {
    match cursor {
        None | Some("") => Ok(None),
        Some(c) => {
            let (s, id) = c.split_once(':').ok_or_else(|| bad_cursor(c))?;
            Ok(Some((parse_i64(s)?, id.to_string())))
        }
    }
}

/// Where ready cursor `c` resumes in a queue of `slots` slots: (slot, that slot's cursor).
/// `"<p>/<cursor>"` names slot p; a cursor without one (a slot's own shape) starts at slot
/// `first`. A queue of one slot reads any `"<x>/<cursor>"` as its cursor, as it always has.
fn resume_at(c: &str, slots: usize, first: usize) -> Result<(usize, Option<String>)> {
    let Some((p, rest)) = c.split_once('/') else {
        return Ok((first, Some(c.to_string())));
    };
    if slots == 1 {
        return Ok((0, Some(rest.to_string())));
    }
    match p.parse::<usize>() {
        Ok(p) if p < slots => Ok((p, Some(rest.to_string()))),
        _ => Err(bad_cursor(c)),
    }
}

/// The ready cursor a queue of `slots` slots hands out for slot `p`'s cursor `c`: it names
/// the slot when there are several; a queue of one slot hands out the slot's own cursors (as
/// it always has, so a cursor a client kept stays valid).
fn ready_cursor(slots: usize, p: usize, c: &str) -> String {
    if slots > 1 {
        format!("{p}/{c}")
    } else {
        c.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_cursors_name_the_slot_only_when_there_are_several() {
        assert_eq!(ready_cursor(1, 0, "i:abc"), "i:abc");
        assert_eq!(ready_cursor(3, 2, "i:abc"), "2/i:abc");
        // Both shapes are cursors the API accepts back.
        assert!(is_list_cursor(&ready_cursor(1, 0, "z:5:abc")));
        assert!(is_list_cursor(&ready_cursor(3, 1, "z:5:abc")));
    }

    #[test]
    fn ready_cursors_resume_in_the_slot_they_name() {
        let at = |c: &str, slots| resume_at(c, slots, 0).ok();
        assert_eq!(at("2/i:abc", 3), Some((2, Some("i:abc".into()))));
        assert_eq!(at("1/", 3), Some((1, Some(String::new()))));
        assert_eq!(at("i:abc", 3), Some((0, Some("i:abc".into()))));
        assert_eq!(at("3/i:abc", 3), None);
        assert_eq!(at("x/i:abc", 3), None);
        // One slot: any prefix is read as the slot's cursor, as before partitions existed.
        assert_eq!(at("2/i:abc", 1), Some((0, Some("i:abc".into()))));
        assert_eq!(at("i:abc", 1), Some((0, Some("i:abc".into()))));
    }
}
