//! The public API's live stream (`GET /api/v1/queries/{id}/events`) through the real router
//! against a private redis-server, the simulator and a worker: a `state` event now and on every
//! change a reader can see, the final one, then the stream closes.

use crate::common;
use common::api::*;

use std::time::Duration;

use axum::{body::Body, http::Request};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

#[tokio::test]
async fn sse_sends_state_then_final_and_closes() {
    let env = Env::start(Opts {
        worker: true,
        api: crate::common::api_unlimited(),
        ..Default::default()
    })
    .await;
    let r = env.submit("stream-1 polls=3").await;
    assert_eq!(r.status, 202);
    let id = r.json["id"].as_str().unwrap().to_string();

    let res = env
        .router
        .clone()
        .oneshot(
            Request::get(format!("/api/v1/queries/{id}/events"))
                .header("last-event-id", "12345")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 200);
    assert_eq!(
        res.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    // The body ends by itself after the final event.
    let body = tokio::time::timeout(Duration::from_secs(60), res.into_body().collect())
        .await
        .expect("stream closes after the final event (60 s hang guard)")
        .unwrap()
        .to_bytes();
    let text = String::from_utf8_lossy(&body);
    let events: Vec<(u64, Value)> = text
        .split("\n\n")
        .filter(|block| block.contains("event: state"))
        .map(|block| {
            let id = block
                .lines()
                .find_map(|l| l.strip_prefix("id: "))
                .unwrap()
                .parse()
                .unwrap();
            let data = block
                .lines()
                .find_map(|l| l.strip_prefix("data: "))
                .unwrap();
            (id, serde_json::from_str(data).unwrap())
        })
        .collect();
    assert!(events.len() >= 2, "state then final: {text}");
    assert_eq!(events[0].1["status"], "processing", "{text}");
    let last = &events.last().unwrap().1;
    assert_eq!(last["status"], "done", "{text}");
    assert!(last["result"].is_object());
    assert!(
        events.windows(2).all(|w| w[0].0 <= w[1].0),
        "event ids grow: {text}"
    );
    assert_eq!(
        events.iter().filter(|e| e.1["status"] == "done").count(),
        1,
        "one final event: {text}"
    );

    // A stream opened on a finished query sends the final state and closes at once.
    let res = env
        .router
        .clone()
        .oneshot(
            Request::get(format!("/api/v1/queries/{id}/events"))
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let body = tokio::time::timeout(Duration::from_secs(30), res.into_body().collect())
        .await
        .expect("closes by itself (30 s hang guard)")
        .unwrap()
        .to_bytes();
    let text = String::from_utf8_lossy(&body);
    assert_eq!(text.matches("event: state").count(), 1, "{text}");
    assert!(text.contains(r#""status":"done""#), "{text}");
    env.stop().await;
}

/// One `state` event per change a reader of the page can see: the state at the start, then
/// per poll its result (partial data, polls + 1, the next due time), then the final state —
/// not the start of each poll (a claim), which changes nothing shown but `next_poll_at`
/// turning null. Over real HTTP; the queue is paused until the stream has its first state, so
/// no poll is missed; each upstream answer takes 300 ms, so a claim is in Redis long enough
/// for the stream to read it (the old stream sent it, nine events instead of five).
#[tokio::test]
async fn sse_sends_one_state_per_poll_result_not_per_claim() {
    let env = Env::start(Opts {
        worker: true,
        api: crate::common::api_unlimited(),
        ..Default::default()
    })
    .await;
    env.queue.pause("test").await.unwrap();
    // Calls 1 to 3 answer "processing", call 4 "done".
    let r = env.submit("stream-count polls=4 latency=300").await;
    assert_eq!(r.status, 202, "{}", r.body);
    let id = r.json["id"].as_str().unwrap().to_string();
    let base = format!("http://{}", env.listen().await);
    let mut res = reqwest::get(format!("{base}/api/v1/queries/{id}/events"))
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 200);
    let guard = Duration::from_secs(60);
    let mut text = String::new();
    // The first state, read before any poll may start.
    while !text.contains("\n\n") {
        let chunk = tokio::time::timeout(guard, res.chunk())
            .await
            .expect("the first state (60 s hang guard)")
            .unwrap()
            .expect("the stream is open");
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    env.queue.resume("test").await.unwrap();
    // Then everything until the stream closes after the final state.
    while let Some(chunk) = tokio::time::timeout(guard, res.chunk())
        .await
        .expect("the stream closes after the final state (60 s hang guard)")
        .unwrap()
    {
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    let states: Vec<(i64, Value)> = text
        .split("\n\n")
        .filter(|block| block.contains("event: state"))
        .map(|block| {
            let field = |name: &str| {
                block
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .unwrap()
                    .to_string()
            };
            (
                field("id: ").parse().unwrap(),
                serde_json::from_str(&field("data: ")).unwrap(),
            )
        })
        .collect();
    let seen: Vec<(String, u64)> = states
        .iter()
        .map(|(_, v)| {
            (
                v["status"].as_str().unwrap().into(),
                v["polls"].as_u64().unwrap(),
            )
        })
        .collect();
    let want: Vec<(String, u64)> = [
        ("processing", 0),
        ("processing", 1),
        ("processing", 2),
        ("processing", 3),
        ("done", 3),
    ]
    .iter()
    .map(|(s, p)| (s.to_string(), *p))
    .collect();
    assert_eq!(
        seen, want,
        "one state per poll result, then the final:\n{text}"
    );
    // Every processing state after the first names its next poll (none is a claim's).
    assert!(
        states[1..4].iter().all(|(_, v)| v["next_poll_at"].is_i64()),
        "{text}"
    );
    assert!(
        states.windows(2).all(|w| w[0].0 < w[1].0),
        "event ids grow: {text}"
    );
    env.stop().await;
}
