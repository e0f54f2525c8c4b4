//! Issue 26 at the queue: what a stored result costs and how long it lives (its three
//! windows, +3 bytes for the asks counted for refresh-ahead, written at most `hot_asks`
//! times), and the per-minute limit of refreshes ahead, on P = 1 and P = 3. (The answers
//! themselves are tested through the API: server/tests/api_freshness*.rs.)
use crate::common;

use common::*;
use queue::*;

/// Completes `query` by hand with `data`; its id.
async fn store(q: &Queue, query: &str, data: &str) -> TaskId {
    let Enqueued::Created(t) = q
        .enqueue(query, "", &EnqueuePolicy::default())
        .await
        .unwrap()
    else {
        panic!("{query}: created");
    };
    let c = claim_one(q, "w", 60_000).await;
    assert_eq!(c.id, t.id, "one task ready at a time");
    q.complete(&t.id, c.token, data, 1).await.unwrap();
    t.id
}

/// The stored value of `id`'s result, as Redis holds it.
async fn stored_value(q: &Queue, id: &str) -> String {
    let key = format!("{}:r:{id}", q.partition_tag(q.partition_of(id)));
    redis::cmd("GET")
        .arg(key)
        .query_async(&mut q.connection())
        .await
        .unwrap()
}

/// Moves `id`'s stored completion time `ms` into the past (the stored value's first field;
/// the key's expiry stays), as if the result were that much older.
async fn backdate(q: &Queue, id: &str, ms: i64) {
    let key = format!("{}:r:{id}", q.partition_tag(q.partition_of(id)));
    let v = stored_value(q, id).await;
    let (at, rest) = v.split_once(',').unwrap();
    let moved = format!("{},{rest}", at.parse::<i64>().unwrap() - ms);
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(moved)
        .arg("KEEPTTL")
        .query_async(&mut q.connection())
        .await
        .unwrap();
}

#[tokio::test]
async fn a_stored_result_costs_three_bytes_for_its_asks_and_lives_its_three_windows() {
    on_each_layout("fresh_bytes", async |conf: QueueConfig| {
        let conf = QueueConfig {
            result_ttl_ms: 60_000,
            freshness: FreshnessWindows {
                stale_ms: 120_000,
                stale_if_error_ms: 180_000,
                hot_asks: 3,
                ..FreshnessWindows::default()
            },
            ..conf
        };
        let q = queue_with(conf.clone()).await;
        let data = r#"{"answer":42}"#;
        let id = store(&q, "bytes", data).await;
        let v = stored_value(&q, &id).await;
        // The header: completed, created, polls, token, latency, worker and query lengths,
        // the story (the completing claim, first and last poll: milliseconds before the
        // completion, empty when unknown; the tenant's length), then the asks counted (two
        // digits) — the 3 bytes `,00` are all issue 26 adds, and a task never polled pays
        // one short number and four commas for its story (issue 29), not 13-digit epochs.
        let (head, body) = v.split_once('\n').unwrap();
        let fields: Vec<&str> = head.split(',').collect();
        assert_eq!(fields.len(), 12, "{head}");
        assert_eq!(fields[11], "00", "{head}");
        let completed: i64 = fields[0].parse().unwrap();
        let claimed_before: i64 = fields[7].parse().unwrap();
        assert!((0..60_000).contains(&claimed_before), "{head}");
        assert_eq!(
            &fields[8..11],
            ["", "", "0"],
            "never polled, no tenant: {head}"
        );
        let who: usize = fields[5].parse().unwrap();
        let query: usize = fields[6].parse().unwrap();
        assert_eq!(body.len(), who + query + data.len(), "{v:?}");
        assert_eq!(v.len(), head.len() + 1 + who + query + data.len());
        assert!(body.ends_with(data) && query == "bytes".len());
        // The claim read back: the completion less its offset.
        let story = q.get(&id).await.unwrap().unwrap().result_story.unwrap();
        assert_eq!(story.claimed_ms, completed - claimed_before);

        // It lives its three windows from its completion (Redis time; a script's relative
        // expiry counts from the script's start, which may be before the completion time it
        // read, never before the task was created: worker/tests/result_ttl.rs).
        let key = format!("{}:r:{id}", q.partition_tag(q.partition_of(&id)));
        let expires: i64 = redis::cmd("PEXPIRETIME")
            .arg(&key)
            .query_async(&mut q.connection())
            .await
            .unwrap();
        let created: i64 = fields[1].parse().unwrap();
        let life = conf.result_life_ms() as i64;
        assert_eq!(life, 360_000);
        assert!(
            // Redis's clock for the PX may read after the script's TIME: a second of slack.
            (created + life..=completed + life + 1_000).contains(&expires),
            "expires at {expires}: created {created}, completed {completed}, life {life}"
        );

        // Fresh hits count up to hot_asks in place: the value keeps its size and its data,
        // and past hot_asks nothing is written.
        for n in 1..=6 {
            assert!(matches!(
                q.enqueue("bytes", "", &EnqueuePolicy::default())
                    .await
                    .unwrap(),
                Enqueued::Stored(_)
            ));
            let now = stored_value(&q, &id).await;
            assert_eq!(now.len(), v.len());
            let counted = now
                .split_once('\n')
                .unwrap()
                .0
                .rsplit(',')
                .next()
                .unwrap()
                .to_string();
            assert_eq!(counted, format!("{:02}", n.min(3)), "after {n} asks");
            assert_eq!(q.result_by_id(&id).await.unwrap().unwrap().data, data);
        }
        let pttl: i64 = redis::cmd("PTTL")
            .arg(&key)
            .query_async(&mut q.connection())
            .await
            .unwrap();
        assert!(pttl > 300_000, "the counting kept the expiry: {pttl}");
        // Young (not within the lead of going stale): nothing refreshed ahead.
        assert!(q.get(&id).await.unwrap().unwrap().task.is_none());
    })
    .await;
}

#[tokio::test]
async fn refreshes_ahead_stop_at_the_minute_limit() {
    on_each_layout("fresh_ahead_limit", async |conf: QueueConfig| {
        // Lead: a quarter of the fresh window, 15 s. One ask makes a result hot.
        let limit = 2u32;
        let conf = QueueConfig {
            result_ttl_ms: 60_000,
            freshness: FreshnessWindows {
                hot_asks: 1,
                refresh_ahead_per_min: limit,
                ..FreshnessWindows::default()
            },
            ..conf
        };
        let q = queue_with(conf.clone()).await;
        let p = q.partitions();
        let mut ids = vec![];
        for i in 0..12 {
            let id = store(&q, &format!("ahead {i}"), "old").await;
            // 50 s old: within the lead of going stale.
            backdate(&q, &id, 50_000).await;
            ids.push(id);
        }
        // Not near the end of a minute: the limit is counted per minute of Redis time.
        let now = q.now_ms().await.unwrap();
        if now % 60_000 > 50_000 {
            until_redis_time(&q, now - now % 60_000 + 60_000).await;
        }
        for i in 0..12 {
            match q
                .enqueue(&format!("ahead {i}"), "", &EnqueuePolicy::default())
                .await
                .unwrap()
            {
                Enqueued::Stored(r) => assert_eq!(r.data, "old"),
                other => panic!("a fresh hit: {other:?}"),
            }
        }
        // Each partition starts its share of the limit, the first hot results asked; the
        // others are answered fresh and refreshed by no one. A share is limit / p, one more
        // for limit % p of the partitions (their turn this minute): the shares sum to the
        // limit, so the upstream gets at most `limit` a minute however many partitions.
        let (floor, extra) = (limit as usize / p, limit as usize % p);
        let mut want = 0;
        let mut with_extra = 0;
        for part in 0..p {
            let mine: Vec<&TaskId> = ids.iter().filter(|id| q.partition_of(id) == part).collect();
            assert!(mine.len() > floor, "partition {part}: {} hot", mine.len());
            let mut refreshed = vec![];
            for id in &mine {
                let t = q.get(id).await.unwrap().unwrap().task;
                if let Some(t) = &t {
                    assert!(t.refresh && t.priority == Priority::Background, "{t:?}");
                }
                refreshed.push(t.is_some());
            }
            let started = refreshed.iter().filter(|r| **r).count();
            assert!(
                refreshed.iter().take(started).all(|r| *r),
                "partition {part}: the first hot results asked are refreshed: {refreshed:?}"
            );
            assert!(
                (floor..=floor + 1).contains(&started),
                "partition {part} started {started}, its share is {floor} or {}",
                floor + 1
            );
            with_extra += usize::from(started > floor);
            want += started;
        }
        assert_eq!(
            (want, with_extra),
            (limit as usize, extra),
            "refreshes ahead started (all partitions), partitions given one more"
        );
        let s = q.stats().await.unwrap();
        assert_eq!(s.ready, want as u64);
    })
    .await;
}

#[tokio::test]
async fn a_refresh_ahead_that_died_waits_out_the_failed_window() {
    on_each_layout("fresh_ahead_died", async |conf: QueueConfig| {
        // One ask makes a result hot; a dead refresh stands for the query for a minute.
        let conf = QueueConfig {
            result_ttl_ms: 60_000,
            freshness: FreshnessWindows {
                hot_asks: 1,
                failed_ms: 60_000,
                ..FreshnessWindows::default()
            },
            ..conf
        };
        let q = queue_with(conf).await;
        let id = store(&q, "ahead dies", "old").await;
        // 50 s old: within the lead of going stale, still fresh.
        backdate(&q, &id, 50_000).await;
        let ask = async || match q
            .enqueue("ahead dies", "", &EnqueuePolicy::default())
            .await
            .unwrap()
        {
            Enqueued::Stored(r) => assert_eq!(r.data, "old"),
            other => panic!("a fresh hit: {other:?}"),
        };
        ask().await;
        let c = claim_one(&q, "w", 60_000).await;
        assert!(c.refresh && c.id == id, "the refresh ahead: {c:?}");
        q.fail(&id, c.token, "upstream down", Retry::Dead, 1)
            .await
            .unwrap();
        // Within the failed window: answered fresh, no new refresh (the upstream that just
        // failed it is not asked again at every hit).
        for _ in 0..3 {
            ask().await;
        }
        let t = q.get(&id).await.unwrap().unwrap().task.unwrap();
        assert_eq!(t.state, TaskState::Dead, "{t:?}");
        assert_eq!(q.stats().await.unwrap().ready, 0);
        // Its death moved a minute into the past in Redis: the next hit refreshes again.
        let died: i64 = redis::cmd("HGET")
            .arg(task_key(&q, &id))
            .arg("u")
            .query_async(&mut q.connection())
            .await
            .unwrap();
        let _: () = redis::cmd("HSET")
            .arg(task_key(&q, &id))
            .arg("u")
            .arg(died - 60_001)
            .query_async(&mut q.connection())
            .await
            .unwrap();
        ask().await;
        let t = q.get(&id).await.unwrap().unwrap().task.unwrap();
        assert!(t.refresh && t.state == TaskState::Due, "{t:?}");
    })
    .await;
}
