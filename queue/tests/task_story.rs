//! A task's story at every history level (issue 29): its polls summed up on the record and
//! then the result, the last claim that ended, the claim that completed it, the time to result
//! counted from its creation, its tenant once it is done, and a failed call's HTTP status,
//! duration and body beside the message.
use crate::common;

use common::*;
use queue::*;
use std::time::Duration;

const LEVELS: [HistoryLevel; 3] = [
    HistoryLevel::Off,
    HistoryLevel::Transitions,
    HistoryLevel::Full,
];

async fn queue_at(name: &str, level: HistoryLevel) -> Queue {
    queue_with(QueueConfig {
        history: level,
        ..cfg(&format!("{name}_{}", level.as_str()))
    })
    .await
}

fn kinds(d: &TaskDetail) -> Vec<&str> {
    d.history.iter().map(|h| h.kind.as_str()).collect()
}

fn entries<'a>(d: &'a TaskDetail, kind: &str) -> Vec<&'a HistoryEntry> {
    d.history.iter().filter(|h| h.kind == kind).collect()
}

/// A pause that makes the next Redis millisecond differ from the last (times are compared).
async fn tick() {
    tokio::time::sleep(Duration::from_millis(3)).await;
}

#[tokio::test]
async fn polls_and_claims_are_told_at_every_history_level() {
    const POLLS: u32 = 6;
    for level in LEVELS {
        let q = queue_at("story_polls", level).await;
        let policy = EnqueuePolicy {
            tenant: "acme".into(),
            ..EnqueuePolicy::default()
        };
        q.enqueue("a slow one", "", &policy).await.unwrap();
        let mut last_token = 0;
        for _ in 0..POLLS {
            let c = claim_one(&q, "w1", 60_000).await;
            last_token = c.token;
            tick().await;
            q.reschedule(&c.id, c.token, 0, None, 1).await.unwrap();
        }
        let c = claim_one(&q, "w2", 60_000).await;
        let id = c.id.clone();

        // While it runs: the polls summed up on the record, and the current lease.
        let d = q.get(&id).await.unwrap().unwrap();
        let polls = d.polls.expect("the record sums the polls up");
        assert_eq!(polls.count, POLLS, "{level:?}");
        assert!(polls.first_ms < polls.last_ms, "{level:?}: {polls:?}");
        assert!(polls.every_ms().unwrap() > 0, "{level:?}");
        let polled = entries(&d, "polled");
        if level == HistoryLevel::Full {
            assert_eq!(polled.len(), POLLS as usize, "{level:?}: one by one");
        } else {
            assert_eq!(polled.len(), 1, "{level:?}: {:?}", d.history);
            assert!(
                polled[0].detail.starts_with("6 polls, every ~")
                    && polled[0]
                        .detail
                        .ends_with(&format!("the first at {}", polls.first_ms)),
                "{level:?}: {:?}",
                polled[0]
            );
            assert_eq!(polled[0].at_ms, polls.last_ms);
        }
        let lease = format!("by w2 token {}", c.token);
        assert!(
            entries(&d, "claimed").iter().any(|h| h.detail == lease),
            "{level:?}: {:?}",
            d.history
        );

        // Done: the result keeps the tenant, the polls and the claim that completed it.
        tick().await;
        q.complete(&id, c.token, "\"done\"", 1).await.unwrap();
        let d = q.get(&id).await.unwrap().unwrap();
        assert!(d.task.is_none());
        let r = d.result.clone().unwrap();
        let story = d.result_story.clone().expect("the result keeps its story");
        assert_eq!(story.tenant, "acme", "{level:?}");
        assert_eq!((story.worker.as_str(), story.token), ("w2", c.token));
        assert_eq!(story.polls, Some(polls), "{level:?}");
        assert!(
            story.claimed_ms >= polls.last_ms && story.claimed_ms < r.completed_ms,
            "{level:?}: {story:?} {r:?}"
        );
        // The time to result runs from the creation: at least the polls' span, not the last
        // call's latency (1 ms here).
        let ttr = r.completed_ms - r.created_ms;
        assert!(ttr > polls.last_ms - polls.first_ms, "{level:?}");
        let done = entries(&d, "completed");
        assert_eq!(done.len(), 1);
        assert_eq!(
            done[0].detail,
            format!(
                "by w2 token {}: result {ttr} ms after the enqueue (last call 1 ms)",
                c.token
            ),
            "{level:?}"
        );
        assert!(entries(&d, "claimed").iter().any(|h| h.detail == lease));
        let polled = entries(&d, "polled");
        if level == HistoryLevel::Full {
            assert_eq!(polled.len(), POLLS as usize);
        } else {
            assert_eq!(polled.len(), 1, "{level:?}: {:?}", kinds(&d));
            assert!(polled[0].detail.starts_with("6 polls"));
            // The claim of the last poll, shown from the record before it went, is not kept
            // below 'full'; the one that completed the task is.
            assert!(!d
                .history
                .iter()
                .any(|h| h.detail == format!("by w1 token {last_token}")));
        }
        assert_eq!(kinds(&d).last(), Some(&"enqueued"));
    }
}

#[tokio::test]
async fn the_last_ended_claim_of_a_waiting_task_is_told() {
    for level in [HistoryLevel::Off, HistoryLevel::Transitions] {
        let q = queue_at("story_waiting", level).await;
        q.enqueue("waits", "", &EnqueuePolicy::default())
            .await
            .unwrap();
        let c = claim_one(&q, "w1", 60_000).await;
        q.reschedule(&c.id, c.token, 60_000, None, 1).await.unwrap();
        let d = q.get(&c.id).await.unwrap().unwrap();
        assert_eq!(d.task.as_ref().unwrap().state, TaskState::Due);
        let claimed = entries(&d, "claimed");
        assert_eq!(claimed.len(), 1, "{level:?}: {:?}", d.history);
        assert_eq!(claimed[0].detail, format!("by w1 token {}", c.token));
        let polls = d.polls.unwrap();
        assert_eq!((polls.count, polls.first_ms), (1, polls.last_ms));
        assert_eq!(entries(&d, "polled")[0].detail, "1 poll");
        assert_eq!(kinds(&d), ["polled", "claimed", "enqueued"], "{level:?}");
    }
}

#[tokio::test]
async fn a_failed_call_keeps_its_status_duration_and_body() {
    for level in LEVELS {
        let q = queue_at("story_failed", level).await;
        q.enqueue("fails", "", &EnqueuePolicy::default())
            .await
            .unwrap();
        let c = claim_one(&q, "w1", 60_000).await;
        // 800 bytes of two-byte characters: kept to 512 bytes, cut between two characters.
        let body = "ü".repeat(400);
        let call = FailedCall {
            http_status: Some(503),
            took_ms: 1234,
            body: body.clone(),
        };
        let (outcome, _) = q
            .fail_and_claim(
                &c.id,
                c.token,
                "HTTP 503: busy",
                &call,
                Retry::After(0),
                "w1",
                0,
                60_000,
            )
            .await
            .unwrap();
        assert!(matches!(outcome, Ok(Failed::Retrying { .. })));
        let d = q.get(&c.id).await.unwrap().unwrap();
        assert_eq!(
            d.task.as_ref().unwrap().last_error.as_deref(),
            Some("HTTP 503: busy")
        );
        let last = d.last_call.clone().expect("the failed call is kept");
        assert_eq!((last.http_status, last.took_ms), (Some(503), 1234));
        assert!(last.body.len() <= FAILED_BODY_MAX, "{}", last.body.len());
        assert!(last.body.len() > 400, "most of it is kept");
        assert!(last.body.ends_with('…') && body.starts_with(last.body.trim_end_matches('…')));
        // Below 'full' the failed claim is still told, from the history or the record.
        let claim = format!("by w1 token {}", c.token);
        assert!(
            entries(&d, "claimed").iter().any(|h| h.detail == claim),
            "{level:?}: {:?}",
            d.history
        );

        // The next failure has no HTTP answer: nothing of the first one's is left beside it.
        let c = claim_one(&q, "w1", 60_000).await;
        q.fail(&c.id, c.token, "timeout after 300 ms", Retry::After(0), 300)
            .await
            .unwrap();
        let d = q.get(&c.id).await.unwrap().unwrap();
        assert_eq!(
            d.last_call,
            Some(FailedCall {
                http_status: None,
                took_ms: 300,
                body: String::new(),
            }),
            "{level:?}"
        );
    }
}

#[tokio::test]
async fn a_task_that_never_failed_has_no_failed_call() {
    let q = queue("story_no_failure").await;
    q.enqueue("fine", "", &EnqueuePolicy::default())
        .await
        .unwrap();
    let c = claim_one(&q, "w", 60_000).await;
    q.reschedule(&c.id, c.token, 0, None, 1).await.unwrap();
    let d = q.get(&c.id).await.unwrap().unwrap();
    assert_eq!(d.last_call, None);
}

#[tokio::test]
async fn a_result_stored_before_the_story_still_reads() {
    let name = "story_old_result";
    let q = queue(name).await;
    q.enqueue("old", "", &EnqueuePolicy::default())
        .await
        .unwrap();
    let c = claim_one(&q, "w", 60_000).await;
    q.complete(&c.id, c.token, "\"x\"", 1).await.unwrap();
    // The eight-field form an older version wrote: no claim time, polls' times nor tenant.
    let mut r = raw().await;
    let key = format!("{}:r:{}", q.partition_tag(q.partition_of(&c.id)), c.id);
    let old = "2000,1000,3,77,5,2,3,00\nw9old\"x\"".to_string();
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg(old)
        .query_async(&mut r)
        .await
        .unwrap();
    let d = q.get(&c.id).await.unwrap().unwrap();
    let result = d.result.unwrap();
    assert_eq!(
        (result.query.as_str(), result.data.as_str()),
        ("old", "\"x\"")
    );
    let story = d.result_story.unwrap();
    assert_eq!(
        story,
        ResultStory {
            tenant: String::new(),
            worker: "w9".into(),
            token: 77,
            claimed_ms: 0,
            latency_ms: 5,
            polls: None,
        }
    );
}
