//! Tasks that went dead, apart from calls that failed: the per-minute `dead` counter counts a
//! task once when it dies (fail.lua, reap.lua's poison and deadline, callback.lua,
//! reschedule.lua's deadline), while `failed` counts each failed call; reap rolls `dead` into
//! its hour with the other counters, so a week's view still has it.
use crate::common;

use common::*;
use queue::*;
use redis::AsyncCommands;

fn policy(max_attempts: u32) -> EnqueuePolicy {
    EnqueuePolicy {
        max_attempts,
        ..EnqueuePolicy::default()
    }
}

/// (dead, failed) summed over points.
fn dead_and_failed(points: &[ThroughputBucket]) -> (u64, u64) {
    points
        .iter()
        .fold((0, 0), |(d, f), b| (d + b.dead, f + b.failed))
}

#[tokio::test]
async fn a_dead_task_counts_once_dead_and_each_failed_call() {
    on_each_layout("dead_counts", async |conf: QueueConfig| {
        let mut conf = conf;
        conf.max_lease_losses = 1;
        let q = queue_with(conf).await;
        // Three failed calls, the third its last attempt: one dead task.
        q.enqueue("dies after three", "", &policy(3)).await.unwrap();
        for attempt in 1..=3 {
            let c = claim_one(&q, "w", 60_000).await;
            let f = q
                .fail(c.id.as_str(), c.token, "HTTP 500", Retry::After(0), 1)
                .await
                .unwrap();
            assert_eq!(matches!(f, Failed::Dead { .. }), attempt == 3, "{f:?}");
        }
        let hour = q.throughput(60, 1).await.unwrap();
        assert_eq!(dead_and_failed(&hour), (1, 3));

        // Poison (a lost lease, reap), a callback's "failed", a next poll past the deadline:
        // one dead each; the callback's is also a failed call.
        q.enqueue("poisoned", "", &policy(3)).await.unwrap();
        let c = claim_one(&q, "w", 60_000).await;
        expire_lease(&q, c.id.as_str()).await;
        assert_eq!(q.reap(10).await.unwrap().dead, vec![c.id.clone()]);
        let t = match q.enqueue("called back", "", &policy(3)).await.unwrap() {
            Enqueued::Created(t) => t,
            other => panic!("{other:?}"),
        };
        assert!(q
            .fail_by_callback(&t.id, t.created_ms, 0, "gave up")
            .await
            .unwrap());
        let short = EnqueuePolicy {
            deadline_ms: 60_000,
            ..policy(3)
        };
        q.enqueue("past its deadline", "", &short).await.unwrap();
        let c = claim_one(&q, "w", 60_000).await;
        let due = q
            .reschedule(c.id.as_str(), c.token, 120_000, None, 1)
            .await
            .unwrap();
        assert_eq!(due, 0, "dead: the next poll is past the deadline");
        let hour = q.throughput(60, 1).await.unwrap();
        assert_eq!(dead_and_failed(&hour), (4, 4));
        let stats = q.stats().await.unwrap();
        assert_eq!(stats.dead, 4);
        // The stats API's own last hour (stats.lua) reads the same counters.
        assert_eq!(dead_and_failed(&stats.throughput), (4, 4));
    })
    .await;
}

#[tokio::test]
async fn dead_tasks_survive_the_hourly_roll_up() {
    on_each_layout("dead_week", async |conf: QueueConfig| {
        let q = queue_with(conf).await;
        let now = q.now_ms().await.unwrap();
        let old = now - (THROUGHPUT_RETENTION_MS as i64) - 120_000;
        let old = old - old.rem_euclid(60_000);
        let hour = old - old.rem_euclid(3_600_000);
        let mut c = raw().await;
        // A minute older than a day in every partition, as fail.lua writes it: 1 dead, 5 failed.
        for i in 0..q.partitions() {
            let tag = q.partition_tag(i);
            for (name, v) in [("dead", 1), ("failed", 5)] {
                let _: () = c
                    .hset(format!("{tag}:tp"), format!("{old}:{name}"), v)
                    .await
                    .unwrap();
            }
            let _: () = c
                .zadd(format!("{tag}:tpmin"), old.to_string(), old)
                .await
                .unwrap();
        }
        q.reap(10).await.unwrap();
        for i in 0..q.partitions() {
            let tag = q.partition_tag(i);
            let minute: Option<u64> = c
                .hget(format!("{tag}:tp"), format!("{old}:dead"))
                .await
                .unwrap();
            assert_eq!(minute, None, "partition {i}: the minute is rolled up");
            let rolled: Option<u64> = c
                .hget(format!("{tag}:tphour"), format!("{hour}:dead"))
                .await
                .unwrap();
            assert_eq!(rolled, Some(1), "partition {i}");
        }
        let p = q.partitions() as u64;
        let week = q.throughput(7 * 1440, 60).await.unwrap();
        let at_hour = week.iter().find(|b| b.minute_ms == hour).unwrap();
        assert_eq!((at_hour.dead, at_hour.failed), (p, 5 * p));
    })
    .await;
}
