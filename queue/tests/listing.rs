//! Listing a queue's tasks by state: stable, complete pages in both orders.
use crate::common;

use common::*;
use queue::*;

/// Walks every page of `state` in `order` (10 per page), optionally cancelling the first item
/// seen once the second page is read; returns the ids in the order listed.
async fn walk(q: &Queue, state: ListState, order: Order, cancel_first: bool) -> Vec<TaskId> {
    let mut seen: Vec<TaskId> = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let p = q.list(state, order, cursor.as_deref(), 10).await.unwrap();
        pages += 1;
        assert!(p.items.len() <= 10);
        seen.extend(p.items.iter().map(|t| t.id.clone()));
        if pages == 2 && cancel_first {
            q.cancel(&seen[0], "admin").await.unwrap();
        }
        match p.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
        assert!(pages < 100, "list never ended");
    }
    seen
}

#[tokio::test]
async fn list_pages_are_stable_and_complete() {
    on_each_layout("life_list", async |conf: QueueConfig| {
        let q = queue_with(conf).await;
        for i in 0..57 {
            q.enqueue(&format!("list {i}"), "p", &EnqueuePolicy::default())
                .await
                .unwrap();
        }
        let mut seen = Vec::new();
        let mut cursor: Option<String> = None;
        let mut pages = 0;
        loop {
            let p = q
                .list(ListState::Ready, Order::OldestFirst, cursor.as_deref(), 10)
                .await
                .unwrap();
            assert_eq!(p.total, 57 - if pages >= 2 { 1 } else { 0 });
            pages += 1;
            seen.extend(p.items.iter().map(|t| t.id.clone()));
            if pages == 2 {
                // removing an already listed item must not shift later pages
                q.cancel(&seen[0], "admin").await.unwrap();
            }
            match p.next_cursor {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
        assert_eq!(pages, 6);
        let uniq: std::collections::HashSet<_> = seen.iter().collect();
        assert_eq!(uniq.len(), 57);
        assert_eq!(seen.len(), 57);
        // Waiting / Leased / Dead / Results listings
        let c = claim_one(&q, "w", 10_000).await;
        let l = q
            .list(ListState::Leased, Order::OldestFirst, None, 10)
            .await
            .unwrap();
        assert_eq!(l.items.len(), 1);
        assert_eq!(l.items[0].state, TaskState::Leased);
        q.reschedule(&c.id, c.token, 60_000, None, 1).await.unwrap();
        let w = q
            .list(ListState::Waiting, Order::OldestFirst, None, 10)
            .await
            .unwrap();
        assert_eq!((w.total, w.items.len()), (1, 1));
        assert_eq!(
            q.list(ListState::Ready, Order::OldestFirst, None, 100)
                .await
                .unwrap()
                .total,
            55
        );
        let c = claim_one(&q, "w", 10_000).await;
        q.complete(&c.id, c.token, "data", 1).await.unwrap();
        let r = q
            .list(ListState::Results, Order::OldestFirst, None, 10)
            .await
            .unwrap();
        assert_eq!(r.results.len(), 1);
        assert_eq!(r.results[0].data, "data");
        assert!(q
            .list(ListState::Dead, Order::OldestFirst, None, 10)
            .await
            .unwrap()
            .items
            .is_empty());
    })
    .await;
}

#[tokio::test]
async fn newest_first_is_the_exact_reverse_and_stable() {
    on_each_layout("life_list_desc", async |conf: QueueConfig| {
        let q = queue_with(conf).await;
        // Several tasks share a due time (same millisecond), so ties are ordered by id.
        for i in 0..43 {
            q.enqueue(&format!("desc {i}"), "p", &EnqueuePolicy::default())
                .await
                .unwrap();
        }
        let asc = walk(&q, ListState::Ready, Order::OldestFirst, false).await;
        let mut desc = walk(&q, ListState::Ready, Order::NewestFirst, false).await;
        assert_eq!(asc.len(), 43);
        desc.reverse();
        assert_eq!(asc, desc, "newest first lists the same ids in reverse");

        // Ready tasks wait in a list in arrival order: newest first, their ready times go down
        // (ties keep the reverse arrival order, which the walk above checked). A partitioned
        // queue lists its ready work partition after partition (Queue::list), so the order
        // holds within each partition.
        let p = q
            .list(ListState::Ready, Order::NewestFirst, None, 43)
            .await
            .unwrap();
        assert_eq!(p.items.len(), 43);
        for part in 0..q.partitions() {
            let keys: Vec<i64> = p
                .items
                .iter()
                .filter(|t| q.partition_of(&t.id) == part)
                .map(|t| t.due_ms.unwrap_or(0))
                .collect();
            let mut sorted = keys.clone();
            sorted.sort_by(|a, b| b.cmp(a));
            assert_eq!(keys, sorted, "partition {part}");
        }
        assert!(p.next_cursor.is_none());

        // Removing an already listed task does not shift later pages: nothing skipped or repeated.
        let newest = walk(&q, ListState::Ready, Order::NewestFirst, true).await;
        let uniq: std::collections::HashSet<_> = newest.iter().collect();
        assert_eq!((newest.len(), uniq.len()), (43, 43));

        // Bounds hold in both orders: the waiting set excludes ready tasks.
        let c = claim_one(&q, "w", 10_000).await;
        q.reschedule(&c.id, c.token, 60_000, None, 1).await.unwrap();
        for order in [Order::OldestFirst, Order::NewestFirst] {
            let w = q.list(ListState::Waiting, order, None, 10).await.unwrap();
            assert_eq!((w.total, w.items.len()), (1, 1));
            assert_eq!(w.items[0].id, c.id);
            let r = q.list(ListState::Ready, order, None, 1000).await.unwrap();
            assert_eq!(r.total, 41);
            assert!(r.items.iter().all(|t| t.id != c.id));
        }
        // An empty set and a cursor past the end give empty pages, not errors.
        let d = q
            .list(ListState::Dead, Order::NewestFirst, None, 10)
            .await
            .unwrap();
        assert!(d.items.is_empty() && d.next_cursor.is_none());
        // Past the end of the last partition listed newest first (partition 0; a cursor of a
        // partitioned queue's ready work is "<partition>/<its cursor>").
        let past_end = if q.partitions() == 1 { "0:0" } else { "0/0:0" };
        let d = q
            .list(ListState::Ready, Order::NewestFirst, Some(past_end), 10)
            .await
            .unwrap();
        assert!(d.items.is_empty() && d.next_cursor.is_none());
    })
    .await;
}
