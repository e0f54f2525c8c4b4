//! Completion by the upstream's callback (callback.lua): one life of a task, once, before its
//! expiry, fencing out the worker that holds the lease.
mod common;

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
