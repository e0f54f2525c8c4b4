//! Hot results held in a web process's memory (hot_results.rs): their fresh hits are answered
//! with no script call and counted all the same, and a write of the result by another process
//! — a purge, a completed refresh — or a lost tracking connection is seen by every answer given
//! the bound after it. Each test has a redis-server of its own: they count the server's FCALLs.
use crate::common;

use common::*;
use queue::*;
use std::time::{Duration, Instant};

const BOUND: Duration = Duration::from_millis(50);

/// A web process's handle that holds hot results, and a worker's handle on the same queue.
async fn web_and_worker(server: &Server, name: &str, partitions: u16) -> (Queue, Queue) {
    let conf = QueueConfig {
        name: name.to_string(),
        partitions,
        ..QueueConfig::default()
    };
    let web = Queue::connect(&server.url(), conf.clone()).await.unwrap();
    let settings = HoldSettings {
        max_bytes: 1 << 20,
        bound: BOUND,
    };
    assert!(web.hold_hot_results(&server.url(), settings).unwrap());
    let worker = Queue::connect(&server.url(), conf).await.unwrap();
    (web, worker)
}

/// Stores `data` as the result of `text`, through the worker's handle.
async fn store(worker: &Queue, text: &str, data: &str, policy: &EnqueuePolicy) {
    match worker.enqueue(text, "", policy).await.unwrap() {
        Enqueued::Created(_) | Enqueued::Stale { .. } => {}
        other => panic!("expected a task for {text:?}, got {other:?}"),
    }
    let c = claim_one(worker, "w", 60_000).await;
    worker.complete(&c.id, c.token, data, 1).await.unwrap();
}

/// The data of a fresh hit, or panics with what came instead.
async fn fresh_data(web: &Queue, text: &str) -> String {
    match web
        .enqueue(text, "", &EnqueuePolicy::default())
        .await
        .unwrap()
    {
        Enqueued::Stored(r) => r.data,
        other => panic!("expected a fresh hit of {text:?}, got {other:?}"),
    }
}

/// Asks `text` until the web handle holds it (its asks counted up to `hot_asks` first);
/// returns the answers given.
async fn ask_until_held(web: &Queue, text: &str) -> u64 {
    let held_before = web.held_results();
    let until = Instant::now() + Duration::from_secs(10);
    let mut asks = 0;
    while web.held_results() == held_before {
        assert!(
            Instant::now() < until,
            "{text:?} never held after {asks} asks"
        );
        fresh_data(web, text).await;
        asks += 1;
        sleep_ms(5).await;
    }
    asks
}

/// FCALLs the server has run so far.
async fn fcalls(server: &Server) -> u64 {
    let mut c = raw_on(server).await;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut c)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_fcall:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// Once held, fresh hits make no script call (only the answer counts' flush, once a second),
/// and every one of them is in the per-minute `fresh` counter once the counts are written, as
/// if the script had answered it; on both layouts.
#[tokio::test]
async fn held_fresh_hits_make_no_script_call_and_are_all_counted() {
    for partitions in [1, 3] {
        let server = spawn_redis();
        let (web, worker) = web_and_worker(&server, "held", partitions).await;
        let p = EnqueuePolicy::default();
        store(&worker, "held query", "v1", &p).await;
        let mut answers = ask_until_held(&web, "held query").await;
        assert!(
            answers > u64::from(FreshnessWindows::default().hot_asks),
            "held only once its asks were all counted ({answers} asks)"
        );
        let before = fcalls(&server).await;
        let started = Instant::now();
        for _ in 0..50 {
            assert_eq!(fresh_data(&web, "held query").await, "v1");
        }
        answers += 50;
        let flushes = started.elapsed().as_secs() + 1;
        let made = fcalls(&server).await - before;
        assert!(
            made <= flushes,
            "{made} FCALLs for 50 held hits (P = {partitions})"
        );
        web.flush_answer_counts().await.unwrap();
        let hour = worker.throughput(60, 60).await.unwrap();
        let fresh: u64 = hour.iter().map(|b| b.fresh).sum();
        assert_eq!(fresh, answers, "every fresh hit counted (P = {partitions})");
    }
}

/// A purge made through another process's handle is seen by the web handle's answers the
/// bound after it: the query is asked anew, not answered from memory.
#[tokio::test]
async fn a_purge_elsewhere_is_seen_within_the_bound() {
    let server = spawn_redis();
    let (web, worker) = web_and_worker(&server, "held_purge", 1).await;
    store(&worker, "purged query", "v1", &EnqueuePolicy::default()).await;
    ask_until_held(&web, "purged query").await;
    worker.purge(PurgeTarget::Results, "admin").await.unwrap();
    sleep_ms(BOUND.as_millis() as u64).await;
    match web
        .enqueue("purged query", "", &EnqueuePolicy::default())
        .await
    {
        Ok(Enqueued::Created(_)) => {}
        other => panic!("a purged result answered after the bound: {other:?}"),
    }
    assert_eq!(web.held_results(), 0);
}

/// A refresh completed by a worker is what the web handle answers the bound after it.
#[tokio::test]
async fn a_refresh_elsewhere_is_seen_within_the_bound() {
    let server = spawn_redis();
    let (web, worker) = web_and_worker(&server, "held_refresh", 1).await;
    store(&worker, "refreshed query", "v1", &EnqueuePolicy::default()).await;
    ask_until_held(&web, "refreshed query").await;
    // no-cache: a refresh starts although the result is fresh.
    let no_cache = EnqueuePolicy {
        max_age_ms: Some(0),
        ..EnqueuePolicy::default()
    };
    store(&worker, "refreshed query", "v2", &no_cache).await;
    sleep_ms(BOUND.as_millis() as u64).await;
    assert_eq!(fresh_data(&web, "refreshed query").await, "v2");
}

/// While the tracking connection is gone, nothing is answered from memory (a write then would
/// go unseen); a purge made meanwhile is seen, and once it is back results are held again.
#[tokio::test]
async fn nothing_is_answered_from_memory_without_tracking() {
    let server = spawn_redis();
    let (web, worker) = web_and_worker(&server, "held_lost", 1).await;
    store(&worker, "lost query", "v1", &EnqueuePolicy::default()).await;
    ask_until_held(&web, "lost query").await;
    let mut c = raw_on(&server).await;
    // The tracking connection is the one client with the tracking flag ('t').
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut c)
        .await
        .unwrap();
    let tracking: Vec<&str> = clients
        .lines()
        .filter(|l| {
            l.split(' ')
                .any(|f| f.starts_with("flags=") && f.contains('t'))
        })
        .filter_map(|l| l.split(' ').find_map(|f| f.strip_prefix("id=")))
        .collect();
    assert_eq!(tracking.len(), 1, "{clients}");
    redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(tracking[0])
        .query_async::<()>(&mut c)
        .await
        .unwrap();
    worker.purge(PurgeTarget::Results, "admin").await.unwrap();
    sleep_ms(BOUND.as_millis() as u64).await;
    match web
        .enqueue("lost query", "", &EnqueuePolicy::default())
        .await
    {
        Ok(Enqueued::Created(_)) => {}
        other => panic!("answered from memory without tracking: {other:?}"),
    }
    // Back: held again.
    let c = claim_one(&worker, "w", 60_000).await;
    worker.complete(&c.id, c.token, "v2", 1).await.unwrap();
    ask_until_held(&web, "lost query").await;
    assert_eq!(fresh_data(&web, "lost query").await, "v2");
}

/// A raw connection to `server`.
async fn raw_on(server: &Server) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}
