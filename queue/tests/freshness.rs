//! Issue 26 at the queue: what a stored result costs and how long it lives (its three
//! windows, +3 bytes for the asks counted for refresh-ahead, written at most `hot_asks`
//! times), and the per-minute limit of refreshes ahead, on P = 1 and P = 3. (The answers
//! themselves are tested through the API: server/tests/api_freshness*.rs.)
mod common;

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
        // Each partition starts its share of the limit (rounded up), the first hot results
        // asked; the others are answered fresh and refreshed by no one.
        let share = limit.div_ceil(p as u32) as usize;
        let mut want = 0;
        for part in 0..p {
            let mine: Vec<&TaskId> = ids.iter().filter(|id| q.partition_of(id) == part).collect();
            let mut started = 0;
            for (n, id) in mine.iter().enumerate() {
                let t = q.get(id).await.unwrap().unwrap().task;
                assert_eq!(
                    t.is_some(),
                    n < share,
                    "partition {part}, hot result {n}: {t:?}"
                );
                if let Some(t) = t {
                    assert!(t.refresh && t.priority == Priority::Background, "{t:?}");
                    started += 1;
                }
            }
            want += started;
            assert_eq!(started, share.min(mine.len()));
        }
        assert!(
            want <= p * share && (p > 1 || want == limit as usize),
            "{want}"
        );
        let s = q.stats().await.unwrap();
        assert_eq!(s.ready, want as u64);
    })
    .await;
}
