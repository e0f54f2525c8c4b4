//! Wake-ups: one idle worker is woken per unit of new work (the wake-up list and BLPOP), and
//! the list tracks ready work nobody has claimed. Each test has its own queue name on the
//! suite's private redis-server.

use crate::common;

use std::time::Duration;

use common::*;
use queue::{EnqueuePolicy, Queue, WAKE_CAP};
use redis::AsyncCommands;

async fn wake_len(name: &str) -> usize {
    let mut c = raw().await;
    c.llen(format!("{{{name}}}:wakeups")).await.unwrap()
}

/// Waits (with a deadline) until `srv` has exactly `n` clients blocked (BLPOP). Only for a
/// server of the test's own: the suite's shared server has other tests' waiters.
async fn until_blocked(srv: &Server, n: usize) {
    let mut c = redis::Client::open(srv.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let mut seen = String::new();
    for _ in 0..1000 {
        let info: String = redis::cmd("INFO")
            .arg("clients")
            .query_async(&mut c)
            .await
            .unwrap();
        seen = info
            .lines()
            .find(|l| l.starts_with("blocked_clients:"))
            .unwrap_or("")
            .trim()
            .to_string();
        if seen == format!("blocked_clients:{n}") {
            return;
        }
        sleep_ms(10).await;
    }
    panic!("never saw {n} clients blocked; last {seen}");
}

fn client() -> redis::Client {
    redis::Client::open(server().url()).unwrap()
}

async fn enqueue(q: &Queue, query: &str) {
    q.enqueue(query, "", &EnqueuePolicy::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn one_enqueue_wakes_one_of_four_idle_waiters() {
    let name = "wake_one";
    // A server of its own, so the blocked-client count is this test's alone.
    let srv = spawn_redis();
    let q = Queue::connect(&srv.url(), cfg(name)).await.unwrap();
    let list = format!("{{{name}}}:wakeups");
    let mut raw_own = redis::Client::open(srv.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut handles = Vec::new();
    for i in 0..4 {
        let mut w = q.wakeups(redis::Client::open(srv.url()).unwrap());
        let tx = tx.clone();
        handles.push(tokio::spawn(async move {
            // Long enough never to time out in this test: a wake-up or nothing.
            let got = w.wait(Duration::from_secs(30)).await.unwrap();
            tx.send((i, got)).unwrap();
        }));
    }
    until_blocked(&srv, 4).await;

    enqueue(&q, "wake one a").await;
    let (_, got) = rx.recv().await.unwrap();
    assert!(got, "the woken waiter took an entry");
    // The other three are still blocked, and the entry is gone: nobody else was woken.
    until_blocked(&srv, 3).await;
    assert!(rx.try_recv().is_err());
    assert_eq!(raw_own.llen::<_, usize>(&list).await.unwrap(), 0);

    // Three more units of work wake the other three, one each.
    for i in 0..3 {
        enqueue(&q, &format!("wake one b{i}")).await;
    }
    let mut woken = Vec::new();
    for _ in 0..3 {
        let (i, got) = rx.recv().await.unwrap();
        assert!(got);
        woken.push(i);
    }
    woken.sort();
    woken.dedup();
    assert_eq!(woken.len(), 3, "three distinct waiters");
    for h in handles {
        h.await.unwrap();
    }
    assert_eq!(raw_own.llen::<_, usize>(&list).await.unwrap(), 0);
}

#[tokio::test]
async fn claims_remove_one_entry_per_task_taken() {
    let name = "wake_claims";
    let q = queue(name).await;
    for i in 0..5 {
        enqueue(&q, &format!("wake claims {i}")).await;
    }
    assert_eq!(wake_len(name).await, 5, "one entry per ready task");
    // A busy worker's claim (it was not woken) removes as many entries as tasks it took.
    assert_eq!(q.claim("busy", 3, 10_000).await.unwrap().len(), 3);
    assert_eq!(wake_len(name).await, 2);
    // An idle worker takes an entry by BLPOP, then claims: one entry fewer is removed.
    let mut w = q.wakeups(client());
    assert!(w.wait(Duration::from_secs(5)).await.unwrap());
    assert_eq!(wake_len(name).await, 1);
    assert_eq!(
        q.claim_woken("idle", 10, 10_000, true).await.unwrap().len(),
        2
    );
    assert_eq!(
        wake_len(name).await,
        0,
        "two tasks taken, one entry in hand"
    );
    // Nothing ready: a woken claim that finds nothing removes nothing more.
    enqueue(&q, "wake claims late").await;
    assert!(w.wait(Duration::from_secs(5)).await.unwrap());
    assert_eq!(q.claim("other", 5, 10_000).await.unwrap().len(), 1);
    assert!(q
        .claim_woken("idle", 10, 10_000, true)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(wake_len(name).await, 0);
    // With nothing in the list, a wait times out and says so.
    assert!(!w.wait(Duration::from_millis(50)).await.unwrap());
}

#[tokio::test]
async fn the_list_is_capped() {
    let name = "wake_cap";
    let q = queue(name).await;
    let extra = 5;
    for i in 0..(WAKE_CAP as usize + extra) {
        enqueue(&q, &format!("wake cap {i}")).await;
    }
    assert_eq!(wake_len(name).await, WAKE_CAP as usize);
    // Capped entries cost latency, not work: every task is still claimable.
    let mut n = 0;
    loop {
        let got = q.claim("w", 1000, 10_000).await.unwrap().len();
        if got == 0 {
            break;
        }
        n += got;
    }
    assert_eq!(n, WAKE_CAP as usize + extra);
    assert_eq!(wake_len(name).await, 0);
}

#[tokio::test]
async fn resume_wakes_one_worker_per_ready_task() {
    let name = "wake_resume";
    let q = queue(name).await;
    q.pause("admin").await.unwrap();
    for i in 0..3 {
        enqueue(&q, &format!("wake resume {i}")).await;
    }
    // Idle workers take the entries while paused and claim nothing.
    let mut w = q.wakeups(client());
    for _ in 0..3 {
        assert!(w.wait(Duration::from_secs(5)).await.unwrap());
        assert!(q
            .claim_woken("w", 10, 10_000, true)
            .await
            .unwrap()
            .is_empty());
    }
    assert_eq!(wake_len(name).await, 0);
    q.resume("admin").await.unwrap();
    assert_eq!(
        wake_len(name).await,
        3,
        "one entry per task ready at resume"
    );
}

#[tokio::test]
async fn retry_release_and_immediate_reschedule_wake_too() {
    let name = "wake_more";
    let q = queue(name).await;
    enqueue(&q, "wake more").await;
    let c = q.claim("w", 1, 10_000).await.unwrap().remove(0);
    assert_eq!(wake_len(name).await, 0);
    assert!(q.release(&c.id, Some(c.token), "w").await.unwrap());
    assert_eq!(wake_len(name).await, 1, "released: ready again");
    let c = q.claim("w", 1, 10_000).await.unwrap().remove(0);
    assert_eq!(wake_len(name).await, 0);
    let (res, _) = q
        .reschedule_and_claim(
            &[queue::Reschedule {
                id: c.id.clone(),
                token: c.token,
                delay_ms: 0,
                partial: None,
                latency_ms: 1,
                job: None,
            }],
            "w",
            0,
            10_000,
        )
        .await
        .unwrap();
    res[0].as_ref().unwrap();
    assert_eq!(wake_len(name).await, 1, "a poll due now is ready work");
}
