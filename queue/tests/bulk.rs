//! Bulk actions by filter on a private redis-server: select by state, error text, query text
//! and time window; count; act in chunks; stop between chunks; refuse above the limit, when
//! busy, and when more match than were confirmed.
use crate::common;

use common::*;
use queue::bulk::{BULK_CHUNK, LOCK_MS};
use queue::*;

/// Makes `n` dead tasks `<prefix>-<i>` that died with `error`; returns their ids.
async fn dead_tasks(q: &Queue, prefix: &str, n: usize, error: &str) -> Vec<TaskId> {
    let p = EnqueuePolicy {
        max_attempts: 1,
        ..EnqueuePolicy::default()
    };
    let mut ids = Vec::new();
    for i in 0..n {
        q.enqueue(&format!("{prefix}-{i}"), "", &p).await.unwrap();
    }
    loop {
        let claimed = q.claim("w", 200, 60_000).await.unwrap();
        if claimed.is_empty() {
            break;
        }
        for c in claimed {
            q.fail(&c.id, c.token, error, Retry::Dead, 1).await.unwrap();
            ids.push(c.id);
        }
    }
    assert_eq!(ids.len(), n);
    ids
}

async fn state_of(q: &Queue, id: &str) -> Option<TaskState> {
    q.get(id).await.unwrap()?.task.map(|t| t.state)
}

fn by_error(e: &str) -> BulkFilter {
    BulkFilter {
        state: BulkState::Dead,
        error: Some(e.into()),
        ..BulkFilter::default()
    }
}

/// Counting: by error text (any case), by query text, and by both together; `hit` are the
/// `n503` tasks that died of a 503, beside 40 of a 404.
async fn check_counts_by_error_and_query(q: &Queue, hit: &[TaskId], n503: usize) {
    let sel = q
        .bulk_select(&by_error("http 503"), usize::MAX)
        .await
        .unwrap();
    assert_eq!(sel.matched, n503 as u64);
    assert_eq!(sel.scanned, (n503 + 40) as u64);
    assert!(sel.complete);
    let mut ids = sel.ids.clone();
    ids.sort();
    let mut want = hit.to_vec();
    want.sort();
    assert_eq!(ids, want);
    let by_query = BulkFilter {
        query: Some("REPORT-".into()),
        ..BulkFilter::default()
    };
    assert_eq!(q.bulk_select(&by_query, 0).await.unwrap().matched, 40);
    let both = BulkFilter {
        query: Some("report-".into()),
        ..by_error("503")
    };
    assert_eq!(q.bulk_select(&both, 0).await.unwrap().matched, 0);
}

/// The time window: seven of them changed state ten hours ago (as their records say),
/// and two of those were also created then.
async fn check_counts_within_a_window(q: &Queue, hit: &[TaskId], n503: usize) {
    let now = q.now_ms().await.unwrap();
    let mut c = raw().await;
    for (i, id) in hit.iter().take(7).enumerate() {
        let mut cmd = redis::cmd("HSET");
        cmd.arg(task_key(q, id)).arg("u").arg(now - 10 * 3_600_000);
        if i < 2 {
            cmd.arg("c").arg(now - 11 * 3_600_000);
        } else {
            cmd.arg("c").arg(now - 60_000);
        }
        let _: () = cmd.query_async(&mut c).await.unwrap();
    }
    let recent = BulkFilter {
        within_ms: Some(3_600_000),
        ..by_error("503")
    };
    assert_eq!(
        q.bulk_select(&recent, 0).await.unwrap().matched,
        n503 as u64 - 7
    );
    let created_recently = BulkFilter {
        time_field: TimeField::Created,
        ..recent.clone()
    };
    assert_eq!(
        q.bulk_select(&created_recently, 0).await.unwrap().matched,
        n503 as u64 - 2
    );
}

/// Every start that must be refused is, and leaves every task dead: above the limit, more
/// than confirmed, not applicable, nothing matching.
async fn check_refused_starts_change_nothing(
    q: &Queue,
    hit: &[TaskId],
    miss: &[TaskId],
    n503: usize,
) {
    // Above the limit: refused with the count, nothing changed.
    match q
        .bulk_begin(BulkAction::Retry, &by_error("503"), "ops", 100, None)
        .await
        .unwrap()
    {
        Err(BulkRefused::OverLimit { matched, limit }) => {
            assert_eq!((matched, limit), (n503 as u64, 100))
        }
        other => panic!("expected OverLimit, got {other:?}"),
    }
    // More than confirmed: refused.
    assert!(matches!(
        q.bulk_begin(BulkAction::Retry, &by_error("503"), "ops", 10_000, Some(10))
            .await
            .unwrap(),
        Err(BulkRefused::CountGrew { .. })
    ));
    // Not applicable, nothing matching.
    assert!(matches!(
        q.bulk_begin(
            BulkAction::Retry,
            &BulkFilter {
                state: BulkState::Leased,
                ..BulkFilter::default()
            },
            "ops",
            10_000,
            None
        )
        .await
        .unwrap(),
        Err(BulkRefused::NotApplicable)
    ));
    assert!(matches!(
        q.bulk_begin(
            BulkAction::Retry,
            &by_error("HTTP 418"),
            "ops",
            10_000,
            None
        )
        .await
        .unwrap(),
        Err(BulkRefused::Nothing)
    ));
    for id in hit.iter().chain(miss) {
        assert_eq!(state_of(q, id).await, Some(TaskState::Dead));
    }
}

/// The run: chunk by chunk, progress stored after each; a second start meanwhile is refused.
async fn retry_the_503s_chunk_by_chunk(q: &Queue, n503: usize) {
    let job = q
        .bulk_begin(
            BulkAction::Retry,
            &by_error("503"),
            "ops",
            10_000,
            Some(n503 as u64),
        )
        .await
        .unwrap()
        .expect("started");
    assert_eq!(job.progress().total, n503 as u64);
    let started = q.bulk_progress().await.unwrap().unwrap();
    assert!(started.running());
    assert_eq!(
        (started.done, started.filter.as_str()),
        (0, "dead, error contains \"503\"")
    );
    // A second run while this one holds the slot is refused.
    assert!(matches!(
        q.bulk_begin(BulkAction::Purge, &by_error("404"), "ops", 10_000, None)
            .await
            .unwrap(),
        Err(BulkRefused::Busy(_))
    ));
    let mut seen = Vec::new();
    let qc = q.clone();
    let end = job
        .run_with(|p| {
            let qc = qc.clone();
            seen.push(p.done);
            async move {
                // The stored progress is the one just reported.
                assert_eq!(qc.bulk_progress().await.unwrap().unwrap().done, p.done);
            }
        })
        .await
        .unwrap();
    assert_eq!(
        seen,
        vec![100, 200, 300, n503 as u64],
        "one progress step per chunk of {BULK_CHUNK}"
    );
    assert_eq!(
        (end.state.as_str(), end.done, end.changed),
        ("finished", n503 as u64, n503 as u64)
    );
    assert_eq!(q.bulk_progress().await.unwrap().unwrap(), end);
    assert!(!q.bulk_stop().await.unwrap(), "nothing running to stop");
}

#[tokio::test]
async fn filters_count_and_retry_in_chunks() {
    on_each_layout("bulk_retry", async |conf: QueueConfig| {
        let q = queue_with(conf).await;
        let n503 = 3 * BULK_CHUNK + 7;
        let hit = dead_tasks(&q, "order", n503, "HTTP 503 Service Unavailable").await;
        let miss = dead_tasks(&q, "report", 40, "HTTP 404 Not Found").await;

        check_counts_by_error_and_query(&q, &hit, n503).await;
        check_counts_within_a_window(&q, &hit, n503).await;
        // `keep` bounds the ids, not the count.
        let few = q.bulk_select(&by_error("503"), 5).await.unwrap();
        assert_eq!((few.ids.len(), few.matched), (5, n503 as u64));

        check_refused_starts_change_nothing(&q, &hit, &miss, n503).await;

        retry_the_503s_chunk_by_chunk(&q, n503).await;
        // Retried means ready again with attempts reset; the 404s were not touched.
        for id in &hit {
            let t = q.get(id).await.unwrap().unwrap().task.unwrap();
            assert_eq!((t.state, t.attempts), (TaskState::Due, 0));
        }
        for id in &miss {
            assert_eq!(state_of(&q, id).await, Some(TaskState::Dead));
        }
        // The slot is free again: the 404s can be purged.
        let job = q
            .bulk_begin(BulkAction::Purge, &by_error("404"), "ops", 10_000, None)
            .await
            .unwrap()
            .expect("started");
        let end = job.run().await.unwrap();
        assert_eq!((end.done, end.changed), (40, 40));
        for id in &miss {
            assert_eq!(q.get(id).await.unwrap(), None);
        }
    })
    .await;
}

/// P = 1 only: it holds the bulk lock and reads the dead set by their key names.
#[tokio::test]
async fn a_run_stops_between_chunks() {
    let q = queue("bulk_stop").await;
    let ids = dead_tasks(&q, "stop", 5 * BULK_CHUNK, "HTTP 500").await;
    let job = q
        .bulk_begin(BulkAction::Cancel, &by_error("500"), "ops", 10_000, None)
        .await
        .unwrap()
        .expect("started");
    let qc = q.clone();
    // Stop is asked (as the dashboard's Stop button does, through Redis) after the second
    // chunk; the run notices before the third.
    let end = job
        .run_with(|p| {
            let qc = qc.clone();
            async move {
                // While running, the slot is held with a TTL (renewed after each chunk), so a
                // process that dies mid-run frees it on its own.
                let mut c = raw().await;
                let ttl: i64 = redis::cmd("PTTL")
                    .arg("{bulk_stop}:bulk:lock")
                    .query_async(&mut c)
                    .await
                    .unwrap();
                assert!(ttl > 0 && ttl <= LOCK_MS as i64, "lock ttl {ttl}");
                if p.done == 2 * BULK_CHUNK as u64 {
                    assert!(qc.bulk_stop().await.unwrap());
                }
            }
        })
        .await
        .unwrap();
    assert_eq!(end.state, "stopped");
    assert!(end.stop_requested);
    assert_eq!((end.done, end.changed), (200, 200));
    let stored = q.bulk_progress().await.unwrap().unwrap();
    assert_eq!((stored.state.as_str(), stored.done), ("stopped", 200));
    assert!(stored.ended_ms.is_some());
    // Exactly the first two chunks were cancelled, in the dead set's order; the rest is dead.
    let mut left = 0;
    for id in &ids {
        if state_of(&q, id).await == Some(TaskState::Dead) {
            left += 1;
        }
    }
    assert_eq!(left, 3 * BULK_CHUNK);
    let mut c = raw().await;
    let dead: u64 = redis::cmd("ZCARD")
        .arg("{bulk_stop}:dead")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(dead, 3 * BULK_CHUNK as u64);
    // The lock is released and the progress kept for a while (a TTL, not forever).
    let lock: i64 = redis::cmd("EXISTS")
        .arg("{bulk_stop}:bulk:lock")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(lock, 0);
    let ttl: i64 = redis::cmd("PTTL")
        .arg("{bulk_stop}:bulk")
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(ttl > 0);
}

/// A Stop sent while a run still selects its tasks (after the operator's click, before its
/// first chunk) finds the run (it used to answer "no bulk action is running" and the run then
/// went through): the run ends stopped, having acted on nothing. A start meanwhile is refused
/// as busy, naming the run that selects.
#[tokio::test]
async fn a_stop_sent_while_the_run_selects_stops_it_before_any_chunk() {
    on_each_layout("bulk_stop_early", async |conf: QueueConfig| {
        let q = queue_with(conf).await;
        let ids = dead_tasks(&q, "early", 2 * BULK_CHUNK + 5, "HTTP 502").await;
        let qc = q.clone();
        let job = q
            .bulk_begin_with(
                BulkAction::Cancel,
                &by_error("502"),
                "ops",
                10_000,
                None,
                || async move {
                    assert!(qc.bulk_stop().await.unwrap(), "the selecting run is found");
                    match qc
                        .bulk_begin(BulkAction::Purge, &by_error("502"), "other", 10_000, None)
                        .await
                        .unwrap()
                    {
                        Err(BulkRefused::Busy(p)) => assert_eq!(
                            (p.action.as_str(), p.who.as_str(), p.running()),
                            ("cancel", "ops", true)
                        ),
                        other => panic!("a second start while selecting: {other:?}"),
                    }
                },
            )
            .await
            .unwrap()
            .expect("started");
        assert_eq!(job.progress().total, ids.len() as u64);
        let end = job.run().await.unwrap();
        assert_eq!(
            (
                end.state.as_str(),
                end.stop_requested,
                end.done,
                end.changed
            ),
            ("stopped", true, 0, 0)
        );
        for id in &ids {
            assert_eq!(state_of(&q, id).await, Some(TaskState::Dead));
        }
        let stored = q.bulk_progress().await.unwrap().unwrap();
        assert_eq!(
            (stored.state.as_str(), stored.done, stored.stop_requested),
            ("stopped", 0, true)
        );
        // The lock and the stop request went with the run: the next one goes through whole.
        assert!(!q.bulk_stop().await.unwrap(), "nothing running to stop");
        let end = q
            .bulk_begin(BulkAction::Cancel, &by_error("502"), "ops", 10_000, None)
            .await
            .unwrap()
            .expect("started")
            .run()
            .await
            .unwrap();
        assert_eq!(
            (end.state.as_str(), end.changed),
            ("finished", ids.len() as u64)
        );
    })
    .await;
}

#[tokio::test]
async fn waiting_and_ready_tasks_by_query_text() {
    on_each_layout("bulk_states", async |conf: QueueConfig| {
        let q = queue_with(conf).await;
        let p = EnqueuePolicy::default();
        for i in 0..30 {
            q.enqueue(&format!("alpha-{i}"), "", &p).await.unwrap();
            q.enqueue(&format!("beta-{i}"), "", &p).await.unwrap();
        }
        let ready = BulkFilter {
            state: BulkState::Ready,
            query: Some("alpha".into()),
            ..BulkFilter::default()
        };
        assert_eq!(q.bulk_select(&ready, 0).await.unwrap().matched, 30);
        // Retry does not apply to ready tasks; cancel does.
        assert!(matches!(
            q.bulk_begin(BulkAction::Retry, &ready, "ops", 10_000, None)
                .await
                .unwrap(),
            Err(BulkRefused::NotApplicable)
        ));
        let end = q
            .bulk_begin(BulkAction::Cancel, &ready, "ops", 10_000, Some(30))
            .await
            .unwrap()
            .expect("started")
            .run()
            .await
            .unwrap();
        assert_eq!(end.changed, 30);
        assert_eq!(q.bulk_select(&ready, 0).await.unwrap().matched, 0);
        let beta = BulkFilter {
            query: Some("beta".into()),
            ..ready.clone()
        };
        assert_eq!(q.bulk_select(&beta, 0).await.unwrap().matched, 30);
        // Waiting: claimed and told to poll again in an hour; a retry makes them due now.
        let claimed = q.claim("w", 30, 60_000).await.unwrap();
        assert_eq!(claimed.len(), 30);
        for c in &claimed {
            q.reschedule(&c.id, c.token, 3_600_000, None, 1)
                .await
                .unwrap();
        }
        let waiting = BulkFilter {
            state: BulkState::Waiting,
            ..beta.clone()
        };
        assert_eq!(q.bulk_select(&waiting, 0).await.unwrap().matched, 30);
        let end = q
            .bulk_begin(BulkAction::Retry, &waiting, "ops", 10_000, None)
            .await
            .unwrap()
            .expect("started")
            .run()
            .await
            .unwrap();
        assert_eq!(end.changed, 30);
        // Due now: back in the ready list, none waiting.
        assert_eq!(q.bulk_select(&waiting, 0).await.unwrap().matched, 0);
        assert_eq!(q.bulk_select(&beta, 0).await.unwrap().matched, 30);
    })
    .await;
}
