//! The lease life cycle: fencing, reap, reschedule, fail, deadlines, results, reads.
use crate::common;

use common::*;
use queue::*;

fn policy(max_attempts: u32, deadline_ms: u64) -> EnqueuePolicy {
    EnqueuePolicy {
        deadline_ms,
        max_attempts,
        ..EnqueuePolicy::default()
    }
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
        let a = claim_one(&q, "wa", 600_000).await;
        assert_eq!(a.id, t.id);
        assert!(q.reap(10).await.unwrap().requeued.is_empty());
        assert_eq!(q.stats().await.unwrap().stuck, 0);
        expire_lease(&q, &a.id).await;
        assert_eq!(q.stats().await.unwrap().stuck, 1);
        let r = q.reap(10).await.unwrap();
        assert_eq!(r.requeued, vec![t.id.clone()]);
        let b = claim_one(&q, "wb", 10_000).await;
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
        assert_eq!(
            kinds,
            [
                "completed",
                "claimed",
                "lease_expired",
                "claimed",
                "enqueued"
            ]
        );
        // The completion and the claim that made it are read from the result; the lost lease
        // is stored with the claim it ended.
        assert!(d.history[1].detail.contains("by wb"));
        assert!(d.history[2].detail.contains("from wa"));
        assert!(d.history[3].detail.contains("by wa"));
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
        let c = claim_one(&q, "w", 600_000).await;
        expire_lease(&q, &c.id).await;
        assert_eq!(q.reap(10).await.unwrap().requeued, vec![c.id.clone()]);
        let c = claim_one(&q, "w", 600_000).await;
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
        let c = claim_one(&q, "w", 10_000).await;
        let f = q
            .fail(&c.id, c.token, "boom", Retry::After(0), 3)
            .await
            .unwrap();
        assert!(matches!(f, Failed::Retrying { attempts: 1, .. }));
        let c = claim_one(&q, "w", 10_000).await;
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
        let c = claim_one(&q, "w", 10_000).await;
        assert_eq!((c.attempts, c.polls), (1, 1));
        let due = q.reschedule(&c.id, c.token, 0, None, 1).await.unwrap();
        assert!(due > 0);
        let c = claim_one(&q, "w", 10_000).await;
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
        let c = claim_one(&q, "w", 10_000).await;
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
        let c = claim_one(&q, "w", 10_000).await;
        assert_eq!(c.attempts, 1);
        q.fail(&c.id, c.token, "e2", Retry::After(0), 1)
            .await
            .unwrap();
        let c = claim_one(&q, "w", 10_000).await;
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
        let c = claim_one(&q, "w", 10_000).await;
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
        let c = claim_one(&q, "w", 10_000).await;
        assert_eq!(c.deadline_ms, t.deadline_ms);
        // a poll that lands before the deadline is fine
        assert!(q.reschedule(&c.id, c.token, 0, None, 1).await.unwrap() > 0);
        let c = claim_one(&q, "w", 10_000).await;
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
        let c = claim_one(&q, "w", 10_000).await;
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
        let c = claim_one(&q, "w", 10_000).await;
        pass_deadline(&q, &c.id).await;
        assert_eq!(q.reschedule(&c.id, c.token, 0, None, 1).await.unwrap(), 0);
        let t = q.get(&c.id).await.unwrap().unwrap().task.unwrap();
        assert_eq!(t.dead_reason, Some(DeadReason::Deadline));

        // A lease lost after the deadline (reap.lua): dead at once, not made ready for a
        // claim nobody should make (its first loss, far below max_lease_losses).
        q.enqueue("deadline4", "p", &policy(0, 600_000))
            .await
            .unwrap();
        let c = claim_one(&q, "w", 600_000).await;
        pass_deadline(&q, &c.id).await;
        expire_lease(&q, &c.id).await;
        let r = q.reap(10).await.unwrap();
        assert_eq!(
            (r.requeued, r.dead),
            (Vec::<TaskId>::new(), vec![c.id.clone()]),
            "a lease lost past the deadline is reaped dead"
        );
        let t = q.get(&c.id).await.unwrap().unwrap().task.unwrap();
        assert_eq!(t.dead_reason, Some(DeadReason::Deadline));
        assert_eq!(q.stats().await.unwrap().ready, 0);
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
        let c = claim_one(&q, "w", 600_000).await;
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
        let c2 = claim_one(&q, "w2", 1000).await;
        assert!(c2.token > c.token);
        assert_eq!(c2.attempts, 0);
    })
    .await;
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

/// The last line of defence for what an upstream sent: whatever error a caller passes to
/// `fail` (here 300 KB of multi-byte text), the record keeps at most 1,200 bytes of it, each
/// history entry and event at most 1,300, cut on a character boundary with "…" (a cut inside
/// a character would make the record unreadable as text).
#[tokio::test]
async fn a_huge_error_is_cut_in_the_library() {
    on_each_layout("huge_error", async |conf: QueueConfig| {
        let q = queue_with(conf).await;
        // "é" is two bytes: a cut at an even byte count would split one.
        let huge = "é".repeat(150_000);
        q.enqueue("huge-error", "", &policy(5, 0)).await.unwrap();
        let c = claim_one(&q, "w", 10_000).await;
        q.fail(&c.id, c.token, &huge, Retry::After(0), 1)
            .await
            .unwrap();
        let c = claim_one(&q, "w", 10_000).await;
        q.fail(&c.id, c.token, &huge, Retry::Dead, 1).await.unwrap();

        let d = q.get(&c.id).await.unwrap().unwrap();
        let e = d.task.unwrap().last_error.unwrap();
        assert!(e.len() <= 1200 && e.len() > 1150, "{} bytes", e.len());
        assert!(e.starts_with("éé") && e.ends_with("é…"), "{e}");
        let errors: Vec<_> = d.history.iter().filter(|h| h.kind == "error").collect();
        assert_eq!(errors.len(), 2, "{:?}", d.history);
        for h in &d.history {
            assert!(
                h.detail.len() <= 1300,
                "{} bytes: {}",
                h.detail.len(),
                h.kind
            );
        }
        let events = q.events(100).await.unwrap();
        let failed = events
            .iter()
            .find(|ev| ev.kind == "failed" && ev.id.as_ref() == Some(&c.id))
            .expect("the failed event");
        assert!(failed.detail.len() <= 1300, "{} bytes", failed.detail.len());
        let mut r = raw().await;
        let used: u64 = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(task_key(&q, c.id.as_str()))
            // Every field counted: the default samples five and extrapolates, so one large
            // field reads as several (2,952 B instead of ~1.4 KB, varying run to run).
            .arg("SAMPLES")
            .arg(0)
            .query_async(&mut r)
            .await
            .unwrap();
        // The 1,200-byte error, the record's own fields and the failed call's (status,
        // duration, body start, the claim it ended: written empty when unknown, so an earlier
        // failure's never stays beside a new error) in a hashtable-encoded hash: ~2.2 KB.
        assert!(used < 2400, "record {used} B");
    })
    .await;
}
