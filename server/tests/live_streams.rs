//! The per-query live streams share their task's state: many streams on one task get the same
//! bytes, and the task is read from Redis once per change for all of them (counted by Redis
//! itself, not by repoll). A stream whose reader stopped reading is dropped, its connection
//! closed, and counted; a reading stream on the same task goes on. The stream of a stale
//! result whose refresh runs stays open until the refreshed result. Over real HTTP (the real
//! accept loop) against a private redis-server; the test plays the worker, so each change is
//! one it made.

use crate::common;
use common::api::*;

use std::time::Duration;

use server::api::ApiArgs;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Hang guard of every wait below (never a measure of speed).
const GUARD: Duration = Duration::from_secs(60);

/// Reads `state` records off one stream's body.
struct Records {
    res: reqwest::Response,
    buf: String,
}

impl Records {
    async fn open(base: &str, id: &str) -> Records {
        let res = reqwest::get(format!("{base}/api/v1/queries/{id}/events"))
            .await
            .unwrap();
        assert_eq!(res.status().as_u16(), 200);
        Records {
            res,
            buf: String::new(),
        }
    }

    /// The next `state` record, exactly as sent (heartbeats skipped).
    async fn next(&mut self) -> String {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                if block.starts_with("event: state") {
                    return block;
                }
                continue;
            }
            let chunk = tokio::time::timeout(GUARD, self.res.chunk())
                .await
                .expect("a record (hang guard)")
                .unwrap()
                .expect("the stream is open");
            self.buf.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
}

/// The `data` of a record, as JSON.
fn data_of(record: &str) -> serde_json::Value {
    let line = record
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .unwrap();
    serde_json::from_str(line).unwrap()
}

/// Plays one poll of the task: claims it and puts it back with `partial` (two changes the
/// queue publishes: the claim, then the poll's result).
async fn poll_with(env: &Env, partial: &str) {
    let claimed = env.queue.claim("test-worker", 1, 60_000).await.unwrap();
    let c = claimed.first().expect("the task is due");
    env.queue
        .reschedule(&c.id, c.token, 0, Some(partial), 1)
        .await
        .unwrap();
}

/// A partial of about `bytes` bytes whose text says `k`.
fn partial(k: usize, bytes: usize) -> String {
    format!(r#"{{"k":{k},"pad":"{}"}}"#, "x".repeat(bytes))
}

/// `HGETALL` calls Redis has served: one per read of a task's state (`Queue::get`).
async fn task_reads(env: &Env) -> u64 {
    let url = env.redis.as_ref().unwrap().url().to_string();
    let mut c = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut c)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_hgetall:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn streams_of_one_task_share_its_state_read_once_per_change() {
    let env = Env::start(Opts {
        api: crate::common::api_unlimited(),
        ..Default::default()
    })
    .await;
    let r = env.submit("shared live state").await;
    assert_eq!(r.status, 202, "{}", r.body);
    let id = r.json["id"].as_str().unwrap().to_string();
    let base = format!("http://{}", env.listen().await);
    let reads_before = task_reads(&env).await;

    const STREAMS: usize = 8;
    const CHANGES: usize = 3;
    let mut streams = Vec::new();
    for _ in 0..STREAMS {
        streams.push(Records::open(&base, &id).await);
    }
    let mut firsts = Vec::new();
    for s in &mut streams {
        firsts.push(s.next().await);
    }
    assert!(
        firsts.iter().all(|f| *f == firsts[0]),
        "every stream starts with the same state"
    );
    assert_eq!(data_of(&firsts[0])["status"], "processing");
    for k in 1..=CHANGES {
        poll_with(&env, &partial(k, 64 * 1024)).await;
        let mut got = Vec::new();
        for s in &mut streams {
            got.push(s.next().await);
        }
        assert!(
            got.iter().all(|g| *g == got[0]),
            "change {k}: the same bytes"
        );
        assert_eq!(data_of(&got[0])["partial"]["k"], k, "change {k}");
    }
    // One read when the first stream opened, then one per notice the queue published (a claim
    // and a result per change) and at most one resync of the hub: not one per stream.
    let reads = task_reads(&env).await - reads_before;
    let most = 1 + 2 * CHANGES as u64 + 1;
    assert!(
        reads <= most,
        "{reads} reads of the task for {STREAMS} streams and {CHANGES} changes (at most {most})"
    );
    drop(streams);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stream_whose_reader_stopped_reading_is_dropped_and_counted() {
    let slow_after = Duration::from_secs(2);
    let env = Env::start(Opts {
        api: ApiArgs {
            sse_slow_reader_ms: slow_after.as_millis() as u64,
            ..crate::common::api_unlimited()
        },
        ..Default::default()
    })
    .await;
    let r = env.submit("a slow reader").await;
    assert_eq!(r.status, 202, "{}", r.body);
    let id = r.json["id"].as_str().unwrap().to_string();
    // States of 4 MB: far more than a socket that is not read takes.
    const BIG: usize = 4 << 20;
    poll_with(&env, &partial(0, BIG)).await;
    let addr = env.listen().await;
    let base = format!("http://{addr}");
    let mut reader = Records::open(&base, &id).await;
    assert_eq!(data_of(&reader.next().await)["partial"]["k"], 0);

    // A client that asks for the stream and never reads (a small receive buffer, so the
    // kernel holds little for it).
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stalled = socket.connect(addr).await.unwrap();
    stalled
        .write_all(
            format!("GET /api/v1/queries/{id}/events HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
    let live = env.state.live.clone();
    tokio::time::timeout(GUARD, async {
        while live.open_streams() < 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the second stream opened (hang guard)");

    // Newer states while it reads nothing: within `slow_after` of one it is dropped. The
    // reading stream takes each at once. (The pause only paces the changes.)
    let mut k = 0;
    while live.slow_drops() == 0 {
        k += 1;
        assert!(k <= 20, "the stalled stream was never dropped");
        poll_with(&env, &partial(k, BIG)).await;
        assert_eq!(data_of(&reader.next().await)["partial"]["k"], k);
        tokio::time::sleep(slow_after + slow_after / 2).await;
    }
    assert_eq!(live.slow_drops(), 1, "only the stalled stream");

    // Its connection is closed: what the kernel held for it, then the end (or a reset).
    let ended = tokio::time::timeout(GUARD, async {
        let mut sink = vec![0u8; 64 * 1024];
        loop {
            match stalled.read(&mut sink).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(
        ended.is_ok(),
        "the stalled connection was closed (hang guard)"
    );
    tokio::time::timeout(GUARD, async {
        while live.open_streams() != 1 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("its place under the caps is free (hang guard)");

    // The reading stream goes on.
    poll_with(&env, &partial(k + 1, 1024)).await;
    assert_eq!(data_of(&reader.next().await)["partial"]["k"], k + 1);
    assert_eq!(live.slow_drops(), 1);
    env.stop().await;
}

/// A stale result is answered at once while its refresh runs, and the stream does not end on
/// it (a done state, but not final): it sends the refreshed result when it lands, then closes.
#[tokio::test(flavor = "multi_thread")]
async fn the_stream_of_a_stale_result_sends_the_refreshed_one_then_closes() {
    const FRESH_MS: u64 = 300;
    let env = Env::start(Opts {
        api: crate::common::api_unlimited(),
        fresh_for_ms: Some(FRESH_MS),
        ..Default::default()
    })
    .await;
    let r = env.submit("stale then fresh").await;
    assert_eq!(r.status, 202, "{}", r.body);
    let id = r.json["id"].as_str().unwrap().to_string();
    let c = env.queue.claim("test-worker", 1, 60_000).await.unwrap();
    env.queue
        .complete(&c[0].id, c[0].token, r#"{"v":"old"}"#, 1)
        .await
        .unwrap();
    // Past its fresh window (a read starts no refresh).
    tokio::time::timeout(GUARD, async {
        while env.get(&format!("/api/v1/queries/{id}")).await.json["freshness"] != "stale" {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the result went stale (hang guard)");
    // Asked again: the old result at once, and a refresh task.
    let r = env.submit("stale then fresh").await;
    assert_eq!(r.json["freshness"], "stale", "{}", r.body);
    assert_eq!(r.json["refreshing"], true, "{}", r.body);

    let base = format!("http://{}", env.listen().await);
    let mut stream = Records::open(&base, &id).await;
    let first = data_of(&stream.next().await);
    assert_eq!(
        (&first["status"], &first["freshness"], &first["refreshing"]),
        (&"done".into(), &"stale".into(), &true.into()),
        "{first}"
    );
    assert_eq!(first["result"]["v"], "old");
    assert_eq!(first["stale_reason"], "refreshing");

    // The refresh: claimed (not news) and completed with a new result.
    let c = env.queue.claim("test-worker", 1, 60_000).await.unwrap();
    assert_eq!(c.len(), 1, "the refresh is due");
    env.queue
        .complete(&c[0].id, c[0].token, r#"{"v":"new"}"#, 1)
        .await
        .unwrap();
    let next = data_of(&stream.next().await);
    assert_eq!(next["result"]["v"], "new", "{next}");
    assert_eq!(
        (&next["status"], &next["freshness"], &next["refreshing"]),
        (&"done".into(), &"fresh".into(), &false.into()),
        "{next}"
    );
    // Final now: the stream ends.
    let end = tokio::time::timeout(GUARD, async {
        loop {
            match stream.res.chunk().await {
                Ok(Some(c)) if c.starts_with(b":") => continue,
                Ok(Some(c)) => return Some(String::from_utf8_lossy(&c).into_owned()),
                _ => return None,
            }
        }
    })
    .await
    .expect("the stream ends (hang guard)");
    assert_eq!(end, None, "nothing after the final state");
    env.stop().await;
}
