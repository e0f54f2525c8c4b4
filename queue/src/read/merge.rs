//! Every merge of the slots' answers into the queue's one answer, in one place: each takes
//! the answers in slot order (`Queue::fan`) and gives what one slot holding everything would
//! have answered. With one slot each is the identity.

use std::collections::BTreeMap;

use crate::model::{BreakerInfo, BreakerState, Event, Histogram, LeaseInfo, Order, Reaped};
use crate::model::{Stats, ThroughputBucket};

use super::ZPage;

/// The partitions' stats as one: counts summed, the oldest ready age the largest, paused if
/// any partition is, the minutes' counters summed by minute.
pub(crate) fn stats(all: Vec<Stats>) -> Stats {
    let mut it = all.into_iter();
    let mut s = it.next().unwrap_or_default();
    for o in it {
        s.ready += o.ready;
        s.ready_background += o.ready_background;
        s.waiting += o.waiting;
        s.retrying += o.retrying;
        s.leased += o.leased;
        s.stuck += o.stuck;
        s.dead += o.dead;
        s.results += o.results;
        s.oldest_ready_age_ms = s.oldest_ready_age_ms.max(o.oldest_ready_age_ms);
        s.paused |= o.paused;
        s.now_ms = s.now_ms.max(o.now_ms);
        for b in o.throughput {
            if let Some(t) = s.throughput.iter_mut().find(|t| t.minute_ms == b.minute_ms) {
                t.add_counts(&b);
            }
        }
    }
    s
}

/// The slots' pages of one sorted set (each asked with the same cursor and limit) as one
/// page: rows by (score, id) in `order`, the first `limit` of them, totals summed, more if
/// any slot has more or rows were left out.
pub(crate) fn zpages(pages: Vec<ZPage>, order: Order, limit: usize) -> ZPage {
    let total = pages.iter().map(|z| z.total).sum();
    let any_more = pages.iter().any(|z| z.more);
    let mut rows: Vec<(String, i64)> = pages.into_iter().flat_map(|z| z.rows).collect();
    rows.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
    if order == Order::NewestFirst {
        rows.reverse();
    }
    let more = any_more || rows.len() > limit;
    rows.truncate(limit);
    ZPage { total, more, rows }
}

/// Per-item answers back in item order: `groups` holds, per slot, the indices of its items
/// (as `Queue::by_slot` gives them) and its answers, one per item. None where a slot gave
/// fewer answers than items (a caller treats that as no answer).
pub(crate) fn in_item_order<T>(n: usize, groups: Vec<(Vec<usize>, Vec<T>)>) -> Vec<Option<T>> {
    let mut out: Vec<Option<T>> = (0..n).map(|_| None).collect();
    for (idx, answers) in groups {
        for (i, a) in idx.into_iter().zip(answers) {
            out[i] = Some(a);
        }
    }
    out
}

/// The slots' stuck leases as one list: soonest deadline first (then by id), at most `limit`.
pub(crate) fn stuck_leases(all: Vec<Vec<LeaseInfo>>, limit: usize) -> Vec<LeaseInfo> {
    let mut out: Vec<LeaseInfo> = all.into_iter().flatten().collect();
    out.sort_by(|a, b| {
        a.deadline_ms
            .cmp(&b.deadline_ms)
            .then_with(|| a.id.cmp(&b.id))
    });
    out.truncate(limit);
    out
}

/// The slots' throughput points (and their histograms) summed point by point. The first
/// slot's points are the frame: the slots' nodes may disagree on the current minute, so
/// another slot's point is matched by its time, and left out if the frame has none.
pub(crate) fn throughput(
    all: Vec<(Vec<ThroughputBucket>, Vec<[Histogram; 3]>)>,
) -> (Vec<ThroughputBucket>, Vec<[Histogram; 3]>) {
    let mut it = all.into_iter();
    let (mut out, mut hists) = it.next().unwrap_or_default();
    for (o, h) in it {
        for (b, hs) in o.into_iter().zip(h) {
            let Ok(i) = out.binary_search_by_key(&b.minute_ms, |x| x.minute_ms) else {
                continue;
            };
            out[i].add_counts(&b);
            for (mine, theirs) in hists[i].iter_mut().zip(hs.iter()) {
                mine.merge(theirs);
            }
        }
    }
    (out, hists)
}

/// The slots' tenant counts (tenant -> (ready, leased)) summed per tenant.
pub(crate) fn tenant_counts(
    all: Vec<BTreeMap<String, (u64, u64)>>,
) -> BTreeMap<String, (u64, u64)> {
    let mut by: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for (tenant, (ready, leased)) in all.into_iter().flatten() {
        let e = by.entry(tenant).or_default();
        e.0 += ready;
        e.1 += leased;
    }
    by
}

/// The breaker to show of the slots' (each slot has its own; partition.rs): the one most
/// open (open before half-open, then the one open longest), None if all are closed.
pub(crate) fn breaker(all: Vec<Option<BreakerInfo>>) -> Option<BreakerInfo> {
    all.into_iter()
        .flatten()
        .min_by_key(|b| (b.state != BreakerState::Open, b.since_ms))
}

/// The slots' newest events as one list, newest first, at most `count`.
pub(crate) fn events(all: Vec<Vec<Event>>, count: usize) -> Vec<Event> {
    let mut out: Vec<Event> = all.into_iter().flatten().collect();
    // Stream ids are "<ms>-<seq>" (Redis time of the slot's node).
    let key = |e: &Event| {
        let (ms, seq) = e.stream_id.split_once('-').unwrap_or((&e.stream_id, "0"));
        (
            ms.parse::<u64>().unwrap_or(0),
            seq.parse::<u64>().unwrap_or(0),
        )
    };
    out.sort_by_key(|e| std::cmp::Reverse(key(e)));
    out.truncate(count);
    out
}

/// The slots' reaps as one: the requeued and the dead ids, slot after slot.
pub(crate) fn reaped(all: Vec<Reaped>) -> Reaped {
    let mut out = Reaped::default();
    for r in all {
        out.requeued.extend(r.requeued);
        out.dead.extend(r.dead);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zpage(total: u64, more: bool, rows: &[(&str, i64)]) -> ZPage {
        ZPage {
            total,
            more,
            rows: rows.iter().map(|(id, s)| (id.to_string(), *s)).collect(),
        }
    }

    #[test]
    fn zpages_merge_by_score_then_id_in_either_order() {
        let pages = || {
            vec![
                zpage(3, true, &[("b", 1), ("d", 5)]),
                zpage(2, false, &[("a", 1), ("c", 3)]),
            ]
        };
        let z = zpages(pages(), Order::OldestFirst, 3);
        let ids: Vec<&str> = z.rows.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "c"]);
        assert_eq!((z.total, z.more), (5, true));
        let z = zpages(pages(), Order::NewestFirst, 4);
        let ids: Vec<&str> = z.rows.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, ["d", "c", "b", "a"]);
        // One slot's page is its own answer.
        let one = zpages(
            vec![zpage(2, false, &[("x", 1), ("y", 2)])],
            Order::OldestFirst,
            2,
        );
        assert_eq!((one.total, one.more, one.rows.len()), (2, false, 2));
    }

    #[test]
    fn answers_go_back_to_item_order() {
        let groups = vec![(vec![1, 3], vec!["b", "d"]), (vec![0, 2], vec!["a", "c"])];
        let out: Vec<&str> = in_item_order(4, groups).into_iter().flatten().collect();
        assert_eq!(out, ["a", "b", "c", "d"]);
        // A slot that answered fewer items leaves those items without an answer.
        assert_eq!(
            in_item_order(2, vec![(vec![0, 1], vec!["a"])]),
            [Some("a"), None]
        );
    }

    #[test]
    fn events_newest_first_by_stream_id() {
        let ev = |sid: &str| Event {
            stream_id: sid.into(),
            at_ms: 0,
            kind: "k".into(),
            id: None,
            detail: String::new(),
        };
        let all = vec![vec![ev("9-0"), ev("2-1")], vec![ev("10-0"), ev("2-3")]];
        let out: Vec<String> = events(all, 3).into_iter().map(|e| e.stream_id).collect();
        assert_eq!(out, ["10-0", "9-0", "2-3"]);
    }

    #[test]
    fn tenant_counts_sum_per_tenant() {
        let a = BTreeMap::from([("x".to_string(), (1, 2)), ("y".to_string(), (3, 0))]);
        let b = BTreeMap::from([("x".to_string(), (4, 1))]);
        let by = tenant_counts(vec![a, b]);
        assert_eq!(by["x"], (5, 3));
        assert_eq!(by["y"], (3, 0));
    }
}
