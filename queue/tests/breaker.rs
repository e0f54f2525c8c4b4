//! The upstream's circuit breaker in Redis (prelude.lua, fail.lua, breaker.lua): it opens on
//! the upstream's errors, stops claims without charging attempts, lets one probe through after
//! its cool-down, and closes on the probe's success or by hand.
mod common;

use common::*;
use queue::*;

fn breaker_cfg(name: &str, failures: u32, cooldown_ms: u64) -> QueueConfig {
    QueueConfig {
        breaker: BreakerConfig {
            failures,
            error_percent: 50,
            cooldown_ms,
        },
        ..cfg(name)
    }
}

async fn enqueue_n(q: &Queue, prefix: &str, n: usize) {
    for i in 0..n {
        q.enqueue(&format!("{prefix} {i}"), "", &EnqueuePolicy::default())
            .await
            .unwrap();
    }
}

async fn attempts(q: &Queue, id: &str) -> u32 {
    q.get(id)
        .await
        .unwrap()
        .unwrap()
        .task
        .expect("live")
        .attempts
}

#[tokio::test]
async fn it_opens_on_errors_waits_without_charging_then_probes_once() {
    let q = queue_with(breaker_cfg("brk_cycle", 3, 300)).await;
    enqueue_n(&q, "brk", 6).await;
    let c = q.claim("w", 6, 30_000).await.unwrap();
    assert_eq!(c.len(), 6);
    // Three errors of the upstream: the third opens it (3 of 3 calls failed).
    for t in &c[..2] {
        q.fail(&t.id, t.token, "HTTP 503", Retry::After(0), 5)
            .await
            .unwrap();
        assert!(q.breaker().await.unwrap().is_none(), "opened too early");
    }
    q.fail(&c[2].id, c[2].token, "HTTP 503", Retry::After(0), 5)
        .await
        .unwrap();
    let b = q.breaker().await.unwrap().expect("open");
    assert_eq!((b.state, b.by.as_str()), (BreakerState::Open, "auto"));
    assert!(b.reason.contains("503"), "{b:?}");
    for t in &c[..3] {
        assert_eq!(attempts(&q, &t.id).await, 1);
    }
    // Calls that were out when it opened fail too: no attempt counted, the task waits ready.
    for t in &c[3..] {
        let r = q
            .fail(&t.id, t.token, "timeout", Retry::After(0), 5)
            .await
            .unwrap();
        assert!(matches!(r, Failed::Retrying { attempts: 0, .. }), "{r:?}");
        assert_eq!(attempts(&q, &t.id).await, 0);
    }
    assert_eq!(q.stats().await.unwrap().ready, 6);
    // Open: nothing is claimed, whatever is ready.
    assert!(q.claim("w", 10, 30_000).await.unwrap().is_empty());
    // After the cool-down one task goes, the probe; nothing else while it is out.
    sleep_ms(350).await;
    let probe = q.claim("w", 10, 30_000).await.unwrap();
    assert_eq!(probe.len(), 1, "one probe");
    let b = q.breaker().await.unwrap().expect("half-open");
    assert_eq!(b.state, BreakerState::HalfOpen);
    assert_eq!(b.probe.as_deref(), Some(probe[0].id.as_str()));
    assert!(q.claim("w", 10, 30_000).await.unwrap().is_empty());
    // The probe fails: open again for a cool-down, the probe's task not charged.
    let before = attempts(&q, &probe[0].id).await;
    q.fail(&probe[0].id, probe[0].token, "HTTP 500", Retry::After(0), 5)
        .await
        .unwrap();
    assert_eq!(attempts(&q, &probe[0].id).await, before);
    assert_eq!(
        q.breaker().await.unwrap().expect("open").state,
        BreakerState::Open
    );
    assert!(q.claim("w", 10, 30_000).await.unwrap().is_empty());
    // Next probe succeeds: closed, and everything flows again.
    sleep_ms(350).await;
    let probe = q.claim("w", 10, 30_000).await.unwrap();
    assert_eq!(probe.len(), 1);
    q.complete(&probe[0].id, probe[0].token, "ok", 5)
        .await
        .unwrap();
    assert!(
        q.breaker().await.unwrap().is_none(),
        "closed by the probe's success"
    );
    assert_eq!(q.claim("w", 10, 30_000).await.unwrap().len(), 5);
    // No task died for the upstream's outage.
    assert_eq!(q.stats().await.unwrap().dead, 0);
}

#[tokio::test]
async fn a_poll_of_the_probe_closes_it_and_a_task_error_never_opens_it() {
    let q = queue_with(breaker_cfg("brk_poll", 1, 100)).await;
    enqueue_n(&q, "poll", 3).await;
    // A permanent error is the task's own (mode dead): the breaker stays closed.
    let c = q.claim("w", 1, 30_000).await.unwrap().remove(0);
    q.fail(&c.id, c.token, "HTTP 404", Retry::Dead, 5)
        .await
        .unwrap();
    assert!(q.breaker().await.unwrap().is_none());
    // One upstream error opens it (failures = 1).
    let c = q.claim("w", 1, 30_000).await.unwrap().remove(0);
    q.fail(&c.id, c.token, "connect", Retry::After(0), 5)
        .await
        .unwrap();
    assert!(q.breaker().await.unwrap().is_some());
    sleep_ms(150).await;
    let p = q.claim("w", 5, 30_000).await.unwrap().remove(0);
    // "Still processing" is an answer: the upstream works again.
    q.reschedule(&p.id, p.token, 0, None, 5).await.unwrap();
    assert!(q.breaker().await.unwrap().is_none());
    assert_eq!(q.claim("w", 5, 30_000).await.unwrap().len(), 2);
}

#[tokio::test]
async fn by_hand_it_opens_and_closes_and_off_it_never_opens() {
    let name = "brk_hand";
    let q = queue_with(breaker_cfg(name, 0, 100)).await;
    enqueue_n(&q, "hand", 12).await;
    // Off (failures = 0): ten upstream errors in a row leave it closed.
    let c = q.claim("w", 10, 30_000).await.unwrap();
    for t in &c {
        q.fail(&t.id, t.token, "HTTP 502", Retry::After(0), 5)
            .await
            .unwrap();
    }
    assert!(q.breaker().await.unwrap().is_none());
    // Opened by an admin: no claims, said who.
    q.open_breaker("alice", 60_000).await.unwrap();
    let b = q.breaker().await.unwrap().expect("open");
    assert_eq!(
        (b.by.as_str(), b.reason.as_str()),
        ("alice", "opened by hand")
    );
    assert!(q.claim("w", 20, 30_000).await.unwrap().is_empty());
    // Closed by an admin: workers are woken for the ready tasks, claims flow.
    let mut r = raw().await;
    let _: () = redis::cmd("DEL")
        .arg(format!("{{{name}}}:wakeups"))
        .query_async(&mut r)
        .await
        .unwrap();
    assert!(q.close_breaker("alice").await.unwrap());
    assert!(!q.close_breaker("alice").await.unwrap(), "closed already");
    let woken: usize = redis::cmd("LLEN")
        .arg(format!("{{{name}}}:wakeups"))
        .query_async(&mut r)
        .await
        .unwrap();
    assert_eq!(woken, 12, "one wake-up per ready task");
    assert_eq!(q.claim("w", 20, 30_000).await.unwrap().len(), 12);
}

/// A partitioned queue keeps one breaker: the partition whose share of the errors opened its
/// breaker opens every other partition's at the next reap (for the rest of its cool-down), so
/// no partition keeps calling a failing upstream; after the cool-down each partition probes
/// and closes on its probe's success.
#[tokio::test]
async fn a_partitions_breaker_opens_them_all_at_the_next_reap() {
    let q = queue_with(QueueConfig {
        partitions: 3,
        // Three errors a minute on the whole queue: one in a partition's share.
        ..breaker_cfg("brk_parts", 3, 300)
    })
    .await;
    enqueue_n(&q, "parts", 30).await;
    let c = q.claim("w", 1, 30_000).await.unwrap().remove(0);
    q.fail(&c.id, c.token, "HTTP 503", Retry::After(0), 5)
        .await
        .unwrap();
    // Its partition is open, the others still claim.
    assert!(q.breaker().await.unwrap().is_some());
    let held = q.claim("w", 30, 30_000).await.unwrap();
    assert!(!held.is_empty());
    for t in &held {
        q.release(&t.id, Some(t.token), "w").await.unwrap();
    }
    q.reap(10).await.unwrap();
    // Now every partition is open: nothing is claimed anywhere.
    assert!(q.claim("w", 30, 30_000).await.unwrap().is_empty());
    let events = q.events(50).await.unwrap();
    let mirrored = events
        .iter()
        .filter(|e| e.kind == "breaker" && e.detail.contains("opened, until"))
        .count();
    assert_eq!(mirrored, 2, "{events:?}");
    // After the cool-down each partition sends one probe; their successes close them all.
    sleep_ms(350).await;
    let probes = q.claim("w", 30, 30_000).await.unwrap();
    assert_eq!(probes.len(), 3, "one probe a partition: {probes:?}");
    for p in &probes {
        q.complete(&p.id, p.token, "ok", 5).await.unwrap();
    }
    let b = q.breaker().await.unwrap();
    assert!(b.is_none(), "{} probes; {b:?}", probes.len());
    q.reap(10).await.unwrap();
    assert!(!q.claim("w", 30, 30_000).await.unwrap().is_empty());
}
