//! The lease life cycle: fencing, reap, reschedule, fail, deadlines, results, reads.
mod common;

use common::*;
use queue::*;

fn policy(max_attempts: u32, deadline_ms: u64) -> EnqueuePolicy {
    EnqueuePolicy {
        deadline_ms,
        max_attempts,
        ..EnqueuePolicy::default()
    }
}

async fn one(q: &Queue, w: &str, lease: u64) -> Claimed {
    let mut c = q.claim(w, 1, lease).await.unwrap();
    assert_eq!(c.len(), 1, "expected one claim");
    c.remove(0)
}

#[tokio::test]
async fn dead_claimer_is_reaped_and_fenced() {
    on_each_layout("life_dead", async |conf: QueueConfig| {
        let name = conf.name.clone();
        let name = name.as_str();
        let q = queue_with(conf.clone()).await;
        let Enqueued::Created(t) = q.enqueue("dead claimer", "p", &policy(5, 0)).await.unwrap()
        else {
            panic!("created")
        };
        // A lease of ten minutes: nothing is reaped before its deadline, however slow the
        // machine; then the deadline is moved into the past in Redis, as if the claimer died.
        let a = one(&q, "wa", 600_000).await;
        assert_eq!(a.id, t.id);
        assert!(q.reap(10).await.unwrap().requeued.is_empty());
        assert_eq!(q.stats().await.unwrap().stuck, 0);
        expire_lease(&q, &a.id).await;
        assert_eq!(q.stats().await.unwrap().stuck, 1);
        let r = q.reap(10).await.unwrap();
        assert_eq!(r.requeued, vec![t.id.clone()]);
        let b = one(&q, "wb", 10_000).await;
        assert!(b.token > a.token, "fencing token must grow");

        let before = snapshot(name).await;
        assert!(matches!(
            q.complete(&a.id, a.token, "late", 5).await,
            Err(QueueError::StaleToken)
        ));
        assert!(matches!(
            q.renew(&a.id, a.token, 1000).await,
            Err(QueueError::StaleToken)
        ));
        assert!(matches!(
            q.reschedule(&a.id, a.token, 10, None, 1).await,
            Err(QueueError::StaleToken)
        ));
        assert!(matches!(
            q.fail(&a.id, a.token, "e", Retry::After(1), 1).await,
            Err(QueueError::StaleToken)
        ));
        assert!(matches!(
            q.release(&a.id, Some(a.token), "wa").await,
            Err(QueueError::StaleToken)
        ));
        assert_eq!(before, snapshot(name).await, "a stale call wrote something");
        assert!(q.result_by_id(&a.id).await.unwrap().is_none());

        q.complete(&b.id, b.token, "fresh", 5).await.unwrap();
        let r = q.result_by_id(&b.id).await.unwrap().unwrap();
        assert_eq!(r.data, "fresh");
        let d = q.get(&b.id).await.unwrap().unwrap();
        assert!(d.task.is_none());
        let kinds: Vec<_> = d.history.iter().map(|h| h.kind.as_str()).collect();
        assert_eq!(kinds, ["completed", "lease_expired", "claimed", "enqueued"]);
        // The lost lease is stored with the claim it ended; the completion is read from the result.
        assert!(d.history[1].detail.contains("from wa"));
        assert!(d.history[2].detail.contains("by wa"));
        assert!(d.history[0].detail.contains("by wb"));
        // now a finished task is stale too
        assert!(matches!(
            q.complete(&b.id, b.token, "again", 5).await,
            Err(QueueError::StaleToken)
        ));
        // enqueue returns the stored result
        assert!(matches!(
            q.enqueue("dead  claimer", "p", &policy(5, 0)).await.unwrap(),
            Enqueued::Stored(s) if s.data == "fresh"
        ));
    })
    .await;
}

#[tokio::test]
async fn poison_after_max_lease_losses() {
    on_each_layout("life_poison", async |conf: QueueConfig| {
        let mut cfg = conf;
        cfg.max_lease_losses = 2;
        let q = queue_with(cfg).await;
        q.enqueue("poison", "p", &policy(5, 0)).await.unwrap();
        let c = one(&q, "w", 600_000).await;
        expire_lease(&q, &c.id).await;
        assert_eq!(q.reap(10).await.unwrap().requeued, vec![c.id.clone()]);
        let c = one(&q, "w", 600_000).await;
        expire_lease(&q, &c.id).await;
        let r = q.reap(10).await.unwrap();
        assert_eq!(r.dead, vec![c.id.clone()]);
        let t = q.get(&c.id).await.unwrap().unwrap().task.unwrap();
        assert_eq!(t.state, TaskState::Dead);
        assert_eq!(t.dead_reason, Some(DeadReason::Poison));
    })
    .await;
}

#[tokio::test]
async fn reschedule_keeps_attempts_counts_polls() {
    on_each_layout("life_resched", async |conf: QueueConfig| {
        let q = queue_with(conf).await;
        q.enqueue("resched", "p", &policy(5, 0)).await.unwrap();
        let c = one(&q, "w", 10_000).await;
        let f = q
            .fail(&c.id, c.token, "boom", Retry::After(0), 3)
            .await
            .unwrap();
        assert!(matches!(f, Failed::Retrying { attempts: 1, .. }));
        let c = one(&q, "w", 10_000).await;
        assert_eq!((c.attempts, c.polls), (1, 0));
        let now = q.now_ms().await.unwrap();
        let due = q
            .reschedule(&c.id, c.token, 60_000, Some("half"), 7)
            .await
            .unwrap();
        assert!(due >= now + 60_000 && due < now + 70_000);
        let s = q.stats().await.unwrap();
        assert_eq!((s.ready, s.waiting + s.retrying), (0, 1));
        assert_eq!(q.next_due_ms().await.unwrap(), Some(due));
        let t = q.get(&c.id).await.unwrap().unwrap().task.unwrap();
        assert_eq!((t.attempts, t.polls), (1, 1));
        assert_eq!(t.partial.as_deref(), Some("half"));
        assert_eq!(t.due_ms, Some(due));
        assert!(
            q.claim("w", 1, 1000).await.unwrap().is_empty(),
            "not due yet"
        );
        // a poll due now goes straight back
        q.retry(&c.id, "admin").await.unwrap();
        let c = one(&q, "w", 10_000).await;
        assert_eq!((c.attempts, c.polls), (1, 1));
        let due = q.reschedule(&c.id, c.token, 0, None, 1).await.unwrap();
        assert!(due > 0);
        let c = one(&q, "w", 10_000).await;
        assert_eq!(c.polls, 2);
        let polled: u64 = q
            .stats()
            .await
            .unwrap()
            .throughput
            .iter()
            .map(|b| b.polled)
            .sum();
        assert_eq!(polled, 2);
    })
    .await;
}

#[tokio::test]
async fn fail_with_backoff_then_dead_after_max_attempts() {
    on_each_layout("life_fail", async |conf: QueueConfig| {
        let q = queue_with(conf).await;
        q.enqueue("failing", "p", &policy(3, 0)).await.unwrap();
        let c = one(&q, "w", 10_000).await;
        let now = q.now_ms().await.unwrap();
        // A backoff of an hour: still in backoff at the next claim however slow the machine;
        // then its end is moved into the past in Redis.
        let Failed::Retrying { due_at, attempts } = q
            .fail(&c.id, c.token, "e1", Retry::After(3_600_000), 1)
            .await
            .unwrap()
        else {
            panic!("retrying")
        };
        assert_eq!(attempts, 1);
        assert!(due_at >= now + 3_600_000);
        let s = q.stats().await.unwrap();
        assert_eq!((s.retrying, s.waiting, s.ready), (1, 0, 0));
        assert!(
            q.claim("w", 1, 1000).await.unwrap().is_empty(),
            "in backoff"
        );
        bring_due(&q, &c.id).await;
        let c = one(&q, "w", 10_000).await;
        assert_eq!(c.attempts, 1);
        q.fail(&c.id, c.token, "e2", Retry::After(0), 1)
            .await
            .unwrap();
        let c = one(&q, "w", 10_000).await;
        let f = q
            .fail(&c.id, c.token, "e3", Retry::After(0), 1)
            .await
            .unwrap();
        assert_eq!(
            f,
            Failed::Dead {
                reason: DeadReason::MaxAttempts
            }
        );
        let t = q.get(&c.id).await.unwrap().unwrap().task.unwrap();
        assert_eq!(t.state, TaskState::Dead);
        assert_eq!(t.last_error.as_deref(), Some("e3"));
        assert_eq!(t.attempts, 3);
        let s = q.stats().await.unwrap();
        assert_eq!((s.dead, s.retrying, s.ready), (1, 0, 0));
        let failed: u64 = s.throughput.iter().map(|b| b.failed).sum();
        assert_eq!(failed, 3);

        // Retry::Dead is immediate
        q.enqueue("fatal", "p", &policy(3, 0)).await.unwrap();
        let c = one(&q, "w", 10_000).await;
        let f = q.fail(&c.id, c.token, "bad", Retry::Dead, 1).await.unwrap();
        assert_eq!(
            f,
            Failed::Dead {
                reason: DeadReason::Fatal
            }
        );
    })
    .await;
}

#[tokio::test]
async fn whole_life_deadline() {
    on_each_layout("life_deadline", async |conf: QueueConfig| {
        // A deadline ten minutes away: a poll due now lands before it however slow the machine.
        // Polls and retries due after it, and a deadline moved into the past in Redis, kill.
        let q = queue_with(conf).await;
        let Enqueued::Created(t) = q
            .enqueue("deadline", "p", &policy(0, 600_000))
            .await
            .unwrap()
        else {
            panic!()
        };
        assert!(t.deadline_ms >= t.created_ms + 600_000);
        let c = one(&q, "w", 10_000).await;
        assert_eq!(c.deadline_ms, t.deadline_ms);
        // a poll that lands before the deadline is fine
        assert!(q.reschedule(&c.id, c.token, 0, None, 1).await.unwrap() > 0);
        let c = one(&q, "w", 10_000).await;
        // a poll due after the deadline kills it
        assert_eq!(
            q.reschedule(&c.id, c.token, 660_000, None, 1)
                .await
                .unwrap(),
            0
        );
        let t = q.get(&c.id).await.unwrap().unwrap().task.unwrap();
        assert_eq!(t.dead_reason, Some(DeadReason::Deadline));

        // the same for a retry due after the deadline
        q.enqueue("deadline2", "p", &policy(0, 600_000))
            .await
            .unwrap();
        let c = one(&q, "w", 10_000).await;
        let f = q
            .fail(&c.id, c.token, "e", Retry::After(660_000), 1)
            .await
            .unwrap();
        assert_eq!(
            f,
            Failed::Dead {
                reason: DeadReason::Deadline
            }
        );

        // once the deadline has passed (moved into the past in Redis), even a poll due now kills
        q.enqueue("deadline3", "p", &policy(0, 600_000))
            .await
            .unwrap();
        let c = one(&q, "w", 10_000).await;
        let past = q.now_ms().await.unwrap() - 1;
        let _: () = redis::cmd("HSET")
            .arg(task_key(&q, &c.id))
            .arg("dl")
            .arg(past)
            .query_async(&mut q.connection())
            .await
            .unwrap();
        assert_eq!(q.reschedule(&c.id, c.token, 0, None, 1).await.unwrap(), 0);
        let t = q.get(&c.id).await.unwrap().unwrap().task.unwrap();
        assert_eq!(t.dead_reason, Some(DeadReason::Deadline));
    })
    .await;
}

#[tokio::test]
async fn renew_extends_and_release_returns() {
    on_each_layout("life_renew", async |conf: QueueConfig| {
        let q = queue_with(conf).await;
        q.enqueue("renew", "p", &policy(3, 0)).await.unwrap();
        // The claim's deadline is moved into the past (as a lease that ran out before the
        // reaper came by); the renewal moves it twenty minutes ahead, so the reaper leaves it.
        let c = one(&q, "w", 600_000).await;
        expire_lease(&q, &c.id).await;
        let d = q.renew(&c.id, c.token, 1_200_000).await.unwrap();
        assert!(d > c.lease_deadline_ms);
        assert!(
            q.reap(10).await.unwrap().requeued.is_empty(),
            "renewed lease reaped"
        );
        let stuck = q.stuck_leases(1_300_000, 10).await.unwrap();
        assert_eq!(stuck.len(), 1);
        assert_eq!(stuck[0].worker, "w");
        assert_eq!(stuck[0].token, c.token);
        assert!(stuck[0].overdue_ms < 0);
        assert!(q.stuck_leases(0, 10).await.unwrap().is_empty());
        assert!(q.release(&c.id, Some(c.token), "w").await.unwrap());
        let c2 = one(&q, "w2", 1000).await;
        assert!(c2.token > c.token);
        assert_eq!(c2.attempts, 0);
    })
    .await;
}

#[tokio::test]
async fn an_enqueue_publishes_one_dashboard_message_and_nothing_else() {
    use futures::StreamExt;
    let q = queue("life_pubsub").await;
    let client = redis::Client::open(server().url()).unwrap();
    let mut ps = client.get_async_pubsub().await.unwrap();
    let ch = q.channels();
    let id = TaskId::of_query(&normalise_query("pubsub").unwrap());
    // Every channel of this queue: workers are woken through the wake-up list, not Pub/Sub,
    // and there is no per-task channel (the web process derives live pages from the
    // dashboard channel).
    ps.psubscribe("{life_pubsub}*").await.unwrap();
    q.enqueue("pubsub", "p", &EnqueuePolicy::default())
        .await
        .unwrap();
    // A second dashboard message as an end marker (Pub/Sub keeps order on one connection).
    q.pause("admin").await.unwrap();
    let mut got = Vec::new();
    let mut stream = ps.on_message();
    loop {
        let m = tokio::time::timeout(std::time::Duration::from_secs(10), stream.next())
            .await
            .unwrap()
            .unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&m.get_payload::<String>().unwrap()).unwrap();
        assert_eq!(m.get_channel_name(), ch.dashboard);
        if v["kind"] == "paused" {
            break;
        }
        got.push(v);
    }
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["kind"], "enqueued");
    assert_eq!(got[0]["id"], id.as_str());
    assert!(got[0]["at_ms"].as_i64().unwrap() > 0);
}

#[tokio::test]
async fn workers_joining_and_leaving_wake_the_dashboard() {
    use futures::StreamExt;
    let q = queue("life_worker_news").await;
    let client = redis::Client::open(server().url()).unwrap();
    let mut ps = client.get_async_pubsub().await.unwrap();
    ps.subscribe(&q.channels().dashboard).await.unwrap();
    let w = WorkerInfo {
        // Not hex like task ids: the message must still be valid JSON.
        id: "host \"a\"/1".into(),
        host: "h".into(),
        pid: 1,
        started_ms: 1,
        in_flight: 0,
        completed: 0,
        dead: 0,
        last_seen_ms: 0,
    };
    // Three heartbeats, then a clean stop: one `worker_joined`, one `worker_left`.
    for _ in 0..3 {
        q.heartbeat(&w, 10_000).await.unwrap();
    }
    q.remove_worker(&w.id).await.unwrap();
    // A pause as the end marker (Pub/Sub keeps order on one connection): every message of
    // the heartbeats and the stop came before it, however slowly they were delivered.
    q.pause("admin").await.unwrap();
    let mut stream = ps.on_message();
    let mut kinds = Vec::new();
    loop {
        let m = tokio::time::timeout(std::time::Duration::from_secs(10), stream.next())
            .await
            .expect("the pause's message within 10 s")
            .unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&m.get_payload::<String>().unwrap()).unwrap();
        if v["kind"] == "paused" {
            break;
        }
        assert_eq!(v["worker"], w.id.as_str());
        assert!(v.get("id").is_none(), "not a task event: {v}");
        kinds.push(v["kind"].as_str().unwrap().to_string());
    }
    assert_eq!(kinds, ["worker_joined", "worker_left"]);
}

#[tokio::test]
async fn upstream_rate_limit_is_shared_and_admits_a_burst() {
    // Two handles, as two worker processes would have, share one limiter per queue.
    let a = queue("life_rate").await;
    let b = queue("life_rate").await;
    let other = queue("life_rate_other").await;
    // 1 a second with a burst of 3. What is asserted holds however slowly the calls run
    // (a stall only lets more through, and the bound counts the Redis time that passed):
    // GCRA admits at most `burst + elapsed × rate` calls since the limiter was full.
    let bound = |since: i64, until: i64| 3 + (until - since + 1) / 1000;
    let t0 = a.now_ms().await.unwrap();
    let mut answers = Vec::new();
    for i in 0..6 {
        let h = if i % 2 == 0 { &a } else { &b };
        answers.push(h.upstream_permit(1, 3).await.unwrap());
    }
    let t1 = a.now_ms().await.unwrap();
    // The burst goes at once, whatever the timing.
    assert_eq!(answers[..3], [0, 0, 0], "{answers:?}");
    let admitted = answers.iter().filter(|&&w| w == 0).count() as i64;
    assert!(
        admitted <= bound(t0, t1),
        "{admitted} admitted in {} ms: {answers:?}",
        t1 - t0
    );
    // A refusal names a wait within one interval, and takes nothing: the next refusal's
    // wait is no longer (a refusal that took a permit would push it a second further).
    assert!(answers.iter().all(|&w| w <= 1000), "{answers:?}");
    for pair in answers[3..].windows(2) {
        if pair[0] > 0 && pair[1] > 0 {
            assert!(pair[1] <= pair[0], "a refusal took a permit: {answers:?}");
        }
    }
    // Another queue has its own limiter.
    assert_eq!(other.upstream_permit(1, 1).await.unwrap(), 0);
    // After the longest wait named, one more call is admitted (time only adds permits)...
    let wait = answers.iter().copied().max().unwrap();
    until_redis_time(&a, t1 + i64::try_from(wait).unwrap() + 1).await;
    assert_eq!(a.upstream_permit(1, 3).await.unwrap(), 0);
    // ...and, counted from the start, never more than the bound: at normal speed that is
    // exactly one more, so the next is refused.
    let more = b.upstream_permit(1, 3).await.unwrap();
    let t2 = a.now_ms().await.unwrap();
    let admitted = admitted + 1 + i64::from(more == 0);
    assert!(
        admitted <= bound(t0, t2),
        "{admitted} admitted in {} ms",
        t2 - t0
    );
    // A high rate admits many a second: 1000/s with burst 1 -> waits of about a millisecond.
    let fast = queue("life_rate_fast").await;
    assert_eq!(fast.upstream_permit(1000, 1).await.unwrap(), 0);
    assert!(fast.upstream_permit(1000, 1).await.unwrap() <= 1);
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
        let c = one(&q, "w", 10_000).await;
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
        let c = one(&q, "w", 10_000).await;
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
        let c = one(&q, "w", 10_000).await;
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

#[tokio::test]
async fn workers_events_stats() {
    on_each_layout("life_workers", async |conf: QueueConfig| {
        let name = conf.name.clone();
        let q = queue_with(conf).await;
        let w = WorkerInfo {
            id: "w1".into(),
            host: "h".into(),
            pid: 42,
            started_ms: 1,
            in_flight: 2,
            completed: 3,
            dead: 4,
            last_seen_ms: 0,
        };
        // A heartbeat good for ten minutes, listed however slow the machine; then its record's
        // expiry is moved into the past in Redis (PEXPIREAT in the past: gone at once).
        q.heartbeat(&w, 600_000).await.unwrap();
        let ws = q.workers().await.unwrap();
        assert_eq!(ws.len(), 1);
        assert_eq!(ws[0].pid, 42);
        assert!(ws[0].last_seen_ms > 0);
        let ttl: i64 = redis::cmd("PTTL")
            .arg(format!("{{{name}}}:w:w1"))
            .query_async(&mut q.connection())
            .await
            .unwrap();
        assert!(
            ttl > 0 && ttl <= 600_000,
            "the heartbeat sets its record's expiry: {ttl}"
        );
        let expired: i64 = redis::cmd("PEXPIREAT")
            .arg(format!("{{{name}}}:w:w1"))
            .arg(1)
            .query_async(&mut q.connection())
            .await
            .unwrap();
        assert_eq!(expired, 1);
        assert!(
            q.workers().await.unwrap().is_empty(),
            "expired heartbeat listed"
        );
        q.heartbeat(&w, 10_000).await.unwrap();
        q.remove_worker("w1").await.unwrap();
        assert!(q.workers().await.unwrap().is_empty());

        q.enqueue("ev", "p", &EnqueuePolicy::default())
            .await
            .unwrap();
        q.pause("root").await.unwrap();
        let ev = q.events(10).await.unwrap();
        // An enqueue writes no stream entry (the dashboard is told over Pub/Sub); a pause does.
        assert_eq!(ev[0].kind, "paused");
        let s = q.stats().await.unwrap();
        assert!(s.paused);
        assert_eq!(s.ready, 1);
        assert_eq!(s.throughput.len(), 60);
        assert!(s
            .throughput
            .windows(2)
            .all(|w| w[1].minute_ms - w[0].minute_ms == 60_000));
        assert!(s.oldest_ready_age_ms >= 0);
    })
    .await;
}

#[tokio::test]
async fn invalid_queries_and_config() {
    on_each_layout("life_invalid", async |conf: QueueConfig| {
        let q = queue_with(conf).await;
        assert!(matches!(
            q.enqueue("   ", "p", &EnqueuePolicy::default()).await,
            Err(QueueError::InvalidQuery(_))
        ));
        let bad = QueueConfig {
            name: "a{b".into(),
            ..QueueConfig::default()
        };
        let e = Queue::connect(&server().url(), bad)
            .await
            .expect_err("a name with a brace is refused");
        assert!(e.to_string().contains("without braces"), "{e}");
        // corrupt data never panics
        let mut c = raw().await;
        let id = "0123456789abcdef0123456789abcdef";
        let _: () = redis::cmd("HSET")
            .arg(task_key(&q, id))
            .arg("state")
            .arg("weird")
            .query_async(&mut c)
            .await
            .unwrap();
        assert!(matches!(q.get(id).await, Err(QueueError::Corrupt(_))));
    })
    .await;
}

#[tokio::test]
async fn complete_many_mixes_fresh_and_stale() {
    on_each_layout("life_many", async |conf: QueueConfig| {
        let q = queue_with(conf).await;
        for i in 0..5 {
            q.enqueue(&format!("many {i}"), "p", &EnqueuePolicy::default())
                .await
                .unwrap();
        }
        let got = q.claim("w", 5, 60_000).await.unwrap();
        assert_eq!(got.len(), 5);
        let mut items: Vec<Completion> = got
            .iter()
            .map(|c| Completion {
                id: c.id.clone(),
                token: c.token,
                result: format!("r{}", c.query),
                latency_ms: 1,
            })
            .collect();
        items[1].token += 100; // stale
        items.push(Completion {
            id: "ffffffffffffffffffffffffffffffff".parse().unwrap(),
            token: 1,
            result: "x".into(),
            latency_ms: 1,
        });
        let r = q.complete_many(&items).await.unwrap();
        assert_eq!(r.len(), 6);
        let ok: Vec<bool> = r.iter().map(|x| x.is_ok()).collect();
        assert_eq!(ok, [true, false, true, true, true, false]);
        assert!(matches!(r[1], Err(QueueError::StaleToken)), "{:?}", r[1]);
        // A task that never existed is refused the same way (its token cannot be current).
        assert!(matches!(r[5], Err(QueueError::StaleToken)), "{:?}", r[5]);
        let s = q.stats().await.unwrap();
        assert_eq!((s.results, s.leased), (4, 1));
        let completed: u64 = s.throughput.iter().map(|b| b.completed).sum();
        assert_eq!(completed, 4);
        assert_eq!(
            q.result_by_id(&got[0].id).await.unwrap().unwrap().data,
            format!("r{}", got[0].query)
        );
    })
    .await;
}

/// Batched claim/complete: the deferred "claimed" history entry is visible while leased and
/// lands in order once the lease ends (complete, reschedule, fail, release, cancel); the
/// dashboard gets one message per batch with every id.
/// P = 1 only: it reads the dashboard notices of batched operations, which a partitioned
/// queue publishes per partition touched (a claim, a pause, a batch of completions each
/// send one per partition), so their count and grouping are the one-slot layout's.
#[tokio::test]
async fn batched_history_and_dashboard_ids() {
    use futures::StreamExt;
    let q = queue("life_batch").await;
    let client = redis::Client::open(server().url()).unwrap();
    let mut ps = client.get_async_pubsub().await.unwrap();
    ps.subscribe(&q.channels().dashboard).await.unwrap();
    for i in 0..6 {
        q.enqueue(&format!("batch {i}"), "p", &EnqueuePolicy::default())
            .await
            .unwrap();
    }
    let mut stream = ps.on_message();
    // What the scripts publish (JSON built by hand in Lua) is read with the one decoder the
    // web process uses, the shared model's Notice.
    let mut next = async || -> Notice {
        let m = tokio::time::timeout(std::time::Duration::from_secs(10), stream.next())
            .await
            .unwrap()
            .unwrap();
        Notice::parse(&m.get_payload::<String>().unwrap()).unwrap()
    };
    for i in 0..6 {
        let n = next().await;
        assert_eq!(n.kind, "enqueued");
        let want = TaskId::of_query(&format!("batch {i}"));
        assert_eq!(n.task_ids().collect::<Vec<_>>(), [&want]);
    }
    let c = q.claim("wb", 6, 60_000).await.unwrap();
    assert_eq!(c.len(), 6);
    let m = next().await;
    assert_eq!(m.kind, "claimed");
    assert_eq!(m.id.as_ref(), Some(&c[0].id));
    let ids: Vec<&TaskId> = m.task_ids().collect();
    assert_eq!(ids, c.iter().map(|x| &x.id).collect::<Vec<_>>());
    assert!(m.at_ms > 0);
    q.pause("admin").await.unwrap();
    let paused = next().await;
    assert_eq!((paused.kind.as_str(), paused.id), ("paused", None));
    q.resume("admin").await.unwrap();
    assert_eq!(next().await.kind, "resumed");

    let kinds = async |id: &str| -> Vec<String> {
        let d = q.get(id).await.unwrap().unwrap();
        d.history.iter().map(|h| h.kind.clone()).collect()
    };
    // while leased, the claim is on top of the history
    assert_eq!(kinds(&c[0].id).await, ["claimed", "enqueued"]);
    let d = q.get(&c[0].id).await.unwrap().unwrap();
    assert!(d.history[0].detail.contains("by wb token"));

    let items: Vec<Completion> = c[..3]
        .iter()
        .map(|x| Completion {
            id: x.id.clone(),
            token: x.token,
            result: "r".into(),
            latency_ms: 1,
        })
        .collect();
    assert!(q
        .complete_many(&items)
        .await
        .unwrap()
        .iter()
        .all(|r| r.is_ok()));
    let m = next().await;
    assert_eq!(m.kind, "completed");
    assert_eq!(m.ids.len(), 3);
    for x in &c[..3] {
        assert_eq!(kinds(&x.id).await, ["completed", "enqueued"]);
    }
    // a single completion keeps the plain single-task message
    q.complete(&c[3].id, c[3].token, "r", 1).await.unwrap();
    let m = next().await;
    assert_eq!(m.id.as_ref(), Some(&c[3].id));
    assert!(m.ids.is_empty());

    q.reschedule(&c[4].id, c[4].token, 0, Some("part"), 1)
        .await
        .unwrap();
    // A poll is routine: at the default level it is counted, not listed.
    assert_eq!(kinds(&c[4].id).await, ["enqueued"]);
    assert_eq!(
        q.get(&c[4].id).await.unwrap().unwrap().task.unwrap().polls,
        1
    );
    q.cancel(&c[4].id, "a").await.unwrap();
    assert_eq!(kinds(&c[4].id).await, ["cancelled"]);
    q.release(&c[5].id, Some(c[5].token), "wb").await.unwrap();
    assert_eq!(kinds(&c[5].id).await, ["released", "claimed", "enqueued"]);
    let c5 = one(&q, "wc", 60_000).await;
    q.fail(&c5.id, c5.token, "boom", Retry::Dead, 1)
        .await
        .unwrap();
    assert_eq!(
        kinds(&c5.id).await,
        ["dead", "error", "claimed", "released", "claimed", "enqueued"]
    );
}

#[tokio::test]
async fn reap_trims_throughput_minutes_older_than_a_day() {
    use redis::AsyncCommands;
    let name = "life_tp_trim";
    let q = queue(name).await;
    let now = q.now_ms().await.unwrap();
    let minute = |ms: i64| ms - ms.rem_euclid(60_000);
    let old = minute(now - (THROUGHPUT_RETENTION_MS as i64) - 120_000);
    let recent = minute(now - 3_600_000);
    let mut c = raw().await;
    for m in [old, recent] {
        let _: () = c
            .hset(format!("{{{name}}}:tp"), format!("{m}:completed"), 5)
            .await
            .unwrap();
        let _: () = c
            .zadd(format!("{{{name}}}:tpmin"), m.to_string(), m)
            .await
            .unwrap();
        // A histogram bucket's field, indexed by its own name (as bump_tally writes it).
        let _: () = c
            .hset(format!("{{{name}}}:tp"), format!("{m}:l20"), 2)
            .await
            .unwrap();
        let _: () = c
            .zadd(format!("{{{name}}}:tpmin"), format!("{m}:l20"), m)
            .await
            .unwrap();
    }
    // An hour rolled up more than a week ago: trimmed.
    let ancient = old - old.rem_euclid(3_600_000) - 7 * 86_400_000;
    let _: () = c
        .hset(
            format!("{{{name}}}:tphour"),
            format!("{ancient}:completed"),
            9,
        )
        .await
        .unwrap();
    let _: () = c
        .zadd(format!("{{{name}}}:tphourix"), ancient.to_string(), ancient)
        .await
        .unwrap();
    q.reap(10).await.unwrap();
    let mut fields: Vec<String> = c.hkeys(format!("{{{name}}}:tp")).await.unwrap();
    fields.sort();
    assert_eq!(
        fields,
        vec![format!("{recent}:completed"), format!("{recent}:l20")],
        "only the last day stays"
    );
    let mut minutes: Vec<String> = c.zrange(format!("{{{name}}}:tpmin"), 0, -1).await.unwrap();
    minutes.sort();
    assert_eq!(minutes, vec![recent.to_string(), format!("{recent}:l20")]);
    // The older minute is rolled up into its hour, counters and histogram alike.
    let hour = old - old.rem_euclid(3_600_000);
    let rolled: std::collections::BTreeMap<String, i64> =
        c.hgetall(format!("{{{name}}}:tphour")).await.unwrap();
    assert_eq!(
        rolled,
        [(format!("{hour}:completed"), 5), (format!("{hour}:l20"), 2)]
            .into_iter()
            .collect()
    );
    let mut hours: Vec<String> = c
        .zrange(format!("{{{name}}}:tphourix"), 0, -1)
        .await
        .unwrap();
    hours.sort();
    assert_eq!(hours, vec![hour.to_string(), format!("{hour}:l20")]);
    // The week's view counts both the rolled-up hour and the recent minute.
    let week = q.throughput(7 * 1440, 60).await.unwrap();
    // Hours aligned on the clock: 168, or 169 when the week starts inside an hour.
    assert!(
        week.len() == 168 || week.len() == 169,
        "{} points",
        week.len()
    );
    assert_eq!(week.iter().map(|b| b.completed).sum::<u64>(), 10);
    let at_hour = week.iter().find(|b| b.minute_ms == hour).unwrap();
    assert_eq!(at_hour.completed, 5);
    assert_eq!(at_hour.latency.map(|p| p.count), Some(2));
}

/// The day's throughput rolled up into quarter hours sums exactly the minutes it covers, and
/// the last hour read minute by minute is what stats() returns.
#[tokio::test]
async fn throughput_of_a_day_rolls_up_the_minutes() {
    let q = queue("life_tp_day").await;
    let now = q.now_ms().await.unwrap();
    let minute = now - now % 60_000;
    let mut c = q.connection();
    // Counters as the scripts write them: 3 completions this minute, 5 twenty minutes ago,
    // 7 failures five hours ago, and one 25 hours ago (outside the day: not counted).
    for (ago_min, field, n) in [
        (0, "completed", 3),
        (20, "completed", 5),
        (20, "ttr_sum", 500),
        (300, "failed", 7),
        (1500, "completed", 100),
    ] {
        let m = minute - ago_min * 60_000;
        let _: i64 = redis::cmd("HINCRBY")
            .arg("{life_tp_day}:tp")
            .arg(format!("{m}:{field}"))
            .arg(n)
            .query_async(&mut c)
            .await
            .unwrap();
        let _: i64 = redis::cmd("ZADD")
            .arg("{life_tp_day}:tpmin")
            .arg(m)
            .arg(m)
            .query_async(&mut c)
            .await
            .unwrap();
    }
    let day = q.throughput(1440, 15).await.unwrap();
    assert!(day.len() == 96 || day.len() == 97, "{} points", day.len());
    assert!(day.iter().all(|b| b.minute_ms % (15 * 60_000) == 0));
    assert!(day
        .windows(2)
        .all(|w| w[1].minute_ms - w[0].minute_ms == 15 * 60_000));
    let sum = |f: fn(&ThroughputBucket) -> u64| day.iter().map(f).sum::<u64>();
    assert_eq!(sum(|b| b.completed), 8);
    assert_eq!(sum(|b| b.failed), 7);
    // Every completion counts its time to result.
    assert_eq!((sum(|b| b.ttr_sum_ms), sum(|b| b.ttr_count)), (500, 8));
    assert_eq!(
        day.last().unwrap().minute_ms,
        minute - minute % (15 * 60_000)
    );

    // The last hour minute by minute is what stats() returns: both read within one minute
    // (Redis time before and after), else read again.
    for _ in 0..3 {
        let before = q.now_ms().await.unwrap();
        let hour = q.throughput(60, 1).await.unwrap();
        let stats = q.stats().await.unwrap();
        let after = q.now_ms().await.unwrap();
        if before / 60_000 != after / 60_000 {
            continue;
        }
        assert_eq!(hour.len(), 60);
        assert_eq!(hour, stats.throughput);
        return;
    }
    panic!("three minutes turned between two reads");
}

/// The scripts count time to result, polls per task and upstream latency in the buckets
/// model::histogram defines (Lua and Rust agree at both edges of every bucket up to 2^31 ms),
/// and `throughput` reads the percentiles back from them.
#[tokio::test]
async fn histograms_of_latency_polls_and_time_to_result() {
    use std::collections::BTreeMap;
    let name = "life_hist";
    // A minute turning mid-test splits the counts over two points: try again in a new minute.
    for round in 0..3 {
        let q = queue(&format!("{name}{round}")).await;
        let tp = format!("{{{name}{round}}}:tp");
        let start = q.now_ms().await.unwrap();
        // Latencies at both edges of every bucket up to 2^31, completed in batches.
        let mut latencies: Vec<u64> = Vec::new();
        for k in 0..=::model::histogram::bucket_of(1 << 31) {
            let (low, high) = ::model::histogram::bucket_range(k);
            latencies.push(low);
            if high != low {
                latencies.push(high);
            }
        }
        let queries: Vec<String> = (0..latencies.len()).map(|i| format!("h-{i}")).collect();
        let items: Vec<(&str, &str)> = queries.iter().map(|s| (s.as_str(), "")).collect();
        // The first four are polled twice first (upstream latency 2000 ms each time).
        q.enqueue_many(&items[..4], &Default::default())
            .await
            .unwrap();
        for _ in 0..2 {
            let batch = q.claim("w", 4, 60_000).await.unwrap();
            assert_eq!(batch.len(), 4);
            for c in batch {
                q.reschedule(&c.id, c.token, 0, None, 2000).await.unwrap();
            }
        }
        q.enqueue_many(&items[4..], &Default::default())
            .await
            .unwrap();
        let mut claimed = Vec::new();
        while claimed.len() < latencies.len() {
            let batch = q.claim("w", 100, 60_000).await.unwrap();
            assert!(!batch.is_empty(), "every task is claimable");
            claimed.extend(batch);
        }
        let items: Vec<Completion> = claimed
            .iter()
            .zip(&latencies)
            .map(|(c, l)| Completion {
                id: c.id.clone(),
                token: c.token,
                result: "{}".into(),
                latency_ms: *l,
            })
            .collect();
        for chunk in items.chunks(50) {
            for r in q.complete_many(chunk).await.unwrap() {
                r.unwrap();
            }
        }
        let polls_of: BTreeMap<String, u32> = claimed
            .iter()
            .map(|c| (c.id.to_string(), c.polls))
            .collect();
        let end = q.now_ms().await.unwrap();
        if start / 60_000 != end / 60_000 {
            continue;
        }
        // The raw counters: exactly the buckets Rust computes for the same values.
        let mut expected: BTreeMap<String, i64> = BTreeMap::new();
        let minute = start - start % 60_000;
        for l in latencies.iter().copied().chain([2000; 8]) {
            let b = ::model::histogram::bucket_of(l);
            *expected.entry(format!("{minute}:l{b}")).or_default() += 1;
        }
        for p in polls_of.values() {
            *expected.entry(format!("{minute}:p{p}")).or_default() += 1;
        }
        let mut c = raw().await;
        let all: BTreeMap<String, i64> = redis::AsyncCommands::hgetall(&mut c, &tp).await.unwrap();
        // Fields "<minute>:<kind><bucket>" (not the named counters such as ":polled").
        let bucket_of_kind = |f: &str, kind: char| {
            f.split_once(':').is_some_and(|(_, rest)| {
                rest.strip_prefix(kind)
                    .is_some_and(|b| !b.is_empty() && b.bytes().all(|c| c.is_ascii_digit()))
            })
        };
        let got: BTreeMap<String, i64> = all
            .iter()
            .filter(|(f, _)| bucket_of_kind(f, 'l') || bucket_of_kind(f, 'p'))
            .map(|(f, n)| (f.clone(), *n))
            .collect();
        assert_eq!(got, expected, "latency and polls buckets");
        let ttr_total: i64 = all
            .iter()
            .filter(|(f, _)| bucket_of_kind(f, 't'))
            .map(|(_, n)| n)
            .sum();
        assert_eq!(ttr_total, latencies.len() as i64, "one time to result each");
        // Read back as percentiles: those of a histogram of the same values.
        let hour = q.throughput(60, 60).await.unwrap();
        let point = hour
            .iter()
            .find(|b| b.latency.is_some())
            .expect("a point with latencies");
        let mut h = Histogram::default();
        for l in latencies.iter().copied().chain([2000; 8]) {
            h.add(::model::histogram::bucket_of(l), 1);
        }
        assert_eq!(point.latency, h.percentiles());
        let polls = point.polls.unwrap();
        assert_eq!(
            (polls.p50, polls.p99, polls.count),
            (0, 2, latencies.len() as u64)
        );
        let ttr = point.ttr.unwrap();
        assert!(ttr.p50 <= ttr.p95 && ttr.p95 <= ttr.p99 && ttr.count == latencies.len() as u64);
        assert!(ttr.p99 <= (end - start + 1000) as u64 * 5 / 4, "{ttr:?}");
        return;
    }
    panic!("three minutes turned mid-test");
}
