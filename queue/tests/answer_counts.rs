//! The answers by freshness and the refreshes, as the dashboard reads them: the per-minute
//! counters the scripts write (`fresh`, `stale`, `miss`, `negative`, `ahead`,
//! `refresh_failed`) come back per minute from `throughput` and `stats`, summed over the
//! partitions, and a week's view sums the minutes of the last day and the hours reap rolled
//! older minutes into, exactly.
use crate::common;

use common::*;
use queue::*;
use redis::AsyncCommands;

/// The six counters of a point, in a fixed order.
fn counts(b: &ThroughputBucket) -> [u64; 6] {
    [
        b.fresh,
        b.stale,
        b.miss,
        b.negative,
        b.ahead,
        b.refresh_failed,
    ]
}

const NAMES: [&str; 6] = [
    "fresh",
    "stale",
    "miss",
    "negative",
    "ahead",
    "refresh_failed",
];

fn total(points: &[ThroughputBucket]) -> [u64; 6] {
    let mut t = [0; 6];
    for b in points {
        for (s, v) in t.iter_mut().zip(counts(b)) {
            *s += v;
        }
    }
    t
}

/// Claims `n` tasks (every ready one), by id.
async fn claim_all(q: &Queue, n: usize) -> std::collections::HashMap<String, Claimed> {
    let mut out = std::collections::HashMap::new();
    for _ in 0..20 {
        for c in q.claim("w", n, 60_000).await.unwrap() {
            out.insert(c.id.to_string(), c);
        }
        if out.len() == n {
            return out;
        }
    }
    panic!("claimed {} of {n}", out.len());
}

/// The id of the task of query text `t`.
fn id_of(q: &Queue, t: &str) -> String {
    q.task_id(&normalise_query(t).unwrap()).to_string()
}

/// Six misses (every task created): a..d done, e dead for good (a negative answer next), f
/// left running.
async fn six_misses_four_done_one_dead(q: &Queue, p: &EnqueuePolicy, texts: [&str; 6]) {
    for t in texts {
        let e = q.enqueue(t, "", p).await.unwrap();
        assert!(matches!(e, Enqueued::Created(_)), "{e:?}");
    }
    let leased = claim_all(q, texts.len()).await;
    assert!(
        leased.values().all(|c| !c.refresh),
        "a first task is no refresh"
    );
    for t in &texts[..4] {
        let c = &leased[&id_of(q, t)];
        q.complete(c.id.as_str(), c.token, "answer", 1)
            .await
            .unwrap();
    }
    let e = &leased[&id_of(q, "ask e")];
    q.fail(e.id.as_str(), e.token, "gone", Retry::Dead, 1)
        .await
        .unwrap();
}

/// Two fresh hits, a join (a miss), a negative answer, a miss of only-if-cached.
async fn hits_a_join_a_negative_and_a_not_cached(q: &Queue, p: &EnqueuePolicy) {
    for t in ["ask a", "ask b"] {
        let e = q.enqueue(t, "", p).await.unwrap();
        assert!(matches!(e, Enqueued::Stored(_)), "{e:?}");
    }
    let e = q.enqueue("ask f", "", p).await.unwrap();
    assert!(matches!(e, Enqueued::Joined(_)), "{e:?}");
    let e = q.enqueue("ask e", "", p).await.unwrap();
    assert!(matches!(e, Enqueued::Negative(_)), "{e:?}");
    let only_cached = EnqueuePolicy {
        only_if_cached: true,
        ..EnqueuePolicy::default()
    };
    let e = q.enqueue("never asked", "", &only_cached).await.unwrap();
    assert!(matches!(e, Enqueued::NotCached), "{e:?}");
}

/// Two stale answers whose refreshes die: one failed by the upstream, one whose next poll
/// would pass its deadline.
async fn two_stale_answers_whose_refreshes_die(q: &Queue) {
    // A stale answer (no-cache) starts a refresh; its claim says so; it dies.
    let no_cache = EnqueuePolicy {
        max_age_ms: Some(0),
        ..EnqueuePolicy::default()
    };
    let e = q.enqueue("ask c", "", &no_cache).await.unwrap();
    assert!(matches!(e, Enqueued::Stale { created: true, .. }), "{e:?}");
    let r = claim_one(q, "w", 60_000).await;
    assert_eq!(r.id.to_string(), id_of(q, "ask c"));
    assert!(r.refresh, "the refresh's claim carries its flag");
    q.fail(r.id.as_str(), r.token, "down", Retry::Dead, 1)
        .await
        .unwrap();
    // Another, whose next poll would pass its deadline: that death is a failed refresh too.
    let short = EnqueuePolicy {
        max_age_ms: Some(0),
        deadline_ms: 60_000,
        ..EnqueuePolicy::default()
    };
    let e = q.enqueue("ask d", "", &short).await.unwrap();
    assert!(matches!(e, Enqueued::Stale { created: true, .. }), "{e:?}");
    let r = claim_one(q, "w", 60_000).await;
    assert!(r.refresh && r.id.as_str() == id_of(q, "ask d"), "{r:?}");
    let due = q
        .reschedule(r.id.as_str(), r.token, 120_000, None, 1)
        .await
        .unwrap();
    assert_eq!(due, 0, "dead: the next poll is past the deadline");
}

/// Refreshes ahead need a hot result at the edge of its fresh window: written as the
/// enqueue script writes them, two in the first partition and two in the last. How many.
async fn refreshes_ahead_in_the_end_partitions(
    q: &Queue,
    c: &mut redis::aio::MultiplexedConnection,
) -> u64 {
    let now = q.now_ms().await.unwrap();
    let minute = now - now % 60_000;
    let last = q.partitions() - 1;
    let ends = std::collections::BTreeSet::from([0, last]);
    for &i in &ends {
        let tag = q.partition_tag(i);
        let _: i64 = c
            .hincr(format!("{tag}:tp"), format!("{minute}:ahead"), 2)
            .await
            .unwrap();
        let _: i64 = c
            .zadd(format!("{tag}:tpmin"), minute.to_string(), minute)
            .await
            .unwrap();
    }
    2 * ends.len() as u64
}

/// Each point is its minute: the partitions' fields of that minute, summed; and on three
/// partitions the answers really were counted in more than one.
async fn check_each_point_is_its_minute(
    q: &Queue,
    c: &mut redis::aio::MultiplexedConnection,
    hour: &[ThroughputBucket],
) {
    let mut spread = std::collections::BTreeSet::new();
    for b in hour {
        let mut want = [0; 6];
        for i in 0..q.partitions() {
            let tag = q.partition_tag(i);
            for (j, name) in NAMES.iter().enumerate() {
                let v: Option<u64> = c
                    .hget(format!("{tag}:tp"), format!("{}:{name}", b.minute_ms))
                    .await
                    .unwrap();
                if v.unwrap_or(0) > 0 && *name != "ahead" {
                    spread.insert(i);
                }
                want[j] += v.unwrap_or(0);
            }
        }
        assert_eq!(counts(b), want, "minute {}", b.minute_ms);
    }
    assert!(
        spread.len() == q.partitions().min(3),
        "answers counted in partitions {spread:?} of {}",
        q.partitions()
    );
}

/// Every way an ask is answered, through the real scripts, on one partition and on three:
/// the counters come back per minute (each point is the sum of the partitions' fields of its
/// minute) and summed over the window, by `throughput` and by `stats` alike; a refresh's
/// claim says it is one, and its death counts whether the upstream failed it or its
/// deadline passed between polls.
#[tokio::test]
async fn answers_by_freshness_are_read_per_minute_and_summed_over_partitions() {
    on_each_layout("answers_tp", async |conf| {
        let q = queue_with(conf).await;
        let p = EnqueuePolicy::default();
        let texts = ["ask a", "ask b", "ask c", "ask d", "ask e", "ask f"];
        six_misses_four_done_one_dead(&q, &p, texts).await;
        hits_a_join_a_negative_and_a_not_cached(&q, &p).await;
        two_stale_answers_whose_refreshes_die(&q).await;
        let mut c = raw().await;
        let ahead = refreshes_ahead_in_the_end_partitions(&q, &mut c).await;
        // The answers are counted in the handle's memory: written now, not within the second.
        q.flush_answer_counts().await.unwrap();

        let want = [2, 2, 8, 1, ahead, 2];
        let hour = q.throughput(60, 1).await.unwrap();
        assert_eq!(hour.len(), 60);
        assert_eq!(total(&hour), want, "{NAMES:?} over the hour");
        check_each_point_is_its_minute(&q, &mut c, &hour).await;
        // A wider point sums its minutes.
        let quarter = q.throughput(60, 15).await.unwrap();
        assert_eq!(total(&quarter), want);
        // stats() reads the same counters for its last hour (a minute may turn between the
        // two reads: the sums do not change with it).
        assert_eq!(total(&q.stats().await.unwrap().throughput), want);
        for (i, b) in hour.iter().enumerate() {
            let hits = b.fresh + b.stale + b.negative;
            assert_eq!(b.hits(), hits, "point {i}");
            assert_eq!(b.answers(), hits + b.miss, "point {i}");
        }
    })
    .await;
}

/// Reap rolls the answer and refresh counters of minutes older than a day into their hour
/// like the other counters (not only deletes them), so a week's view sums the rolled-up hours
/// and the last day's minutes exactly, partition by partition.
#[tokio::test]
async fn a_week_sums_rolled_up_hours_and_minutes_of_the_answer_counters() {
    on_each_layout("answers_week", async |conf| {
        let q = queue_with(conf).await;
        let now = q.now_ms().await.unwrap();
        let minute = |ms: i64| ms - ms.rem_euclid(60_000);
        let old = minute(now - (THROUGHPUT_RETENTION_MS as i64) - 120_000);
        let recent = minute(now - 3_600_000);
        let mut c = raw().await;
        // Every partition: the old minute counts (j + 1) * 10 of counter j, the recent one j + 1.
        for i in 0..q.partitions() {
            let tag = q.partition_tag(i);
            for (m, scale) in [(old, 10), (recent, 1)] {
                for (j, name) in NAMES.iter().enumerate() {
                    let _: () = c
                        .hset(
                            format!("{tag}:tp"),
                            format!("{m}:{name}"),
                            (j as u64 + 1) * scale,
                        )
                        .await
                        .unwrap();
                }
                let _: () = c
                    .zadd(format!("{tag}:tpmin"), m.to_string(), m)
                    .await
                    .unwrap();
            }
        }
        q.reap(10).await.unwrap();
        let p = q.partitions() as u64;
        let hour = old - old.rem_euclid(3_600_000);
        for i in 0..q.partitions() {
            let tag = q.partition_tag(i);
            // The old minute is gone from the minutes, every counter of it in its hour.
            let mut left: Vec<String> = c.hkeys(format!("{tag}:tp")).await.unwrap();
            left.retain(|f| f.starts_with(&old.to_string()));
            assert_eq!(left, Vec::<String>::new(), "partition {i}");
            for (j, name) in NAMES.iter().enumerate() {
                let v: Option<u64> = c
                    .hget(format!("{tag}:tphour"), format!("{hour}:{name}"))
                    .await
                    .unwrap();
                assert_eq!(v, Some((j as u64 + 1) * 10), "partition {i}: {name}");
            }
        }
        let week = q.throughput(7 * 1440, 60).await.unwrap();
        let each: [u64; 6] = std::array::from_fn(|j| (j as u64 + 1) * 11 * p);
        assert_eq!(total(&week), each, "{NAMES:?} over the week");
        let at_hour = week.iter().find(|b| b.minute_ms == hour).unwrap();
        assert_eq!(
            counts(at_hour),
            std::array::from_fn(|j| (j as u64 + 1) * 10 * p)
        );
        // The day reads the minutes only: the recent one.
        let day = q.throughput(1440, 15).await.unwrap();
        assert_eq!(
            total(&day),
            std::array::from_fn::<u64, 6, _>(|j| (j as u64 + 1) * p)
        );
    })
    .await;
}

/// A refresh whose lease reap ends for good is a failed refresh, as fail.lua's death of one
/// is: poisoned by its lost leases, or its lease lost after its whole-life deadline (both
/// reap.lua). A first task that dies the same way is dead, not a failed refresh.
#[tokio::test]
async fn a_refresh_reaped_dead_counts_as_a_failed_refresh() {
    on_each_layout("answers_reaped", async |conf| {
        // Two lost leases poison a task: a first loss after the deadline is its own death.
        let q = queue_with(QueueConfig {
            max_lease_losses: 2,
            ..conf
        })
        .await;
        let p = EnqueuePolicy::default();
        let no_cache = EnqueuePolicy {
            max_age_ms: Some(0),
            ..EnqueuePolicy::default()
        };
        // Loses `id`'s lease `times` times (each claim and reap in turn); reap's dead ids.
        let lose = async |id: &TaskId, times: usize| {
            let mut dead = vec![];
            for _ in 0..times {
                let c = claim_one(&q, "w", 60_000).await;
                assert_eq!(&c.id, id, "one task ready at a time");
                expire_lease(&q, c.id.as_str()).await;
                dead = q.reap(10).await.unwrap().dead;
            }
            dead
        };
        for t in ["reaped a", "reaped b"] {
            q.enqueue(t, "", &p).await.unwrap();
            let c = claim_one(&q, "w", 60_000).await;
            q.complete(c.id.as_str(), c.token, "answer", 1)
                .await
                .unwrap();
        }
        // A first task poisoned: dead, no refresh.
        let Enqueued::Created(first) = q.enqueue("reaped first", "", &p).await.unwrap() else {
            panic!("created");
        };
        assert_eq!(lose(&first.id, 2).await, vec![first.id.clone()]);
        // A refresh poisoned.
        let e = q.enqueue("reaped a", "", &no_cache).await.unwrap();
        let Enqueued::Stale {
            refresh: Some(a),
            created: true,
            ..
        } = e
        else {
            panic!("a refresh: {e:?}");
        };
        assert_eq!(lose(&a.id, 2).await, vec![a.id.clone()]);
        // A refresh whose lease is lost after its deadline (moved into the past in Redis).
        let e = q.enqueue("reaped b", "", &no_cache).await.unwrap();
        let Enqueued::Stale {
            refresh: Some(b),
            created: true,
            ..
        } = e
        else {
            panic!("a refresh: {e:?}");
        };
        let c = claim_one(&q, "w", 60_000).await;
        assert!(c.refresh && c.id == b.id, "{c:?}");
        pass_deadline(&q, b.id.as_str()).await;
        expire_lease(&q, c.id.as_str()).await;
        assert_eq!(q.reap(10).await.unwrap().dead, vec![b.id.clone()]);
        for (id, why) in [
            (&first.id, DeadReason::Poison),
            (&a.id, DeadReason::Poison),
            (&b.id, DeadReason::Deadline),
        ] {
            let t = q.get(id.as_str()).await.unwrap().unwrap().task.unwrap();
            assert_eq!(t.dead_reason, Some(why), "{id}");
        }
        let hour = q.throughput(60, 1).await.unwrap();
        let (dead, refresh_failed) = hour
            .iter()
            .fold((0, 0), |(d, r), b| (d + b.dead, r + b.refresh_failed));
        assert_eq!(
            (dead, refresh_failed),
            (3, 2),
            "(dead, refresh_failed): three reaped dead, two of them refreshes"
        );
    })
    .await;
}
