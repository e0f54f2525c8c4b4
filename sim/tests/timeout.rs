//! The simulator's request timeout ([`REQUEST_TIMEOUT`]) on tokio's paused clock. The router is
//! called in-process (no sockets), so whenever every task waits on a timer the virtual clock
//! jumps to the next one: minutes of simulated latency and hangs take no real time, and the
//! times measured here are exact virtual times, not wall-clock speed.

use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use sim::limits::{MAX_HANG_MS, MAX_LATENCY_MS, REQUEST_TIMEOUT};
use sim::SimArgs;
use tokio::time::Instant;
use tower::ServiceExt;

/// Every request hangs for `hang_ms` after `latency_ms` plus up to `jitter_ms` of latency.
fn hanging(latency_ms: u64, jitter_ms: u64, hang_ms: u64, seed: u64) -> SimArgs {
    SimArgs {
        hang_rate: 1.0,
        hang_ms,
        latency_ms,
        latency_jitter_ms: jitter_ms,
        seed: Some(seed),
        ..SimArgs::default()
    }
}

fn query(key: &str) -> Request<Body> {
    Request::get(format!("/api/query?q={key}"))
        .body(Body::empty())
        .expect("request")
}

/// Status and body of an answer.
async fn read(resp: axum::response::Response) -> (StatusCode, String) {
    let status = resp.status();
    let body = axum::body::to_bytes(resp.into_body(), 1 << 20)
        .await
        .expect("body");
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test(start_paused = true)]
async fn a_hang_after_the_longest_latencies_is_a_504_within_the_request_timeout() {
    // The knobs at their maxima, and far past them (clamped to the maxima by `router`).
    let knobs = [
        (MAX_LATENCY_MS, MAX_LATENCY_MS, MAX_HANG_MS),
        (u64::MAX, u64::MAX, u64::MAX),
    ];
    for (latency_ms, jitter_ms, hang_ms) in knobs {
        // A few seeds: the jitter is drawn anew for each.
        for seed in 0..4 {
            let started = Instant::now();
            let resp = sim::router(hanging(latency_ms, jitter_ms, hang_ms, seed))
                .oneshot(query("k"))
                .await
                .expect("infallible");
            let took = started.elapsed();
            let (status, body) = read(resp).await;
            let case = format!("latency {latency_ms} + jitter {jitter_ms} + hang {hang_ms} ms, seed {seed}: took {took:?}");
            assert_eq!(status, StatusCode::GATEWAY_TIMEOUT, "{case}: {body}");
            // The hang's own answer after the whole latency and hang: every knob is obeyed,
            // not cut short by the guard.
            assert!(body.contains("simulated hang ended"), "{case}: {body:?}");
            assert!(
                took >= Duration::from_millis(MAX_LATENCY_MS + MAX_HANG_MS),
                "{case}: shorter than the fixed latency plus the hang"
            );
            assert!(
                took <= REQUEST_TIMEOUT,
                "{case}: later than {REQUEST_TIMEOUT:?}"
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_request_running_past_the_request_timeout_is_answered_504_by_the_guard() {
    // No knob can make a handler itself run past REQUEST_TIMEOUT (by design: it is the longest
    // latency and hang plus slack, see the test above and `limits`), so the request is stalled
    // instead: it starts, then nobody polls it while the clock moves past the deadline, as on
    // a starved runtime. A hang keeps the handler waiting whenever it is polled again.
    let args = hanging(MAX_LATENCY_MS, MAX_LATENCY_MS, MAX_HANG_MS, 0);
    let mut call = std::pin::pin!(sim::router(args).oneshot(query("k")));
    assert!(
        futures::poll!(call.as_mut()).is_pending(),
        "a hanging request answered at once"
    );
    tokio::time::advance(REQUEST_TIMEOUT + Duration::from_secs(1)).await;
    let resumed = Instant::now();
    let resp = call.await.expect("infallible");
    let waited = resumed.elapsed();
    let (status, body) = read(resp).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT, "{body:?}");
    // The guard's answer (an empty body), not the hang's own JSON after waiting out the hang.
    assert_eq!(body, "", "not the guard's answer");
    assert_eq!(
        waited,
        Duration::ZERO,
        "past REQUEST_TIMEOUT the answer must come at once"
    );
}
