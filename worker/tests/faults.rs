//! Faults: with 30% 5xx, 10% malformed bodies and 5% hangs (cut by a short client timeout),
//! every task ends done or dead with a reason, none stays leased, none is lost, none is
//! completed twice. And a 429's `Retry-After` is honoured, measured from the simulator's view.
//! What the worker sends (method, extra headers, API key) and the cap on an answer's size,
//! against small upstreams of their own.

use crate::common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, Method};
use axum::routing::any;
use axum::{Json, Router};
use common::*;
use queue::TaskState;
use sim::SimArgs;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faulty_upstream_every_task_ends_done_or_dead() {
    init_tracing();
    let sim = start_sim(SimArgs {
        error_rate: 0.30,
        malformed_rate: 0.10,
        hang_rate: 0.05,
        hang_ms: 60_000,
        seed: Some(7),
        ..SimArgs::default()
    })
    .await;
    let q = queue("faults").await;
    let policy = fast_policy();
    // 300 ms client timeout: a hang costs 300 ms, not a minute.
    let up = sim.upstream_args(300);
    let n = 300u64;
    let keys: Vec<String> = (0..n)
        .map(|i| format!("f-{i} polls={}", 1 + i % 3))
        .collect();
    for k in &keys {
        q.enqueue(k, "", &policy.enqueue_policy())
            .await
            .expect("enqueue");
    }
    let w = spawn(worker(&q, &up, policy.clone(), fast_worker_args(32)));
    let stats = wait_settled(&q, n, Duration::from_secs(60)).await;
    let report = w.stop().await;
    println!(
        "faults: {} results, {} dead; {report:?}",
        stats.results, stats.dead
    );
    assert_eq!(stats.leased, 0);
    assert_eq!(stats.results + stats.dead, n, "none lost");
    assert!(report.retried > 0, "faults were injected: {report:?}");

    let witness = sim.stats().await;
    let (mut done, mut dead) = (0, 0);
    for k in &keys {
        let d = q.get(&id_of(k)).await.expect("get").expect("task known");
        let seen = witness.keys.get(k).map_or(0, |s| s.done);
        if let Some(r) = d.result {
            done += 1;
            assert_eq!(seen, 1, "{k} answered done {seen} times");
            assert!(r.data.contains("\"progress\":1"), "{k}: {}", r.data);
        } else {
            let t = d.task.expect("live task");
            assert_eq!(t.state, TaskState::Dead, "{k}: {t:?}");
            assert!(t.dead_reason.is_some(), "{k}: no reason");
            assert!(t.last_error.is_some(), "{k}: no error");
            assert_eq!(seen, 0, "{k} dead yet answered done");
            dead += 1;
        }
        if let Some(s) = witness.keys.get(k) {
            assert!(
                s.calls <= u64::from(policy.max_polls + policy.max_attempts),
                "{k}: {s:?}"
            );
        }
    }
    println!("faults: {done} done, {dead} dead of {n}");
    assert_eq!(done + dead, n);
    assert!(done > n / 2, "most tasks survive 5 attempts: {done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_is_honoured() {
    init_tracing();
    let sim = start_sim(SimArgs::default()).await;
    let q = queue("retry-after").await;
    // Backoff alone would retry within 50 ms; Retry-After: 1 must win.
    let policy = fast_policy();
    let up = sim.upstream_args(2_000);
    let key = "ra fail=429 fail_times=2 retry_after=1 polls=2";
    q.enqueue(key, "", &policy.enqueue_policy())
        .await
        .expect("enqueue");
    let w = spawn(worker(&q, &up, policy, fast_worker_args(4)));
    wait_settled(&q, 1, Duration::from_secs(20)).await;
    w.stop().await;

    let k = sim.key(key).await;
    assert_eq!(k.calls, 4, "{k:?}");
    assert_eq!(k.done, 1);
    let gaps: Vec<i64> = k.call_ms.windows(2).map(|w| w[1] - w[0]).collect();
    println!("gaps between polls (ms): {gaps:?} (429, 429, processing, done)");
    // The upstream's view: no call came back before Retry-After allowed it (a lower bound the
    // queue enforces: a task is not due before its time).
    assert!(
        gaps[0] >= 995 && gaps[1] >= 995,
        "Retry-After not honoured: {gaps:?}"
    );
    // The decisions, from the history (Redis time): both 429s were retried after the 1 s
    // Retry-After, longer than any backoff the policy could pick (at most 200 ms); then the
    // processing answer was followed by the poll policy's 20 ms (± 10 % jitter), not by
    // another Retry-After.
    let d = q.get(&id_of(key)).await.expect("get").expect("detail");
    let h: Vec<_> = d.history.iter().rev().collect();
    let kinds: Vec<_> = h.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "enqueued",
            "claimed",
            "error",
            "claimed",
            "error",
            "claimed",
            "polled",
            "claimed",
            "completed"
        ],
        "{h:?}"
    );
    let next_at = |detail: &str, marker: &str| -> i64 {
        let tail = detail
            .split(marker)
            .nth(1)
            .unwrap_or_else(|| panic!("no '{marker}' in {detail}"));
        let digits: String = tail.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().expect("a time")
    };
    for e in [h[2], h[4]] {
        assert!(e.detail.contains("429"), "{e:?}");
        let delay = next_at(&e.detail, "retry at ") - e.at_ms;
        assert_eq!(
            delay, 1_000,
            "retried after Retry-After, not the backoff: {e:?}"
        );
    }
    let delay = next_at(&h[6].detail, "next poll at ") - h[6].at_ms;
    assert!(
        (18..=22).contains(&delay),
        "after the 429s the poll policy applies again: next poll {delay} ms later: {:?}",
        h[6]
    );
    let r = q.result_by_id(&id_of(key)).await.expect("read");
    assert!(r.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_failed_answer_is_dead_with_its_message() {
    init_tracing();
    let sim = start_sim(SimArgs::default()).await;
    let q = queue("failed-answer").await;
    let up = sim.upstream_args(2_000);
    let key = "bad status=failed error=no-such-order";
    q.enqueue(key, "", &fast_policy().enqueue_policy())
        .await
        .expect("enqueue");
    let w = spawn(worker(&q, &up, fast_policy(), fast_worker_args(2)));
    wait_settled(&q, 1, Duration::from_secs(20)).await;
    let report = w.stop().await;
    assert_eq!(report.dead, 1);
    let t = q
        .get(&id_of(key))
        .await
        .expect("get")
        .and_then(|d| d.task)
        .expect("task");
    assert_eq!(t.state, TaskState::Dead);
    assert_eq!(
        t.last_error.as_deref(),
        Some("upstream failed: no-such-order")
    );
    assert_eq!(sim.key(key).await.calls, 1, "no retry of a failed answer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_with_an_override_out_of_range_ends_dead_as_fatal() {
    init_tracing();
    let sim = start_sim(SimArgs::default()).await;
    let q = queue("override-out-of-range").await;
    let up = sim.upstream_args(2_000);
    let key = "x items=4294967295";
    q.enqueue(key, "", &fast_policy().enqueue_policy())
        .await
        .expect("enqueue");
    let w = spawn(worker(&q, &up, fast_policy(), fast_worker_args(2)));
    wait_settled(&q, 1, Duration::from_secs(20)).await;
    let report = w.stop().await;
    assert_eq!(report.dead, 1, "{report:?}");
    let t = q
        .get(&id_of(key))
        .await
        .expect("get")
        .and_then(|d| d.task)
        .expect("task");
    assert_eq!(t.state, TaskState::Dead);
    assert_eq!(t.dead_reason, Some(queue::DeadReason::Fatal), "{t:?}");
    // The error names the call that got it (without the query string: it may hold secrets).
    assert_eq!(
        t.last_error,
        Some(format!(
            "GET {}/api/query: HTTP 400: items: 4294967295 is out of range 0..=1000",
            sim.base
        )),
        "{t:?}"
    );
    // Refused once, not retried, and nothing kept for the key.
    let st = sim.stats().await;
    assert!(!st.keys.contains_key(key), "{st:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dot_segment_query_ends_dead_without_calling_another_path() {
    init_tracing();
    let sim = start_sim(SimArgs::default()).await;
    let q = queue("dot-segment").await;
    // `{key}` as a path segment: `..` would turn /api/query/../x into /api/x.
    let up = worker::UpstreamArgs {
        url: format!("{}/api/query/{{key}}/x", sim.base),
        ..sim.upstream_args(2_000)
    };
    q.enqueue("..", "", &fast_policy().enqueue_policy())
        .await
        .expect("enqueue");
    let w = spawn(worker(&q, &up, fast_policy(), fast_worker_args(2)));
    wait_settled(&q, 1, Duration::from_secs(20)).await;
    w.stop().await;
    let t = q
        .get(&id_of(".."))
        .await
        .expect("get")
        .and_then(|d| d.task)
        .expect("task");
    assert_eq!(t.state, TaskState::Dead);
    assert_eq!(t.dead_reason, Some(queue::DeadReason::Fatal), "{t:?}");
    assert_eq!(
        t.last_error.as_deref(),
        Some("query '..' cannot be placed in the URL path")
    );
    assert_eq!(sim.stats().await.calls, 0, "no call went out");
}

#[tokio::test]
async fn an_error_answer_keeps_its_message_with_secrets_masked() {
    let sim = start_sim(SimArgs::default()).await;
    let up = worker::Upstream::new(&worker::UpstreamArgs {
        api_key: Some("k3y-s3cret".into()),
        ..sim.upstream_args(2_000)
    })
    .expect("upstream");
    // The simulator quotes the bad value, here equal to the API key: it must not come back.
    let err = up.query("x items=k3y-s3cret").await.expect_err("400");
    assert_eq!(
        err.to_string(),
        "HTTP 400: items: *** is out of range 0..=1000"
    );
    assert!(err.is_permanent());
}

/// What an upstream got: each call's method and headers.
type Calls = Arc<Mutex<Vec<(Method, HeaderMap)>>>;

async fn record(
    State(calls): State<Calls>,
    method: Method,
    headers: HeaderMap,
) -> Json<serde_json::Value> {
    calls.lock().unwrap().push((method, headers));
    Json(serde_json::json!({"status": "done", "data": "ok"}))
}

/// The configured method, every extra header and the API key (in its configured header) are
/// sent with each call, as an upstream that records its requests sees them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_method_extra_headers_and_api_key_are_sent() {
    let calls = Calls::default();
    let base = serve_upstream(
        Router::new()
            .route("/api/query", any(record))
            .with_state(calls.clone()),
    )
    .await;
    let q = queue("sent-headers").await;
    q.enqueue("with headers", "", &fast_policy().enqueue_policy())
        .await
        .expect("enqueue");
    let up = worker::UpstreamArgs {
        url: format!("{base}/api/query?q={{key}}"),
        method: "post".into(),
        headers: vec![
            "X-Tenant: acme".into(),
            "Authorization: Bearer t0ken".into(),
        ],
        api_key: Some("k3y-s3cret".into()),
        api_key_header: "X-Service-Key".into(),
        timeout_ms: 2_000,
        ..worker::UpstreamArgs::default()
    };
    let w = spawn(worker(&q, &up, fast_policy(), fast_worker_args(1)));
    wait_settled(&q, 1, Duration::from_secs(20)).await;
    assert_eq!(w.stop().await.completed, 1);
    let calls = calls.lock().unwrap();
    assert_eq!(calls.len(), 1, "{calls:?}");
    let (method, headers) = &calls[0];
    assert_eq!(method, Method::POST);
    assert_eq!(headers["x-tenant"], "acme", "{headers:?}");
    assert_eq!(headers["authorization"], "Bearer t0ken", "{headers:?}");
    assert_eq!(headers["x-service-key"], "k3y-s3cret", "{headers:?}");
}

/// Answers `done` with 4,000 bytes of data for a query starting with "big", a few bytes
/// otherwise.
async fn sized(Query(q): Query<HashMap<String, String>>) -> Json<serde_json::Value> {
    let big = q.get("q").is_some_and(|k| k.starts_with("big"));
    let data = if big { "x".repeat(4_000) } else { "ok".into() };
    Json(serde_json::json!({"status": "done", "data": data}))
}

/// REPOLL_UPSTREAM_MAX_BODY (here 1,000 bytes): a larger answer is an error — retried, then
/// dead with the reason — and its data is never stored; an answer within the limit is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_over_the_max_body_is_an_error_and_not_stored() {
    let base = serve_upstream(Router::new().route("/api/query", any(sized))).await;
    let q = queue("max-body").await;
    for key in ["big answer", "small answer"] {
        q.enqueue(key, "", &fast_policy().enqueue_policy())
            .await
            .expect("enqueue");
    }
    let up = worker::UpstreamArgs {
        url: format!("{base}/api/query?q={{key}}"),
        max_body_bytes: 1_000,
        timeout_ms: 2_000,
        ..worker::UpstreamArgs::default()
    };
    let w = spawn(worker(&q, &up, fast_policy(), fast_worker_args(2)));
    wait_settled(&q, 2, Duration::from_secs(30)).await;
    w.stop().await;
    let big = q
        .get(&id_of("big answer"))
        .await
        .expect("get")
        .expect("big");
    assert!(
        big.result.is_none(),
        "stored, {:?} bytes",
        big.result.map(|r| r.data.len())
    );
    let t = big.task.expect("a task");
    assert_eq!(t.state, TaskState::Dead, "{t:?}");
    assert_eq!(t.dead_reason, Some(queue::DeadReason::MaxAttempts), "{t:?}");
    assert!(
        t.last_error
            .as_deref()
            .is_some_and(|e| e.contains("larger than 1000 bytes")),
        "{t:?}"
    );
    let small = q
        .get(&id_of("small answer"))
        .await
        .expect("get")
        .expect("small");
    assert!(small.result.is_some(), "{small:?}");
}
