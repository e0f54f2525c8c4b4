//! Admin operations on every state, including the empty queue and unknown ids.
use crate::common;

use common::*;
use futures::future::join_all;
use queue::*;

const UNKNOWN: &str = "ffffffffffffffffffffffffffffffff";

/// One task in each state; returns (ready, waiting, leased(id, token), dead, done).
async fn every_state(q: &Queue) -> (TaskId, TaskId, (TaskId, u64), TaskId, TaskId) {
    let p = EnqueuePolicy {
        deadline_ms: 0,
        max_attempts: 1,
        ..EnqueuePolicy::default()
    };
    let id = |s: &str| TaskId::of_query(&normalise_query(s).unwrap());
    for s in ["done", "dead", "waiting", "leased"] {
        q.enqueue(s, "p", &p).await.unwrap();
    }
    // claim them one by one in enqueue order and move each to its state
    let mut claimed = q.claim("w", 10, 60_000).await.unwrap();
    claimed.sort_by_key(|c| c.query.clone());
    for c in &claimed {
        match c.query.as_str() {
            "done" => q.complete(&c.id, c.token, "r", 1).await.unwrap(),
            "dead" => {
                q.fail(&c.id, c.token, "x", Retry::After(0), 1)
                    .await
                    .unwrap();
            }
            "waiting" => {
                q.reschedule(&c.id, c.token, 600_000, None, 1)
                    .await
                    .unwrap();
            }
            _ => {}
        }
    }
    let leased = claimed.iter().find(|c| c.query == "leased").unwrap();
    q.enqueue("ready", "p", &p).await.unwrap();
    (
        id("ready"),
        id("waiting"),
        (leased.id.clone(), leased.token),
        id("dead"),
        id("done"),
    )
}

async fn state_of(q: &Queue, id: &str) -> Option<TaskState> {
    let d = q.get(id).await.unwrap()?;
    match (d.task, d.result) {
        (Some(t), _) => Some(t.state),
        (None, Some(_)) => Some(TaskState::Done),
        _ => None,
    }
}

#[tokio::test]
async fn empty_queue_admin_is_harmless() {
    on_each_layout("adm_empty", async |conf: QueueConfig| {
        let q = queue_with(conf).await;
        assert!(!q.retry(UNKNOWN, "a").await.unwrap());
        assert_eq!(q.retry_all_dead("a").await.unwrap(), 0);
        assert!(!q.cancel(UNKNOWN, "a").await.unwrap());
        assert!(!q.release(UNKNOWN, None, "a").await.unwrap());
        assert!(matches!(
            q.release(UNKNOWN, Some(1), "a").await,
            Err(QueueError::StaleToken)
        ));
        for t in [
            PurgeTarget::Dead,
            PurgeTarget::Results,
            PurgeTarget::History,
            PurgeTarget::Queued,
        ] {
            assert_eq!(q.purge(t, "a").await.unwrap(), 0);
        }
        q.pause("a").await.unwrap();
        q.pause("a").await.unwrap();
        assert!(q.is_paused().await.unwrap());
        q.resume("a").await.unwrap();
        q.resume("a").await.unwrap();
        assert!(!q.is_paused().await.unwrap());
        assert!(q.get(UNKNOWN).await.unwrap().is_none());
        assert!(q.result_by_id(UNKNOWN).await.unwrap().is_none());
        assert_eq!(q.reap(10).await.unwrap(), Reaped::default());
        assert!(q.claim("w", 10, 100).await.unwrap().is_empty());
        assert_eq!(q.next_due_ms().await.unwrap(), None);
        let s = q.stats().await.unwrap();
        assert_eq!((s.ready, s.leased, s.dead, s.results), (0, 0, 0, 0));
    })
    .await;
}

#[tokio::test]
async fn retry_on_every_state() {
    on_each_layout("adm_retry", async |conf: QueueConfig| {
        let q = queue_with(conf).await;
        let (ready, waiting, (leased, _), dead, done) = every_state(&q).await;
        assert!(!q.retry(&ready, "a").await.unwrap());
        assert!(q.retry(&waiting, "a").await.unwrap());
        assert!(!q.retry(&leased, "a").await.unwrap());
        assert!(q.retry(&dead, "a").await.unwrap());
        assert!(!q.retry(&done, "a").await.unwrap());
        assert!(!q.retry(UNKNOWN, "a").await.unwrap());
        let t = q.get(&dead).await.unwrap().unwrap();
        let task = t.task.unwrap();
        assert_eq!(
            (task.state, task.attempts, task.dead_reason),
            (TaskState::Due, 0, None)
        );
        assert_eq!(t.history[0].kind, "retried");
        assert!(t.history[0].detail.contains("by admin a"));
        assert_eq!(q.events(1).await.unwrap()[0].kind, "retried");
        assert_eq!(q.stats().await.unwrap().ready, 3);
        assert_eq!(state_of(&q, &done).await, Some(TaskState::Done));
    })
    .await;
}

#[tokio::test]
async fn cancel_on_every_state() {
    on_each_layout("adm_cancel", async |conf: QueueConfig| {
        let q = queue_with(conf).await;
        let (ready, waiting, (leased, token), dead, done) = every_state(&q).await;
        for id in [&ready, &waiting, &leased, &dead] {
            assert!(q.cancel(id, "a").await.unwrap());
            let d = q.get(id).await.unwrap().unwrap();
            assert!(d.task.is_none());
            assert_eq!(d.history[0].kind, "cancelled");
        }
        assert!(!q.cancel(&done, "a").await.unwrap());
        assert!(!q.cancel(UNKNOWN, "a").await.unwrap());
        assert!(matches!(
            q.complete(&leased, token, "late", 1).await,
            Err(QueueError::StaleToken)
        ));
        let s = q.stats().await.unwrap();
        assert_eq!(
            (s.ready, s.waiting, s.leased, s.dead, s.results),
            (0, 0, 0, 0, 1)
        );
    })
    .await;
}

#[tokio::test]
async fn release_on_every_state() {
    on_each_layout("adm_release", async |conf: QueueConfig| {
        let q = queue_with(conf).await;
        let (ready, waiting, (leased, token), dead, done) = every_state(&q).await;
        for id in [&ready, &waiting, &dead, &done] {
            assert!(!q.release(id, None, "a").await.unwrap());
            assert!(matches!(
                q.release(id, Some(token), "a").await,
                Err(QueueError::StaleToken)
            ));
        }
        assert!(matches!(
            q.release(&leased, Some(token + 1000), "a").await,
            Err(QueueError::StaleToken)
        ));
        assert!(q.release(&leased, None, "a").await.unwrap());
        assert_eq!(state_of(&q, &leased).await, Some(TaskState::Due));
        let h = q.get(&leased).await.unwrap().unwrap().history;
        assert_eq!(h[0].kind, "released");
        assert!(h[0].detail.contains("by admin a"));
        assert!(matches!(
            q.complete(&leased, token, "late", 1).await,
            Err(QueueError::StaleToken)
        ));
    })
    .await;
}

#[tokio::test]
async fn pause_stops_claims_on_every_state() {
    on_each_layout("adm_pause", async |conf: QueueConfig| {
        let q = queue_with(conf).await;
        let (ready, _waiting, (leased, token), _dead, _done) = every_state(&q).await;
        q.pause("a").await.unwrap();
        assert!(q.claim("w", 10, 1000).await.unwrap().is_empty());
        // leases in flight carry on, producers still enqueue
        q.renew(&leased, token, 60_000).await.unwrap();
        q.enqueue("while paused", "p", &EnqueuePolicy::default())
            .await
            .unwrap();
        assert!(q.stats().await.unwrap().paused);
        q.resume("a").await.unwrap();
        let got = q.claim("w", 10, 1000).await.unwrap();
        assert_eq!(got.len(), 2);
        assert!(got.iter().any(|c| c.id == ready));
        // Each partition logs its own pause and resume (one each on an unpartitioned queue).
        let kinds: Vec<_> = q
            .events(5 * q.partitions())
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.kind)
            .collect();
        assert!(kinds.contains(&"paused".to_string()) && kinds.contains(&"resumed".to_string()));
    })
    .await;
}

#[tokio::test]
async fn purge_each_target() {
    on_each_layout("adm_purge", async |conf: QueueConfig| {
        let q = queue_with(conf).await;
        let (ready, waiting, (leased, _), dead, done) = every_state(&q).await;
        // Only the dead task has a stored history (its error and death); the others' entries are
        // derived from their records and results, which a history purge leaves alone (the dead
        // task's record still names the claim its last call ended: `lc`, `lw`).
        assert_eq!(q.purge(PurgeTarget::History, "a").await.unwrap(), 1);
        let kinds = |d: TaskDetail| d.history.into_iter().map(|e| e.kind).collect::<Vec<_>>();
        assert_eq!(
            kinds(q.get(&dead).await.unwrap().unwrap()),
            ["claimed", "enqueued"]
        );
        assert_eq!(kinds(q.get(&ready).await.unwrap().unwrap()), ["enqueued"]);
        assert_eq!(q.purge(PurgeTarget::Dead, "a").await.unwrap(), 1);
        assert_eq!(state_of(&q, &dead).await, None);
        assert_eq!(q.purge(PurgeTarget::Queued, "a").await.unwrap(), 2);
        assert_eq!(state_of(&q, &ready).await, None);
        assert_eq!(state_of(&q, &waiting).await, None);
        assert_eq!(state_of(&q, &leased).await, Some(TaskState::Leased));
        assert_eq!(q.purge(PurgeTarget::Results, "a").await.unwrap(), 1);
        assert_eq!(state_of(&q, &done).await, None);
        let s = q.stats().await.unwrap();
        assert_eq!(
            (s.ready, s.waiting, s.leased, s.dead, s.results),
            (0, 0, 1, 0, 0)
        );
        assert_eq!(q.events(1).await.unwrap()[0].kind, "purged");
    })
    .await;
}

#[tokio::test]
async fn purge_and_retry_all_in_chunks() {
    on_each_layout("adm_chunks", async |conf: QueueConfig| {
        let q = queue_with(conf).await;
        let p = EnqueuePolicy {
            deadline_ms: 0,
            max_attempts: 1,
            ..EnqueuePolicy::default()
        };
        const N: usize = 1234;
        let futs = (0..N).map(|i| {
            let q = q.clone();
            let p = p.clone();
            async move {
                q.enqueue(&format!("chunk {i}"), "", &p)
                    .await
                    .expect("enqueue")
            }
        });
        join_all(futs).await;
        loop {
            let batch = q.claim("w", 500, 60_000).await.unwrap();
            if batch.is_empty() {
                break;
            }
            join_all(
                batch
                    .iter()
                    .map(|c| q.fail(&c.id, c.token, "x", Retry::Dead, 1)),
            )
            .await;
        }
        assert_eq!(q.stats().await.unwrap().dead, N as u64);
        assert_eq!(q.retry_all_dead("a").await.unwrap(), N as u64);
        assert_eq!(q.stats().await.unwrap().ready, N as u64);
        assert_eq!(q.purge(PurgeTarget::Queued, "a").await.unwrap(), N as u64);
        assert_eq!(q.stats().await.unwrap().ready, 0);
    })
    .await;
}

#[tokio::test]
async fn the_audit_log_keeps_the_newest_entries_up_to_its_cap() {
    on_each_layout("adm_audit", async |conf: QueueConfig| {
        let q = queue_with(conf).await;
        assert!(q.audit_log(10).await.unwrap().is_empty());
        for i in 0..AUDIT_CAP + 5 {
            q.audit("alice", "retry", &format!("t{i}"), i as u64)
                .await
                .unwrap();
        }
        let all = q.audit_log(usize::MAX).await.unwrap();
        assert_eq!(all.len(), AUDIT_CAP);
        // Newest first: the last five pushed the five oldest out.
        assert_eq!(all[0].target, format!("t{}", AUDIT_CAP + 4));
        assert_eq!(all[AUDIT_CAP - 1].target, "t5");
        assert!(all[0].at_ms >= all[AUDIT_CAP - 1].at_ms && all[0].at_ms > 0);
        assert_eq!(q.audit_log(3).await.unwrap(), all[..3]);
    })
    .await;
}

#[tokio::test]
async fn the_pause_flag_says_since_when_and_by_whom() {
    on_each_layout("adm_pauseinfo", async |conf: QueueConfig| {
        let q = queue_with(conf).await;
        assert_eq!(q.pause_info().await.unwrap(), None);
        let before = q.now_ms().await.unwrap();
        q.pause("carol").await.unwrap();
        let p = q.pause_info().await.unwrap().expect("paused");
        assert_eq!(p.who, "carol");
        assert!(p.at_ms >= before, "{p:?}");
        q.resume("carol").await.unwrap();
        assert_eq!(q.pause_info().await.unwrap(), None);
    })
    .await;
}

#[tokio::test]
async fn sessions_live_under_a_digest_and_expire_with_their_ttl() {
    on_each_layout("adm_sessions", async |conf: QueueConfig| {
        let name = conf.name.clone();
        let q = queue_with(conf).await;
        let s = q.sessions();
        let digest = "ab".repeat(32);
        s.put(&digest, &("alice", 7), 60).await.unwrap();
        assert_eq!(
            s.get::<(String, u32)>(&digest).await.unwrap(),
            Some(("alice".to_string(), 7))
        );
        // Only a digest names a session: a raw or odd id is never a key.
        let e = s.put("not-a-digest", &1, 60).await.unwrap_err();
        assert!(e.to_string().contains("must be a sha256 digest"), "{e}");
        assert!(snapshot(&name)
            .await
            .iter()
            .all(|(k, _)| !k.contains("not-a-digest")));
        assert_eq!(s.get::<u32>(&format!("{{{name}}}:x")).await.unwrap(), None);
        let mut c = q.connection();
        let key = format!("{{{name}}}:session:{digest}");
        let ttl: i64 = redis::cmd("TTL")
            .arg(&key)
            .query_async(&mut c)
            .await
            .unwrap();
        assert!((1..=60).contains(&ttl), "ttl {ttl}");
        s.delete(&digest).await.unwrap();
        assert_eq!(s.get::<(String, u32)>(&digest).await.unwrap(), None);
    })
    .await;
}

/// "Sign out every session": every live session is deleted in one call, however it was made,
/// and the count says how many were live; the index of sessions goes with them, and a session
/// already ended by itself (signed out) is not counted again.
#[tokio::test]
async fn every_session_is_deleted_at_once_and_counted() {
    on_each_layout("adm_sessions_all", async |conf: QueueConfig| {
        let name = conf.name.clone();
        let q = queue_with(conf).await;
        let s = q.sessions();
        let digests: Vec<String> = (0..3).map(|i| format!("{i:x}").repeat(64)).collect();
        for d in &digests {
            s.put(d, &"someone", 60).await.unwrap();
        }
        s.delete(&digests[2]).await.unwrap();
        assert_eq!(s.delete_all().await.unwrap(), 2);
        for d in &digests {
            assert_eq!(s.get::<String>(d).await.unwrap(), None, "{d}");
        }
        assert!(
            snapshot(&name)
                .await
                .iter()
                .all(|(k, _)| !k.contains(":session")),
            "no session key and no index left"
        );
        assert_eq!(s.delete_all().await.unwrap(), 0);
    })
    .await;
}
