//! `REPOLL_UPSTREAM_STATUS_FROM=http` against a real HTTP upstream that answers 202 (no body)
//! until its result is ready, then 200 with the result: each 202 is a poll, the 200 the final
//! data; the same upstream read by the body's status (the default) is a bad body every time.

use crate::common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::any;
use axum::{Json, Router};
use common::*;
use queue::Queue;
use worker::upstream::StatusFrom;

/// Answers 202 with an empty body to the first two calls for each key, then 200 with data.
async fn accepted_then_done() -> String {
    let calls = Arc::new(AtomicU64::new(0));
    serve_upstream(Router::new().route(
        "/api/query",
        any(move || {
            let calls = calls.clone();
            async move {
                if calls.fetch_add(1, Ordering::SeqCst) % 3 < 2 {
                    StatusCode::ACCEPTED.into_response()
                } else {
                    Json(serde_json::json!({"data": {"answer": 42}})).into_response()
                }
            }
        }),
    ))
    .await
}

async fn run(name: &str, status_from: StatusFrom) -> (Queue, queue::Stats) {
    let base = accepted_then_done().await;
    let q = queue(name).await;
    q.enqueue("ready soon", "", &fast_policy().enqueue_policy())
        .await
        .expect("enqueue");
    let up = worker::UpstreamArgs {
        url: format!("{base}/api/query?q={{key}}"),
        status_from,
        ..worker::UpstreamArgs::default()
    };
    // One slot: the upstream counts calls, not keys.
    let w = spawn(worker(&q, &up, fast_policy(), fast_worker_args(1)));
    let s = wait_settled(&q, 1, Duration::from_secs(30)).await;
    w.stop().await;
    (q, s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_202_is_a_poll_and_the_200_the_result() {
    init_tracing();
    let (q, s) = run("status-from-http", StatusFrom::Http).await;
    assert_eq!((s.results, s.dead), (1, 0), "{s:?}");
    let d = q
        .get(&id_of("ready soon"))
        .await
        .expect("get")
        .expect("known");
    let result = d.result.expect("stored result");
    assert!(result.data.contains("42"), "{result:?}");
    assert_eq!(result.polls, 2, "two 202s, each a poll");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_by_the_body_the_same_answers_are_bad_bodies() {
    init_tracing();
    let (_, s) = run("status-from-body", StatusFrom::Body).await;
    assert_eq!((s.results, s.dead), (0, 1), "{s:?}");
}
