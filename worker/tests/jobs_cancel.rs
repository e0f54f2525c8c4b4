//! Upstream cancels of a job API's jobs: an operator's cancel, and a purge of a dead task,
//! each reach the upstream exactly once per job (one accepted cancel), also when the upstream
//! refuses the first tries (retried with backoff), and the outcome is in the task's history.

use crate::common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::Path;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use common::*;
use worker::{JobArgs, UpstreamArgs};

/// Per job: cancel calls received, and those accepted (200).
#[derive(Default)]
struct Cancels {
    calls: HashMap<String, u32>,
    accepted: HashMap<String, u32>,
}

/// A job API whose jobs run until cancelled (the job `dead…` answers 400: the task dies), and
/// whose cancel endpoint answers 503 twice per job before it takes the cancel.
async fn job_api() -> (String, Arc<Mutex<Cancels>>) {
    let cancels = Arc::new(Mutex::new(Cancels::default()));
    let seen = cancels.clone();
    let app = Router::new()
        .route(
            "/jobs",
            post(|headers: HeaderMap, body: String| async move {
                let host = headers["host"].to_str().unwrap_or("").to_string();
                let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
                let id = v["q"].as_str().unwrap_or("x").replace(' ', "-");
                let get = format!("http://{host}/jobs/{id}");
                (
                    StatusCode::CREATED,
                    Json(serde_json::json!({"id": id, "status": "starting", "urls": {"get": get}})),
                )
            }),
        )
        .route(
            "/jobs/{id}",
            get(|Path(id): Path<String>| async move {
                if id.starts_with("dead") {
                    return (
                        StatusCode::BAD_REQUEST,
                        Json(serde_json::json!({"error": "no"})),
                    );
                }
                (
                    StatusCode::OK,
                    Json(serde_json::json!({"status": "processing"})),
                )
            }),
        )
        .route(
            "/jobs/{id}/cancel",
            post(move |Path(id): Path<String>| {
                let seen = seen.clone();
                async move {
                    let mut c = seen.lock().unwrap();
                    let n = c.calls.entry(id.clone()).or_default();
                    *n += 1;
                    if *n <= 2 {
                        return StatusCode::SERVICE_UNAVAILABLE;
                    }
                    *c.accepted.entry(id).or_default() += 1;
                    StatusCode::OK
                }
            }),
        );
    (serve_upstream(app).await, cancels)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_or_purge_reaches_the_upstream_once_per_job_through_its_refusals() {
    init_tracing();
    let (base, cancels) = job_api().await;
    let up = UpstreamArgs {
        timeout_ms: 2_000,
        job: JobArgs {
            submit_url: Some(format!("{base}/jobs")),
            submit_body: Some(r#"{"q": "{key}"}"#.into()),
            poll_url: Some("body:/urls/get".into()),
            cancel_url: Some("{job}/cancel".into()),
            ..UpstreamArgs::default().job
        },
        ..UpstreamArgs::default()
    };
    let q = queue("jobs-cancel").await;
    let live = ["cancel 1", "cancel 2", "cancel 3"];
    for query in live.iter().chain(&["dead 1"]) {
        q.enqueue(query, "", &fast_policy().enqueue_policy())
            .await
            .expect("enqueue");
    }
    let w = spawn(worker(&q, &up, fast_policy(), fast_worker_args(4)));
    // Every live task has its job, and the other is dead (its job's poll answered 400).
    let t0 = Instant::now();
    loop {
        let mut with_job = 0;
        for query in live {
            let d = q.get(&id_of(query)).await.unwrap().unwrap();
            with_job += usize::from(d.task.and_then(|t| t.job).is_some());
        }
        if with_job == live.len() && q.stats().await.unwrap().dead == 1 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "jobs not submitted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for query in live {
        assert!(q
            .cancel(id_of(query).as_str(), "test")
            .await
            .expect("cancel"));
    }
    assert_eq!(
        q.purge(queue::PurgeTarget::Dead, "test")
            .await
            .expect("purge"),
        1
    );
    // Each job: two refusals, then one accepted cancel; none more.
    let jobs = ["cancel-1", "cancel-2", "cancel-3", "dead-1"];
    let t0 = Instant::now();
    while jobs.iter().any(|j| {
        cancels
            .lock()
            .unwrap()
            .accepted
            .get(*j)
            .copied()
            .unwrap_or(0)
            == 0
    }) {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "not every job cancelled"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Time for a duplicate to show, were one coming.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    w.stop().await;
    {
        let c = cancels.lock().unwrap();
        for j in jobs {
            assert_eq!((c.calls[j], c.accepted[j]), (3, 1), "{j}");
        }
    }
    // The cancelled task's history tells the story (the purged one's is gone with it).
    let d = q.get(id_of("cancel 1").as_str()).await.unwrap().unwrap();
    let story: Vec<&str> = d
        .history
        .iter()
        .filter(|h| h.kind == "upstream_cancel")
        .map(|h| h.detail.as_str())
        .collect();
    assert!(
        story.iter().any(|s| s.starts_with("queued for job")),
        "{story:?}"
    );
    assert!(
        story
            .iter()
            .any(|s| s.contains("HTTP 503") && s.contains("retried")),
        "{story:?}"
    );
    assert!(
        story
            .iter()
            .any(|s| s.starts_with("cancelled upstream (HTTP 200)")),
        "{story:?}"
    );
}
