//! What the dashboard reads of a queue: its Pub/Sub notices, events, workers, throughput and
//! histograms.
use crate::common;

use common::*;
use queue::*;

#[tokio::test]
async fn an_enqueue_publishes_one_dashboard_message_and_nothing_else() {
    use futures::StreamExt;
    let q = queue("life_pubsub").await;
    let client = redis::Client::open(server().url()).unwrap();
    let mut ps = client.get_async_pubsub().await.unwrap();
    let ch = q.channels();
    let id = TaskId::of_query(&normalise_query("pubsub").unwrap());
    // Every channel of this queue: workers are woken through the wake-up list, not Pub/Sub,
    // and there is no per-task channel (the web process derives live pages from the
    // dashboard channel).
    ps.psubscribe("{life_pubsub}*").await.unwrap();
    q.enqueue("pubsub", "p", &EnqueuePolicy::default())
        .await
        .unwrap();
    // A second dashboard message as an end marker (Pub/Sub keeps order on one connection).
    q.pause("admin").await.unwrap();
    let mut got = Vec::new();
    let mut stream = ps.on_message();
    loop {
        let m = tokio::time::timeout(std::time::Duration::from_secs(10), stream.next())
            .await
            .unwrap()
            .unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&m.get_payload::<String>().unwrap()).unwrap();
        assert_eq!(m.get_channel_name(), ch.dashboard);
        if v["kind"] == "paused" {
            break;
        }
        got.push(v);
    }
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["kind"], "enqueued");
    assert_eq!(got[0]["id"], id.as_str());
    assert!(got[0]["at_ms"].as_i64().unwrap() > 0);
}

#[tokio::test]
async fn workers_joining_and_leaving_wake_the_dashboard() {
    use futures::StreamExt;
    let q = queue("life_worker_news").await;
    let client = redis::Client::open(server().url()).unwrap();
    let mut ps = client.get_async_pubsub().await.unwrap();
    ps.subscribe(&q.channels().dashboard).await.unwrap();
    let w = WorkerInfo {
        // Not hex like task ids: the message must still be valid JSON.
        id: "host \"a\"/1".into(),
        host: "h".into(),
        pid: 1,
        started_ms: 1,
        in_flight: 0,
        completed: 0,
        dead: 0,
        last_seen_ms: 0,
        rss_bytes: None,
        mode: Default::default(),
        command: None,
    };
    // Three heartbeats, then a clean stop: one `worker_joined`, one `worker_left`.
    for _ in 0..3 {
        q.heartbeat(&w, 10_000).await.unwrap();
    }
    q.remove_worker(&w.id).await.unwrap();
    // A pause as the end marker (Pub/Sub keeps order on one connection): every message of
    // the heartbeats and the stop came before it, however slowly they were delivered.
    q.pause("admin").await.unwrap();
    let mut stream = ps.on_message();
    let mut kinds = Vec::new();
    loop {
        let m = tokio::time::timeout(std::time::Duration::from_secs(10), stream.next())
            .await
            .expect("the pause's message within 10 s")
            .unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&m.get_payload::<String>().unwrap()).unwrap();
        if v["kind"] == "paused" {
            break;
        }
        assert_eq!(v["worker"], w.id.as_str());
        assert!(v.get("id").is_none(), "not a task event: {v}");
        kinds.push(v["kind"].as_str().unwrap().to_string());
    }
    assert_eq!(kinds, ["worker_joined", "worker_left"]);
}

/// Batched claim/complete: the deferred "claimed" history entry is visible while leased and
/// lands in order once the lease ends (complete, reschedule, fail, release, cancel); the
/// dashboard gets one message per batch with every id.
/// P = 1 only: it reads the dashboard notices of batched operations, which a partitioned
/// queue publishes per partition touched (a claim, a pause, a batch of completions each
/// send one per partition), so their count and grouping are the one-slot layout's.
#[tokio::test]
async fn batched_history_and_dashboard_ids() {
    use futures::StreamExt;
    let q = queue("life_batch").await;
    let client = redis::Client::open(server().url()).unwrap();
    let mut ps = client.get_async_pubsub().await.unwrap();
    ps.subscribe(&q.channels().dashboard).await.unwrap();
    for i in 0..6 {
        q.enqueue(&format!("batch {i}"), "p", &EnqueuePolicy::default())
            .await
            .unwrap();
    }
    let mut stream = ps.on_message();
    // What the scripts publish (JSON built by hand in Lua) is read with the one decoder the
    // web process uses, the shared model's Notice.
    let mut next = async || -> Notice {
        let m = tokio::time::timeout(std::time::Duration::from_secs(10), stream.next())
            .await
            .unwrap()
            .unwrap();
        Notice::parse(&m.get_payload::<String>().unwrap()).unwrap()
    };
    for i in 0..6 {
        let n = next().await;
        assert_eq!(n.kind, "enqueued");
        let want = TaskId::of_query(&format!("batch {i}"));
        assert_eq!(n.task_ids().collect::<Vec<_>>(), [&want]);
    }
    let c = q.claim("wb", 6, 60_000).await.unwrap();
    assert_eq!(c.len(), 6);
    let m = next().await;
    assert_eq!(m.kind, "claimed");
    assert_eq!(m.id.as_ref(), Some(&c[0].id));
    let ids: Vec<&TaskId> = m.task_ids().collect();
    assert_eq!(ids, c.iter().map(|x| &x.id).collect::<Vec<_>>());
    assert!(m.at_ms > 0);
    q.pause("admin").await.unwrap();
    let paused = next().await;
    assert_eq!((paused.kind.as_str(), paused.id), ("paused", None));
    q.resume("admin").await.unwrap();
    assert_eq!(next().await.kind, "resumed");

    let kinds = async |id: &str| -> Vec<String> {
        let d = q.get(id).await.unwrap().unwrap();
        d.history.iter().map(|h| h.kind.clone()).collect()
    };
    // while leased, the claim is on top of the history
    assert_eq!(kinds(&c[0].id).await, ["claimed", "enqueued"]);
    let d = q.get(&c[0].id).await.unwrap().unwrap();
    assert!(d.history[0].detail.contains("by wb token"));

    let items: Vec<Completion> = c[..3]
        .iter()
        .map(|x| Completion {
            id: x.id.clone(),
            token: x.token,
            result: "r".into(),
            latency_ms: 1,
        })
        .collect();
    assert!(q
        .complete_many(&items)
        .await
        .unwrap()
        .iter()
        .all(|r| r.is_ok()));
    let m = next().await;
    assert_eq!(m.kind, "completed");
    assert_eq!(m.ids.len(), 3);
    for x in &c[..3] {
        // The completing claim is told from the result (no history write for it).
        assert_eq!(kinds(&x.id).await, ["completed", "claimed", "enqueued"]);
    }
    // a single completion keeps the plain single-task message
    q.complete(&c[3].id, c[3].token, "r", 1).await.unwrap();
    let m = next().await;
    assert_eq!(m.id.as_ref(), Some(&c[3].id));
    assert!(m.ids.is_empty());

    q.reschedule(&c[4].id, c[4].token, 0, Some("part"), 1)
        .await
        .unwrap();
    // A poll is routine: at the default level it is not stored one by one; the record's
    // summary of the polls and the claim the poll ended are told from the record.
    assert_eq!(kinds(&c[4].id).await, ["polled", "claimed", "enqueued"]);
    assert_eq!(
        q.get(&c[4].id).await.unwrap().unwrap().task.unwrap().polls,
        1
    );
    q.cancel(&c[4].id, "a").await.unwrap();
    assert_eq!(kinds(&c[4].id).await, ["cancelled"]);
    q.release(&c[5].id, Some(c[5].token), "wb").await.unwrap();
    assert_eq!(kinds(&c[5].id).await, ["released", "claimed", "enqueued"]);
    let c5 = claim_one(&q, "wc", 60_000).await;
    q.fail(&c5.id, c5.token, "boom", Retry::Dead, 1)
        .await
        .unwrap();
    assert_eq!(
        kinds(&c5.id).await,
        ["dead", "error", "claimed", "released", "claimed", "enqueued"]
    );
}

#[tokio::test]
async fn workers_events_stats() {
    on_each_layout("life_workers", async |conf: QueueConfig| {
        let name = conf.name.clone();
        let q = queue_with(conf).await;
        let w = WorkerInfo {
            id: "w1".into(),
            host: "h".into(),
            pid: 42,
            started_ms: 1,
            in_flight: 2,
            completed: 3,
            dead: 4,
            last_seen_ms: 0,
            rss_bytes: None,
            mode: Default::default(),
            command: None,
        };
        // A heartbeat good for ten minutes, listed however slow the machine; then its record's
        // expiry is moved into the past in Redis (PEXPIREAT in the past: gone at once).
        q.heartbeat(&w, 600_000).await.unwrap();
        let ws = q.workers().await.unwrap();
        assert_eq!(ws.len(), 1);
        assert_eq!(ws[0].pid, 42);
        assert!(ws[0].last_seen_ms > 0);
        let ttl: i64 = redis::cmd("PTTL")
            .arg(format!("{{{name}}}:w:w1"))
            .query_async(&mut q.connection())
            .await
            .unwrap();
        assert!(
            ttl > 0 && ttl <= 600_000,
            "the heartbeat sets its record's expiry: {ttl}"
        );
        let expired: i64 = redis::cmd("PEXPIREAT")
            .arg(format!("{{{name}}}:w:w1"))
            .arg(1)
            .query_async(&mut q.connection())
            .await
            .unwrap();
        assert_eq!(expired, 1);
        assert!(
            q.workers().await.unwrap().is_empty(),
            "expired heartbeat listed"
        );
        q.heartbeat(&w, 10_000).await.unwrap();
        q.remove_worker("w1").await.unwrap();
        assert!(q.workers().await.unwrap().is_empty());

        // The oldest ready age, on Redis's clock: a task enqueued between `before` and
        // `after`, then a background one WAIT later (the head of the other ready list, so the
        // two heads are compared: the age is the older's, never the younger's).
        const WAIT: i64 = 200;
        let before = q.now_ms().await.unwrap();
        q.enqueue("ev", "p", &EnqueuePolicy::default())
            .await
            .unwrap();
        let after = q.now_ms().await.unwrap();
        until_redis_time(&q, after + WAIT).await;
        let background = EnqueuePolicy {
            priority: Priority::Background,
            ..EnqueuePolicy::default()
        };
        q.enqueue("ev later", "p", &background).await.unwrap();
        until_redis_time(&q, after + 2 * WAIT).await;
        q.pause("root").await.unwrap();
        let ev = q.events(10).await.unwrap();
        // An enqueue writes no stream entry (the dashboard is told over Pub/Sub); a pause does.
        assert_eq!(ev[0].kind, "paused");
        // (Partitioned, each partition reads its own `now`: bounds from the clock around.)
        let asked = q.now_ms().await.unwrap();
        let s = q.stats().await.unwrap();
        let answered = q.now_ms().await.unwrap();
        assert!(s.paused);
        assert_eq!(s.ready, 2);
        assert_eq!(s.throughput.len(), 60);
        assert!(s
            .throughput
            .windows(2)
            .all(|w| w[1].minute_ms - w[0].minute_ms == 60_000));
        // Ready since its enqueue: at least the time from `after` to the stats' asking
        // (≥ 2 × WAIT), at most the time from `before` to their answer.
        let (least, most) = (asked - after, answered - before);
        assert!(least >= 2 * WAIT, "{least}");
        assert!(
            (least..=most).contains(&s.oldest_ready_age_ms),
            "oldest ready age {} ms, the first task's is {least}..={most} ms",
            s.oldest_ready_age_ms
        );
    })
    .await;
}

#[tokio::test]
async fn reap_trims_throughput_minutes_older_than_a_day() {
    use redis::AsyncCommands;
    let name = "life_tp_trim";
    let q = queue(name).await;
    let now = q.now_ms().await.unwrap();
    let minute = |ms: i64| ms - ms.rem_euclid(60_000);
    let old = minute(now - (THROUGHPUT_RETENTION_MS as i64) - 120_000);
    let recent = minute(now - 3_600_000);
    let mut c = raw().await;
    for m in [old, recent] {
        let _: () = c
            .hset(format!("{{{name}}}:tp"), format!("{m}:completed"), 5)
            .await
            .unwrap();
        let _: () = c
            .zadd(format!("{{{name}}}:tpmin"), m.to_string(), m)
            .await
            .unwrap();
        // A histogram bucket's field, indexed by its own name (as bump_tally writes it).
        let _: () = c
            .hset(format!("{{{name}}}:tp"), format!("{m}:l20"), 2)
            .await
            .unwrap();
        let _: () = c
            .zadd(format!("{{{name}}}:tpmin"), format!("{m}:l20"), m)
            .await
            .unwrap();
    }
    // An hour rolled up more than a week ago: trimmed.
    let ancient = old - old.rem_euclid(3_600_000) - 7 * 86_400_000;
    let _: () = c
        .hset(
            format!("{{{name}}}:tphour"),
            format!("{ancient}:completed"),
            9,
        )
        .await
        .unwrap();
    let _: () = c
        .zadd(format!("{{{name}}}:tphourix"), ancient.to_string(), ancient)
        .await
        .unwrap();
    q.reap(10).await.unwrap();
    let mut fields: Vec<String> = c.hkeys(format!("{{{name}}}:tp")).await.unwrap();
    fields.sort();
    assert_eq!(
        fields,
        vec![format!("{recent}:completed"), format!("{recent}:l20")],
        "only the last day stays"
    );
    let mut minutes: Vec<String> = c.zrange(format!("{{{name}}}:tpmin"), 0, -1).await.unwrap();
    minutes.sort();
    assert_eq!(minutes, vec![recent.to_string(), format!("{recent}:l20")]);
    // The older minute is rolled up into its hour, counters and histogram alike.
    let hour = old - old.rem_euclid(3_600_000);
    let rolled: std::collections::BTreeMap<String, i64> =
        c.hgetall(format!("{{{name}}}:tphour")).await.unwrap();
    assert_eq!(
        rolled,
        [(format!("{hour}:completed"), 5), (format!("{hour}:l20"), 2)]
            .into_iter()
            .collect()
    );
    let mut hours: Vec<String> = c
        .zrange(format!("{{{name}}}:tphourix"), 0, -1)
        .await
        .unwrap();
    hours.sort();
    assert_eq!(hours, vec![hour.to_string(), format!("{hour}:l20")]);
    // The week's view counts both the rolled-up hour and the recent minute.
    let week = q.throughput(7 * 1440, 60).await.unwrap();
    // Hours aligned on the clock: 168, or 169 when the week starts inside an hour.
    assert!(
        week.len() == 168 || week.len() == 169,
        "{} points",
        week.len()
    );
    assert_eq!(week.iter().map(|b| b.completed).sum::<u64>(), 10);
    let at_hour = week.iter().find(|b| b.minute_ms == hour).unwrap();
    assert_eq!(at_hour.completed, 5);
    assert_eq!(at_hour.latency.map(|p| p.count), Some(2));
}

/// The day's throughput rolled up into quarter hours sums exactly the minutes it covers, and
/// the last hour read minute by minute is what stats() returns.
#[tokio::test]
async fn throughput_of_a_day_rolls_up_the_minutes() {
    let q = queue("life_tp_day").await;
    let now = q.now_ms().await.unwrap();
    let minute = now - now % 60_000;
    let mut c = q.connection();
    // Counters as the scripts write them: 3 completions this minute, 5 twenty minutes ago,
    // 7 failures five hours ago, and one 25 hours ago (outside the day: not counted).
    for (ago_min, field, n) in [
        (0, "completed", 3),
        (20, "completed", 5),
        (20, "ttr_sum", 500),
        (300, "failed", 7),
        (1500, "completed", 100),
    ] {
        let m = minute - ago_min * 60_000;
        let _: i64 = redis::cmd("HINCRBY")
            .arg("{life_tp_day}:tp")
            .arg(format!("{m}:{field}"))
            .arg(n)
            .query_async(&mut c)
            .await
            .unwrap();
        let _: i64 = redis::cmd("ZADD")
            .arg("{life_tp_day}:tpmin")
            .arg(m)
            .arg(m)
            .query_async(&mut c)
            .await
            .unwrap();
    }
    let day = q.throughput(1440, 15).await.unwrap();
    assert!(day.len() == 96 || day.len() == 97, "{} points", day.len());
    assert!(day.iter().all(|b| b.minute_ms % (15 * 60_000) == 0));
    assert!(day
        .windows(2)
        .all(|w| w[1].minute_ms - w[0].minute_ms == 15 * 60_000));
    let sum = |f: fn(&ThroughputBucket) -> u64| day.iter().map(f).sum::<u64>();
    assert_eq!(sum(|b| b.completed), 8);
    assert_eq!(sum(|b| b.failed), 7);
    // Every completion counts its time to result.
    assert_eq!((sum(|b| b.ttr_sum_ms), sum(|b| b.ttr_count)), (500, 8));
    assert_eq!(
        day.last().unwrap().minute_ms,
        minute - minute % (15 * 60_000)
    );

    // The last hour minute by minute is what stats() returns: both read within one minute
    // (Redis time before and after), else read again.
    for _ in 0..3 {
        let before = q.now_ms().await.unwrap();
        let hour = q.throughput(60, 1).await.unwrap();
        let stats = q.stats().await.unwrap();
        let after = q.now_ms().await.unwrap();
        if before / 60_000 != after / 60_000 {
            continue;
        }
        assert_eq!(hour.len(), 60);
        assert_eq!(hour, stats.throughput);
        return;
    }
    panic!("three minutes turned between two reads");
}

/// The scripts count time to result, polls per task and upstream latency in the buckets
/// model::histogram defines (Lua and Rust agree at both edges of every bucket up to 2^31 ms),
/// and `throughput` reads the percentiles back from them.
#[tokio::test]
async fn histograms_of_latency_polls_and_time_to_result() {
    use std::collections::BTreeMap;
    let name = "life_hist";
    // A minute turning mid-test splits the counts over two points: try again in a new minute.
    for round in 0..3 {
        let q = queue(&format!("{name}{round}")).await;
        let tp = format!("{{{name}{round}}}:tp");
        let start = q.now_ms().await.unwrap();
        // Latencies at both edges of every bucket up to 2^31, completed in batches.
        let mut latencies: Vec<u64> = Vec::new();
        for k in 0..=::model::histogram::bucket_of(1 << 31) {
            let (low, high) = ::model::histogram::bucket_range(k);
            latencies.push(low);
            if high != low {
                latencies.push(high);
            }
        }
        let queries: Vec<String> = (0..latencies.len()).map(|i| format!("h-{i}")).collect();
        let items: Vec<(&str, &str)> = queries.iter().map(|s| (s.as_str(), "")).collect();
        // The first four are polled twice first (upstream latency 2000 ms each time).
        q.enqueue_many(&items[..4], &Default::default())
            .await
            .unwrap();
        for _ in 0..2 {
            let batch = q.claim("w", 4, 60_000).await.unwrap();
            assert_eq!(batch.len(), 4);
            for c in batch {
                q.reschedule(&c.id, c.token, 0, None, 2000).await.unwrap();
            }
        }
        q.enqueue_many(&items[4..], &Default::default())
            .await
            .unwrap();
        let mut claimed = Vec::new();
        while claimed.len() < latencies.len() {
            let batch = q.claim("w", 100, 60_000).await.unwrap();
            assert!(!batch.is_empty(), "every task is claimable");
            claimed.extend(batch);
        }
        let items: Vec<Completion> = claimed
            .iter()
            .zip(&latencies)
            .map(|(c, l)| Completion {
                id: c.id.clone(),
                token: c.token,
                result: "{}".into(),
                latency_ms: *l,
            })
            .collect();
        for chunk in items.chunks(50) {
            for r in q.complete_many(chunk).await.unwrap() {
                r.unwrap();
            }
        }
        let polls_of: BTreeMap<String, u32> = claimed
            .iter()
            .map(|c| (c.id.to_string(), c.polls))
            .collect();
        let end = q.now_ms().await.unwrap();
        if start / 60_000 != end / 60_000 {
            continue;
        }
        // The raw counters: exactly the buckets Rust computes for the same values.
        let mut expected: BTreeMap<String, i64> = BTreeMap::new();
        let minute = start - start % 60_000;
        for l in latencies.iter().copied().chain([2000; 8]) {
            let b = ::model::histogram::bucket_of(l);
            *expected.entry(format!("{minute}:l{b}")).or_default() += 1;
        }
        for p in polls_of.values() {
            *expected.entry(format!("{minute}:p{p}")).or_default() += 1;
        }
        let mut c = raw().await;
        let all: BTreeMap<String, i64> = redis::AsyncCommands::hgetall(&mut c, &tp).await.unwrap();
        // Fields "<minute>:<kind><bucket>" (not the named counters such as ":polled").
        let bucket_of_kind = |f: &str, kind: char| {
            f.split_once(':').is_some_and(|(_, rest)| {
                rest.strip_prefix(kind)
                    .is_some_and(|b| !b.is_empty() && b.bytes().all(|c| c.is_ascii_digit()))
            })
        };
        let got: BTreeMap<String, i64> = all
            .iter()
            .filter(|(f, _)| bucket_of_kind(f, 'l') || bucket_of_kind(f, 'p'))
            .map(|(f, n)| (f.clone(), *n))
            .collect();
        assert_eq!(got, expected, "latency and polls buckets");
        let ttr_total: i64 = all
            .iter()
            .filter(|(f, _)| bucket_of_kind(f, 't'))
            .map(|(_, n)| n)
            .sum();
        assert_eq!(ttr_total, latencies.len() as i64, "one time to result each");
        // Read back as percentiles: those of a histogram of the same values.
        let hour = q.throughput(60, 60).await.unwrap();
        let point = hour
            .iter()
            .find(|b| b.latency.is_some())
            .expect("a point with latencies");
        let mut h = Histogram::default();
        for l in latencies.iter().copied().chain([2000; 8]) {
            h.add(::model::histogram::bucket_of(l), 1);
        }
        assert_eq!(point.latency, h.percentiles());
        let polls = point.polls.unwrap();
        assert_eq!(
            (polls.p50, polls.p99, polls.count),
            (0, 2, latencies.len() as u64)
        );
        let ttr = point.ttr.unwrap();
        assert!(ttr.p50 <= ttr.p95 && ttr.p95 <= ttr.p99 && ttr.count == latencies.len() as u64);
        assert!(ttr.p99 <= (end - start + 1000) as u64 * 5 / 4, "{ttr:?}");
        return;
    }
    panic!("three minutes turned mid-test");
}
