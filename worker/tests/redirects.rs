//! A redirect from the upstream is followed only on the upstream's own origin. A `Location` on
//! another host or port is never called (the task ends dead with the reason), so the API key
//! and headers go to the upstream alone and an answer cannot point a worker at another service.
//! (reqwest's default policy follows ten hops anywhere, keeping custom key headers.)

use crate::common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::http::{header, HeaderMap, StatusCode};
use axum::routing::any;
use axum::{Json, Router};
use common::*;
use queue::Queue;

const KEY: &str = "k-redirect-secret";

/// A worker with an API key polling `url` until `n` tasks of `q` are settled.
async fn settle(q: &Queue, url: String, n: u64) -> queue::Stats {
    let up = worker::UpstreamArgs {
        url,
        api_key: Some(KEY.into()),
        timeout_ms: 2_000,
        ..worker::UpstreamArgs::default()
    };
    let w = spawn(worker(q, &up, fast_policy(), fast_worker_args(4)));
    let s = wait_settled(q, n, Duration::from_secs(30)).await;
    w.stop().await;
    s
}

/// The test kit's queue `name` with `queries` enqueued.
async fn queue_named(name: &str, queries: &[&str]) -> Queue {
    let q = queue(name).await;
    for query in queries {
        q.enqueue(query, "", &fast_policy().enqueue_policy())
            .await
            .expect("enqueue");
    }
    q
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_to_another_origin_is_never_followed() {
    init_tracing();
    // The other origin counts every request it gets, and what came with it.
    let foreign_calls = Arc::new(AtomicU64::new(0));
    let counted = foreign_calls.clone();
    let foreign = serve_upstream(Router::new().fallback(any(move || {
        let counted = counted.clone();
        async move {
            counted.fetch_add(1, Ordering::SeqCst);
            Json(serde_json::json!({"status": "done", "data": "from elsewhere"}))
        }
    })))
    .await;
    let target = format!("{foreign}/steal");
    let upstream = serve_upstream(Router::new().route(
        "/api/query",
        any(move || {
            let target = target.clone();
            async move { (StatusCode::FOUND, [(header::LOCATION, target)]) }
        }),
    ))
    .await;
    let queries = ["elsewhere 1", "elsewhere 2", "elsewhere 3"];
    let q = queue_named("redirect-foreign", &queries).await;
    let s = settle(&q, format!("{upstream}/api/query?q={{key}}"), 3).await;
    assert_eq!((s.results, s.dead), (0, 3), "{s:?}");
    assert_eq!(
        foreign_calls.load(Ordering::SeqCst),
        0,
        "the other origin was called"
    );
    for query in queries {
        let d = q.get(&id_of(query)).await.expect("get").expect("known");
        let task = d.task.expect("its record");
        let error = task.last_error.unwrap_or_default();
        assert!(
            error.contains("redirected to another origin") && error.contains(&foreign),
            "{query}: {error:?}"
        );
        assert_eq!(
            task.attempts, 1,
            "a refused redirect is not retried: {query}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_on_the_upstreams_origin_is_followed_with_its_key() {
    init_tracing();
    let keyed_calls = Arc::new(AtomicU64::new(0));
    let counted = keyed_calls.clone();
    let upstream = serve_upstream(
        Router::new()
            .route(
                "/api/query",
                any(|uri: axum::http::Uri| async move {
                    let moved = format!("/moved?{}", uri.query().unwrap_or(""));
                    (StatusCode::TEMPORARY_REDIRECT, [(header::LOCATION, moved)])
                }),
            )
            .route(
                "/moved",
                any(move |headers: HeaderMap| {
                    let counted = counted.clone();
                    async move {
                        if headers.get("x-api-key").and_then(|v| v.to_str().ok()) == Some(KEY) {
                            counted.fetch_add(1, Ordering::SeqCst);
                        }
                        Json(serde_json::json!({"status": "done", "data": "moved here"}))
                    }
                }),
            ),
    )
    .await;
    let queries = ["moved 1", "moved 2", "moved 3"];
    let q = queue_named("redirect-same", &queries).await;
    let s = settle(&q, format!("{upstream}/api/query?q={{key}}"), 3).await;
    assert_eq!((s.results, s.dead), (3, 0), "{s:?}");
    assert_eq!(keyed_calls.load(Ordering::SeqCst), 3, "each with the key");
}
