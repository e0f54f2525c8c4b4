//! Completion by the upstream's callback (callback.lua): one life of a task, once, before its
//! expiry, fencing out the worker that holds the lease.
use crate::common;

use common::*;
use queue::*;

fn created(e: Enqueued) -> Task {
    match e {
        Enqueued::Created(t) => t,
        other => panic!("expected a new task, got {other:?}"),
    }
}

#[tokio::test]
async fn a_callback_completes_a_waiting_task_once() {
    on_each_layout("cb_waiting", async |conf: QueueConfig| {
        let name = conf.name.clone();
        let name = name.as_str();
        let q = queue_with(conf.clone()).await;
        let t = created(
            q.enqueue("cb waiting", "", &EnqueuePolicy::default())
                .await
                .unwrap(),
        );
        assert!(q
            .complete_by_callback(&t.id, t.created_ms, 0, r#"{"n":1}"#)
            .await
            .unwrap());
        let r = q.result_by_id(&t.id).await.unwrap().expect("a result");
        assert_eq!(
            (r.data.as_str(), r.query.as_str()),
            (r#"{"n":1}"#, "cb waiting")
        );
        assert_eq!(r.created_ms, t.created_ms);
        // Gone from the ready list and the counts: nothing is left to claim.
        assert!(q.claim("w", 10, 10_000).await.unwrap().is_empty());
        let s = q.stats().await.unwrap();
        assert_eq!((s.ready, s.leased, s.dead), (0, 0, 0));
        // A replay of the same token finds nothing and writes nothing.
        let before = snapshot(name).await;
        assert!(!q
            .complete_by_callback(&t.id, t.created_ms, 0, r#"{"n":2}"#)
            .await
            .unwrap());
        assert_eq!(
            before,
            snapshot(name).await,
            "a replayed callback wrote something"
        );
    })
    .await;
}

#[tokio::test]
async fn a_callback_fences_out_the_worker_holding_the_lease() {
    on_each_layout("cb_leased", async |conf: QueueConfig| {
        let q = queue_with(conf).await;
        let t = created(
            q.enqueue("cb leased", "", &EnqueuePolicy::default())
                .await
                .unwrap(),
        );
        let c = q.claim("w1", 1, 30_000).await.unwrap().remove(0);
        assert!(q
            .complete_by_callback(&t.id, t.created_ms, 0, r#""from the callback""#)
            .await
            .unwrap());
        assert_eq!(q.stats().await.unwrap().leased, 0, "the lease is gone");
        // The worker's answer arrives late: refused, the callback's result stays.
        let late = q.complete(&c.id, c.token, r#""from the poll""#, 5).await;
        assert!(
            matches!(
                late,
                Err(QueueError::StaleToken) | Err(QueueError::NotFound)
            ),
            "{late:?}"
        );
        assert!(matches!(
            q.reschedule(&c.id, c.token, 10, Some("partial"), 5).await,
            Err(QueueError::StaleToken) | Err(QueueError::NotFound)
        ));
        let r = q.result_by_id(&t.id).await.unwrap().expect("a result");
        assert_eq!(r.data, r#""from the callback""#);
    })
    .await;
}

#[tokio::test]
async fn another_life_an_expired_token_or_a_dead_task_change_nothing() {
    on_each_layout("cb_refused", async |conf: QueueConfig| {
        let name = conf.name.clone();
        let name = name.as_str();
        let q = queue_with(conf.clone()).await;
        let policy = EnqueuePolicy {
            max_attempts: 1,
            ..EnqueuePolicy::default()
        };
        let t = created(q.enqueue("cb refused", "", &policy).await.unwrap());
        let before = snapshot(name).await;
        // Another life of the same id (the creation time differs).
        assert!(!q
            .complete_by_callback(&t.id, t.created_ms + 1, 0, "1")
            .await
            .unwrap());
        // Expired a moment ago (Redis time).
        assert!(!q
            .complete_by_callback(&t.id, t.created_ms, q.now_ms().await.unwrap() - 1, "1")
            .await
            .unwrap());
        // An id nobody enqueued.
        let stranger = TaskId::of_query("nobody asked");
        assert!(!q.complete_by_callback(&stranger, 1, 0, "1").await.unwrap());
        assert_eq!(
            before,
            snapshot(name).await,
            "a refused callback wrote something"
        );
        // A dead task is not revived by a callback.
        let c = q.claim("w", 1, 30_000).await.unwrap().remove(0);
        q.fail(&c.id, c.token, "boom", Retry::After(0), 1)
            .await
            .unwrap();
        assert_eq!(q.stats().await.unwrap().dead, 1);
        let before = snapshot(name).await;
        assert!(!q
            .complete_by_callback(&t.id, t.created_ms, 0, "1")
            .await
            .unwrap());
        assert_eq!(before, snapshot(name).await);
        // Expiry in the future: accepted (a live task, retried back to life first).
        assert!(q.retry(&t.id, "admin").await.unwrap());
        let later = q.now_ms().await.unwrap() + 60_000;
        assert!(q
            .complete_by_callback(&t.id, t.created_ms, later, "7")
            .await
            .unwrap());
    })
    .await;
}

/// The dead task of a failed callback as every reader sees it: the record (dead, reason
/// fatal, the upstream's message as the last error), its history, the events stream, the
/// throughput's failed count and the dead count.
async fn assert_dead_by_callback(q: &Queue, id: &str, message: &str, was: &str) {
    let d = q.get(id).await.unwrap().expect("the task is kept");
    let t = d.task.expect("a dead record");
    assert_eq!(t.state, TaskState::Dead, "{t:?}");
    assert_eq!(t.dead_reason, Some(DeadReason::Fatal), "{t:?}");
    assert_eq!(t.last_error.as_deref(), Some(message), "{t:?}");
    assert!(d.result.is_none(), "no result for a failure");
    let said = |kind: &str, detail: &str| {
        d.history
            .iter()
            .any(|h| h.kind == kind && h.detail == detail)
    };
    assert!(said("error", message), "{:?}", d.history);
    assert!(
        said("dead", &format!("fatal: by callback (was {was})")),
        "{:?}",
        d.history
    );
    let events = q.events(20).await.unwrap();
    assert!(
        events
            .iter()
            .any(|e| e.kind == "dead" && e.id.as_deref() == Some(id) && e.detail == "fatal"),
        "{events:?}"
    );
    let failed: u64 = q
        .throughput(2, 1)
        .await
        .unwrap()
        .iter()
        .map(|b| b.failed)
        .sum();
    assert_eq!(failed, 1, "counted once as failed, as a poll's dead task");
    let s = q.stats().await.unwrap();
    assert_eq!((s.ready, s.leased, s.dead), (0, 0, 1), "{s:?}");
}

/// The (kind, id) of each dashboard message `act` publishes (a pause is the end marker:
/// Pub/Sub keeps order on one connection). Leaves the queue resumed.
async fn dashboard_news(q: &Queue, act: impl AsyncFn()) -> Vec<(String, String)> {
    use futures::StreamExt;
    let client = redis::Client::open(server().url()).unwrap();
    let mut ps = client.get_async_pubsub().await.unwrap();
    ps.subscribe(&q.channels().dashboard).await.unwrap();
    act().await;
    q.pause("test").await.unwrap();
    let mut stream = ps.on_message();
    let mut news = Vec::new();
    loop {
        let m = tokio::time::timeout(std::time::Duration::from_secs(10), stream.next())
            .await
            .expect("the pause's message within 10 s (hang guard)")
            .unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&m.get_payload::<String>().unwrap()).unwrap();
        if v["kind"] == "paused" {
            break;
        }
        news.push((
            v["kind"].as_str().unwrap_or("").to_string(),
            v["id"].as_str().unwrap_or("").to_string(),
        ));
    }
    drop(stream);
    q.resume("test").await.unwrap();
    news
}

#[tokio::test]
async fn a_failed_callback_ends_a_waiting_task_dead_with_the_upstreams_message() {
    on_each_layout("cb_failed", async |conf: QueueConfig| {
        let name = conf.name.clone();
        let name = name.as_str();
        let q = queue_with(conf.clone()).await;
        let t = created(
            q.enqueue("cb failed", "", &EnqueuePolicy::default())
                .await
                .unwrap(),
        );
        let before = snapshot(name).await;
        // Another life of the same id, or an expired token: nothing.
        assert!(!q
            .fail_by_callback(&t.id, t.created_ms + 1, 0, "no such order")
            .await
            .unwrap());
        assert!(!q
            .fail_by_callback(&t.id, t.created_ms, q.now_ms().await.unwrap() - 1, "late")
            .await
            .unwrap());
        assert_eq!(before, snapshot(name).await, "a refused callback wrote");

        let dashboard = dashboard_news(&q, async || {
            assert!(q
                .fail_by_callback(&t.id, t.created_ms, 0, "no such order")
                .await
                .unwrap());
        })
        .await;
        assert_eq!(dashboard, vec![("dead".to_string(), t.id.to_string())]);
        assert_dead_by_callback(&q, &t.id, "no such order", "due").await;
        // Out of its ready list: nothing is left to claim.
        assert!(q.claim("w", 10, 10_000).await.unwrap().is_empty());
        // A replay, failed or done, finds nothing and writes nothing.
        let before = snapshot(name).await;
        assert!(!q
            .fail_by_callback(&t.id, t.created_ms, 0, "again")
            .await
            .unwrap());
        assert!(!q
            .complete_by_callback(&t.id, t.created_ms, 0, "1")
            .await
            .unwrap());
        assert_eq!(before, snapshot(name).await, "a replayed callback wrote");
    })
    .await;
}

#[tokio::test]
async fn a_failed_callback_ends_the_lease_and_fences_out_its_holder() {
    on_each_layout("cb_failed_leased", async |conf: QueueConfig| {
        let name = conf.name.clone();
        let name = name.as_str();
        let q = queue_with(conf.clone()).await;
        let policy = EnqueuePolicy {
            tenant: "acme".into(),
            ..EnqueuePolicy::default()
        };
        let t = created(q.enqueue("cb failed leased", "", &policy).await.unwrap());
        let c = q.claim("w1", 1, 30_000).await.unwrap().remove(0);
        assert_eq!(q.tenants(10).await.unwrap()[0].leased, 1);
        assert!(q
            .fail_by_callback(&t.id, t.created_ms, 0, "gave up")
            .await
            .unwrap());
        assert_dead_by_callback(&q, &t.id, "gave up", "leased").await;
        // The tenant's lease is given back (its fair-share count).
        let leased: u64 = q.tenants(10).await.unwrap().iter().map(|t| t.leased).sum();
        assert_eq!(leased, 0, "the tenant's lease is given back");
        // The worker's answer arrives late: refused, and nothing is written.
        let before = snapshot(name).await;
        let late = q.complete(&c.id, c.token, "\"from the poll\"", 5).await;
        assert!(
            matches!(
                late,
                Err(QueueError::StaleToken) | Err(QueueError::NotFound)
            ),
            "{late:?}"
        );
        let late = q.reschedule(&c.id, c.token, 10, Some("partial"), 5).await;
        assert!(
            matches!(
                late,
                Err(QueueError::StaleToken) | Err(QueueError::NotFound)
            ),
            "{late:?}"
        );
        let late = q.fail(&c.id, c.token, "boom", Retry::After(0), 5).await;
        assert!(
            matches!(
                late,
                Err(QueueError::StaleToken) | Err(QueueError::NotFound)
            ),
            "{late:?}"
        );
        let late = q.renew(&c.id, c.token, 30_000).await;
        assert!(
            matches!(
                late,
                Err(QueueError::StaleToken) | Err(QueueError::NotFound)
            ),
            "{late:?}"
        );
        assert_eq!(before, snapshot(name).await, "a fenced-out worker wrote");
        assert_dead_by_callback(&q, &t.id, "gave up", "leased").await;
    })
    .await;
}
