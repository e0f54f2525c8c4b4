//! The lean layout's promises: one call per task in steady state, priorities with a bounded
//! share for background work, history levels, and what a task costs in keys. What `stats`
//! costs Redis as the queue grows: lean_stats.rs.
use crate::common;

use common::*;
use queue::*;
use std::collections::BTreeSet;

/// The policy of background work (refreshes, bulk re-asks); lean_stats.rs fills with it too.
pub(crate) fn bg() -> EnqueuePolicy {
    EnqueuePolicy {
        priority: Priority::Background,
        ..EnqueuePolicy::default()
    }
}

/// Library function calls so far on this server (FCALL and FCALL_RO: every queue operation
/// is one of them).
async fn function_calls(c: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(c)
        .await
        .unwrap();
    ["cmdstat_fcall:calls=", "cmdstat_fcall_ro:calls="]
        .iter()
        .filter_map(|prefix| info.lines().find_map(|l| l.strip_prefix(prefix)))
        .filter_map(|rest| rest.split(',').next()?.parse::<u64>().ok())
        .sum()
}

async fn keys_of(name: &str) -> BTreeSet<String> {
    let mut c = raw().await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{{{name}}}:*"))
        .query_async(&mut c)
        .await
        .unwrap();
    // Less the queue's one meta hash (its partition count, written once at connect).
    keys.into_iter()
        .filter(|k| *k != format!("{{{name}}}:meta"))
        .collect()
}

#[tokio::test]
async fn a_busy_worker_needs_one_call_per_task() {
    // A server of its own: the call count below is server-wide.
    let srv = spawn_redis();
    let q = Queue::connect(&srv.url(), cfg("lean_one_call"))
        .await
        .unwrap();
    for i in 0..20 {
        q.enqueue(&format!("chain {i}"), "", &EnqueuePolicy::default())
            .await
            .unwrap();
    }
    let mut c = redis::Client::open(srv.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    // The enqueues' answers, counted in memory, written now: nothing of theirs below.
    q.flush_answer_counts().await.unwrap();
    let before = function_calls(&mut c).await;
    let mut cur = q.claim("w", 1, 10_000).await.unwrap().pop().unwrap();
    let mut done = BTreeSet::new();
    let mut tokens = vec![cur.token];
    for i in 0..20 {
        let item = Completion {
            id: cur.id.clone(),
            token: cur.token,
            result: "r".into(),
            latency_ms: 1,
        };
        // Alternate the three finishing calls: each brings the next task.
        let next = match i % 3 {
            0 => {
                let (flags, next) = q.complete_and_claim(&[item], "w", 1, 10_000).await.unwrap();
                assert!(flags[0].is_ok());
                done.insert(cur.id.clone());
                next
            }
            1 => {
                let r = Reschedule {
                    id: cur.id.clone(),
                    token: cur.token,
                    delay_ms: 3_600_000,
                    partial: Some("{\"progress\":0.5}".into()),
                    latency_ms: 1,
                    job: None,
                };
                let (res, next) = q.reschedule_and_claim(&[r], "w", 1, 10_000).await.unwrap();
                assert!(res[0].as_ref().unwrap() > &0);
                done.insert(cur.id.clone());
                next
            }
            _ => {
                let (res, next) = q
                    .fail_and_claim(
                        &cur.id,
                        cur.token,
                        "boom",
                        &queue::FailedCall {
                            took_ms: 1,
                            ..queue::FailedCall::default()
                        },
                        Retry::After(3_600_000),
                        "w",
                        1,
                        10_000,
                    )
                    .await
                    .unwrap();
                assert!(matches!(res, Ok(Failed::Retrying { .. })));
                done.insert(cur.id.clone());
                next
            }
        };
        if i == 19 {
            assert!(next.is_empty(), "nothing left to hand out");
            break;
        }
        assert_eq!(next.len(), 1, "step {i}");
        cur = next.into_iter().next().unwrap();
        assert!(cur.token > *tokens.last().unwrap(), "tokens grow");
        tokens.push(cur.token);
    }
    assert_eq!(done.len(), 20);
    // One claim to start, then exactly one script call per task.
    assert_eq!(function_calls(&mut c).await - before, 21);
}

#[tokio::test]
async fn interactive_first_and_background_gets_every_tenth_claim() {
    let q = queue("lean_priority").await;
    for i in 0..10 {
        q.enqueue(&format!("bg {i}"), "", &bg()).await.unwrap();
    }
    for i in 0..50 {
        q.enqueue(&format!("fg {i}"), "", &EnqueuePolicy::default())
            .await
            .unwrap();
    }
    let s = q.stats().await.unwrap();
    assert_eq!((s.ready, s.ready_background), (60, 10));
    // One at a time: claims 10, 20, 30, ... go to background while both wait.
    let mut kinds = Vec::new();
    for _ in 0..30 {
        let c = q.claim("w", 1, 60_000).await.unwrap().pop().unwrap();
        kinds.push(c.query.starts_with("bg"));
    }
    let bg_at: Vec<usize> = kinds
        .iter()
        .enumerate()
        .filter(|(_, b)| **b)
        .map(|(i, _)| i + 1)
        .collect();
    assert_eq!(bg_at, [10, 20, 30]);
    // The same share holds within one batch.
    let batch = q.claim("w", 20, 60_000).await.unwrap();
    assert_eq!(
        batch.iter().filter(|c| c.query.starts_with("bg")).count(),
        2
    );
    // Once interactive work is gone, background takes every slot.
    let rest = q.claim("w", 100, 60_000).await.unwrap();
    assert_eq!(rest.len(), 60 - 50);
    assert!(rest.iter().filter(|c| c.query.starts_with("bg")).count() >= 5);
}

#[tokio::test]
async fn an_interactive_join_raises_a_background_task() {
    let q = queue("lean_raise").await;
    for i in 0..5 {
        q.enqueue(&format!("other bg {i}"), "", &bg())
            .await
            .unwrap();
    }
    let Enqueued::Created(t) = q.enqueue("popular", "", &bg()).await.unwrap() else {
        panic!("created");
    };
    assert_eq!(t.priority, Priority::Background);
    // A background join changes nothing.
    let Enqueued::Joined(j) = q.enqueue("popular", "", &bg()).await.unwrap() else {
        panic!("joined");
    };
    assert_eq!(j.priority, Priority::Background);
    let Enqueued::Joined(j) = q
        .enqueue("popular", "", &EnqueuePolicy::default())
        .await
        .unwrap()
    else {
        panic!("joined");
    };
    assert_eq!(j.priority, Priority::Interactive);
    assert_eq!(q.stats().await.unwrap().ready_background, 5);
    let first = q.claim("w", 1, 60_000).await.unwrap().pop().unwrap();
    assert_eq!(
        first.id, t.id,
        "the raised task comes before older background work"
    );
}

#[tokio::test]
async fn history_levels_store_what_they_promise() {
    for level in [
        HistoryLevel::Off,
        HistoryLevel::Transitions,
        HistoryLevel::Full,
    ] {
        let name = format!("lean_hist_{}", level.as_str());
        let q = queue_with(QueueConfig {
            history: level,
            ..cfg(&name)
        })
        .await;
        q.enqueue("h", "", &EnqueuePolicy::default()).await.unwrap();
        let c = q.claim("w", 1, 60_000).await.unwrap().pop().unwrap();
        q.reschedule(&c.id, c.token, 0, Some("\"half\""), 1)
            .await
            .unwrap();
        let c = q.claim("w", 1, 60_000).await.unwrap().pop().unwrap();
        q.fail(&c.id, c.token, "HTTP 503", Retry::After(0), 1)
            .await
            .unwrap();
        let c = q.claim("w", 1, 60_000).await.unwrap().pop().unwrap();
        q.complete(&c.id, c.token, "\"done\"", 1).await.unwrap();
        let d = q.get(&c.id).await.unwrap().unwrap();
        let kinds: Vec<&str> = d.history.iter().map(|h| h.kind.as_str()).collect();
        let want: &[&str] = match level {
            // Below 'full' the claim that completed it and the polls summed up come from the
            // result (task_story.rs has the details).
            HistoryLevel::Off => &["completed", "claimed", "polled", "enqueued"],
            HistoryLevel::Transitions => &[
                "completed",
                "claimed",
                "error",
                "claimed",
                "polled",
                "enqueued",
            ],
            HistoryLevel::Full => &[
                "completed",
                "claimed",
                "error",
                "claimed",
                "polled",
                "claimed",
                "enqueued",
            ],
        };
        assert_eq!(kinds, want, "{level:?}: {:?}", d.history);
        assert!(
            d.history[0].detail.contains("by w token"),
            "{:?}",
            d.history[0]
        );
    }
}

#[tokio::test]
async fn a_task_costs_its_record_and_a_list_entry_then_one_result_string() {
    let name = "lean_keys";
    let q = queue(name).await;
    let Enqueued::Created(t) = q
        .enqueue("keys", "", &EnqueuePolicy::default())
        .await
        .unwrap()
    else {
        panic!("created");
    };
    let id = t.id.clone();
    let mut c = raw().await;
    let fields: BTreeSet<String> = redis::cmd("HKEYS")
        .arg(format!("{{{name}}}:t:{id}"))
        .query_async(&mut c)
        .await
        .unwrap();
    // Only what differs from the defaults: no attempts, polls, token, worker, history, ...
    assert_eq!(fields, ["c", "m", "q", "s"].map(String::from).into());
    let encoding: String = redis::cmd("OBJECT")
        .arg("ENCODING")
        .arg(format!("{{{name}}}:t:{id}"))
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(encoding, "listpack");
    // Plus one entry in the queue-wide wake-up list (a few bytes, capped; no key per task),
    // and, once the handle writes its counts, the answer in the minute's counters (one field
    // a minute, not per task).
    q.flush_answer_counts().await.unwrap();
    let want: BTreeSet<String> = [
        format!("{{{name}}}:t:{id}"),
        format!("{{{name}}}:ready"),
        format!("{{{name}}}:wakeups"),
        format!("{{{name}}}:tp"),
        format!("{{{name}}}:tpmin"),
    ]
    .into();
    assert_eq!(keys_of(name).await, want);

    let cl = q.claim("w", 1, 60_000).await.unwrap().pop().unwrap();
    // A long partial goes to its own key: the record stays compact.
    let partial = format!("{{\"rows\":\"{}\"}}", "x".repeat(500));
    q.reschedule(&cl.id, cl.token, 0, Some(&partial), 1)
        .await
        .unwrap();
    let encoding: String = redis::cmd("OBJECT")
        .arg("ENCODING")
        .arg(format!("{{{name}}}:t:{id}"))
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(encoding, "listpack");
    assert_eq!(
        q.get(&id).await.unwrap().unwrap().task.unwrap().partial,
        Some(partial)
    );

    let cl = q.claim("w", 1, 60_000).await.unwrap().pop().unwrap();
    q.complete(&cl.id, cl.token, "{\"answer\":42}", 7)
        .await
        .unwrap();
    let left: BTreeSet<String> = keys_of(name)
        .await
        .into_iter()
        .filter(|k| k.contains(id.as_str()) || k.ends_with(":results"))
        .collect();
    let want: BTreeSet<String> =
        [format!("{{{name}}}:r:{id}"), format!("{{{name}}}:results")].into();
    assert_eq!(left, want, "record, partial and history are gone");
    let r = q.result_by_id(&id).await.unwrap().unwrap();
    assert_eq!(
        (r.data.as_str(), r.query.as_str(), r.polls),
        ("{\"answer\":42}", "keys", 1)
    );
    // The query and data may hold any text, commas and newlines included.
    q.enqueue("odd, query\twith tab", "", &EnqueuePolicy::default())
        .await
        .unwrap();
    let cl = q.claim("w", 1, 60_000).await.unwrap().pop().unwrap();
    q.complete(&cl.id, cl.token, "line1\nline2,é", 1)
        .await
        .unwrap();
    let r = q.result_by_id(&cl.id).await.unwrap().unwrap();
    assert_eq!(r.data, "line1\nline2,é");
    assert_eq!(r.query, cl.query);
}

/// A key of queue `name` in the first layout: `{name}:<kind>:<id>`.
fn first_layout_key(name: &str, kind: &str, id: &str) -> String {
    format!("{{{name}}}:{kind}:{id}")
}

/// What the first layout's enqueue, fail and complete wrote (every field, long names).
fn first_layout_task(name: &str, id: &str, query: &str, state: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("HSET");
    cmd.arg(first_layout_key(name, "t", id)).arg(&[
        ("id", id),
        ("query", query),
        ("payload", ""),
        ("state", state),
        ("created", "1000"),
        ("updated", "2000"),
        ("attempts", "2"),
        ("polls", "3"),
        ("max_attempts", "5"),
        ("token", "7"),
        ("worker", ""),
        ("last_error", "HTTP 503"),
        ("partial", "{\"progress\":0.5}"),
        ("has_partial", "1"),
        ("deadline", "0"),
        ("due", "2000"),
        ("lease_deadline", "0"),
        (
            "dead_reason",
            if state == "dead" { "max_attempts" } else { "" },
        ),
        ("lease_losses", "0"),
    ]);
    cmd
}

/// A due and a dead task of the first layout, each in its set.
async fn write_first_layout_tasks(
    c: &mut redis::aio::MultiplexedConnection,
    name: &str,
    now: i64,
    due: &str,
    dead: &str,
) {
    let _: () = first_layout_task(name, due, "old due", "due")
        .query_async(c)
        .await
        .unwrap();
    let _: () = first_layout_task(name, dead, "old dead", "dead")
        .query_async(c)
        .await
        .unwrap();
    let _: () = redis::cmd("ZADD")
        .arg(format!("{{{name}}}:due"))
        .arg(now - 10)
        .arg(due)
        .query_async(c)
        .await
        .unwrap();
    let _: () = redis::cmd("ZADD")
        .arg(format!("{{{name}}}:dead"))
        .arg(now)
        .arg(dead)
        .query_async(c)
        .await
        .unwrap();
}

/// A stored result of the first layout, expiring in ten minutes, in the results index.
async fn write_first_layout_result(
    c: &mut redis::aio::MultiplexedConnection,
    name: &str,
    now: i64,
    done: &str,
) {
    let _: () = redis::cmd("HSET")
        .arg(first_layout_key(name, "r", done))
        .arg(&[
            ("id", done),
            ("query", "old done"),
            ("data", "{\"rows\":1}"),
            ("completed", "5000"),
            ("created", "4000"),
            ("polls", "2"),
        ])
        .query_async(c)
        .await
        .unwrap();
    let _: () = redis::cmd("PEXPIRE")
        .arg(first_layout_key(name, "r", done))
        .arg(600_000)
        .query_async(c)
        .await
        .unwrap();
    let _: () = redis::cmd("ZADD")
        .arg(format!("{{{name}}}:results"))
        .arg(now)
        .arg(done)
        .query_async(c)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_queue_of_the_first_layout_is_migrated_in_place() {
    let name = "lean_migrate";
    let q = queue(name).await;
    let mut c = raw().await;
    let now = q.now_ms().await.unwrap();
    let due_id = TaskId::of_query(&normalise_query("old due").unwrap());
    let dead_id = TaskId::of_query(&normalise_query("old dead").unwrap());
    let done_id = TaskId::of_query(&normalise_query("old done").unwrap());
    write_first_layout_tasks(&mut c, name, now, &due_id, &dead_id).await;
    write_first_layout_result(&mut c, name, now, &done_id).await;

    let m = q.migrate().await.unwrap();
    assert_eq!((m.records, m.results), (2, 1));
    assert_eq!(
        q.migrate().await.unwrap().records + q.migrate().await.unwrap().results,
        0,
        "idempotent"
    );

    let t = q.get(&dead_id).await.unwrap().unwrap().task.unwrap();
    assert_eq!((t.state, t.attempts, t.polls), (TaskState::Dead, 2, 3));
    assert_eq!(t.dead_reason, Some(DeadReason::MaxAttempts));
    assert_eq!(t.partial.as_deref(), Some("{\"progress\":0.5}"));
    let r = q.result_by_id(&done_id).await.unwrap().unwrap();
    assert_eq!(
        (r.data.as_str(), r.query.as_str(), r.polls, r.completed_ms),
        ("{\"rows\":1}", "old done", 2, 5000)
    );
    let ttl: i64 = redis::cmd("PTTL")
        .arg(first_layout_key(name, "r", &done_id))
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(
        ttl > 0 && ttl <= 600_000,
        "the result keeps its expiry: {ttl}"
    );
    // The migrated due task is claimed and completed like any other.
    let cl = q.claim("w", 10, 60_000).await.unwrap();
    assert_eq!(cl.len(), 1);
    assert_eq!(
        (cl[0].id.as_str(), cl[0].attempts, cl[0].polls),
        (due_id.as_str(), 2, 3)
    );
    q.complete(&cl[0].id, cl[0].token, "new", 1).await.unwrap();
    assert_eq!(q.result_by_id(&due_id).await.unwrap().unwrap().data, "new");
}

#[tokio::test]
async fn enqueue_many_answers_each_item_as_enqueue_would_in_one_round_trip() {
    let name = "lean_many";
    let q = queue(name).await;
    // A stored result first.
    q.enqueue("many done", "", &EnqueuePolicy::default())
        .await
        .unwrap();
    let c = q.claim("w", 1, 60_000).await.unwrap().pop().unwrap();
    q.complete(&c.id, c.token, "{\"answer\":1}", 3)
        .await
        .unwrap();
    let items = [
        ("many a", ""),
        ("many b", "p"),
        ("many  a", ""), // the same query once normalised: joined
        ("   ", ""),     // invalid: its own error, not sent
        ("many done", ""),
    ];
    let got = q
        .enqueue_many(&items, &EnqueuePolicy::default())
        .await
        .unwrap();
    assert_eq!(got.len(), items.len());
    assert!(matches!(&got[0], Ok(Enqueued::Created(t)) if t.query == "many a"));
    assert!(matches!(&got[1], Ok(Enqueued::Created(t)) if t.payload == "p"));
    assert!(matches!(&got[2], Ok(Enqueued::Joined(t)) if t.query == "many a"));
    assert!(matches!(&got[3], Err(QueueError::InvalidQuery(_))));
    assert!(matches!(&got[4], Ok(Enqueued::Stored(r)) if r.data == "{\"answer\":1}"));
    let s = q.stats().await.unwrap();
    assert_eq!(s.ready, 2);
    // One wake-up entry per task created.
    let mut c = raw().await;
    let entries: usize = redis::cmd("LLEN")
        .arg(format!("{{{name}}}:wakeups"))
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(entries, 2);
}
