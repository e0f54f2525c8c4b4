//! Job APIs end to end over HTTP: the simulator's three job forms (and a `{job}` template),
//! one job per query however many ask it, the job stored under the lease's fencing token, the
//! same idempotency key on every submit of one job, and the origin guard on URLs from answers.

use crate::common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{any, post};
use axum::{Json, Router};
use common::*;
use queue::Queue;
use sim::jobs::JobStats;
use worker::{JobArgs, UpstreamArgs};

async fn jobs_of(base: &str) -> JobStats {
    reqwest::get(format!("{base}/_sim/jobs"))
        .await
        .expect("sim jobs")
        .json()
        .await
        .expect("sim jobs json")
}

/// A predictions-style upstream at `base`: submit, then follow `urls.get`.
fn predictions(base: &str, idempotency: bool) -> UpstreamArgs {
    UpstreamArgs {
        data_pointer: "/output".into(),
        timeout_ms: 5_000,
        job: JobArgs {
            submit_url: Some(format!("{base}/v1/predictions")),
            submit_body: Some(r#"{"input": {"q": "{key}"}}"#.into()),
            poll_url: Some("body:/urls/get".into()),
            idempotency_header: idempotency.then(|| "Idempotency-Key".to_string()),
            ..UpstreamArgs::default().job
        },
        ..UpstreamArgs::default()
    }
}

/// Google's long-running operations: the name is the job, `done` a boolean left out until true.
fn long_running(base: &str) -> UpstreamArgs {
    let list = |s: &str| vec![s.to_string()];
    UpstreamArgs {
        status_pointer: "/done".into(),
        data_pointer: "/response".into(),
        done_values: list("true"),
        processing_values: list("false"),
        missing_status: worker::StatusFallback::Processing,
        timeout_ms: 5_000,
        job: JobArgs {
            submit_url: Some(format!("{base}/v1/models/sim:predictLongRunning")),
            submit_body: Some(r#"{"instances": [{"prompt": "{key}"}], "q": "{key}"}"#.into()),
            job_pointer: "/name".into(),
            poll_url: Some(format!("{base}/v1/{{job}}")),
            ..UpstreamArgs::default().job
        },
        ..UpstreamArgs::default()
    }
}

/// An Azure-style operation: `202` + `Operation-Location`, the result at `resourceLocation`.
fn operation(base: &str) -> UpstreamArgs {
    UpstreamArgs {
        processing_values: vec!["notStarted".into(), "running".into()],
        timeout_ms: 5_000,
        job: JobArgs {
            submit_url: Some(format!("{base}/v1/operations")),
            submit_body: Some(r#"{"q": "{key}"}"#.into()),
            poll_url: Some("header:Operation-Location".into()),
            result_url: Some("body:/resourceLocation".into()),
            result_data_pointer: Some("/result".into()),
            ..UpstreamArgs::default().job
        },
        ..UpstreamArgs::default()
    }
}

/// `n` queries asked twice each (the second ask joins), worked by two workers until settled.
async fn ask_twice_and_settle(q: &Queue, up: &UpstreamArgs, prefix: &str, n: usize) {
    for round in 0..2 {
        for i in 0..n {
            let r = q
                .enqueue(
                    &format!("{prefix} {i}"),
                    "",
                    &fast_policy().enqueue_policy(),
                )
                .await
                .expect("enqueue");
            let created = matches!(r, queue::Enqueued::Created(_));
            assert_eq!(created, round == 0, "ask {round} of query {i}: {r:?}");
        }
    }
    let a = spawn(worker(q, up, fast_policy(), fast_worker_args(8)));
    let b = spawn(worker(q, up, fast_policy(), fast_worker_args(8)));
    let s = wait_settled(q, n as u64, Duration::from_secs(60)).await;
    a.stop().await;
    b.stop().await;
    assert_eq!((s.results, s.dead), (n as u64, 0), "{s:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_job_form_makes_exactly_one_job_per_query() {
    init_tracing();
    let sim = start_sim(sim::SimArgs {
        polls: 2,
        ..sim::SimArgs::default()
    })
    .await;
    for (name, up) in [
        ("jobs-predictions", predictions(&sim.base, false)),
        ("jobs-long-running", long_running(&sim.base)),
        ("jobs-operation", operation(&sim.base)),
    ] {
        let before = jobs_of(&sim.base).await.created;
        let q = queue(name).await;
        ask_twice_and_settle(&q, &up, name, 100).await;
        let jobs = jobs_of(&sim.base).await;
        assert_eq!(jobs.created - before, 100, "{name}: one job per query");
        // One chain of polls per job: the simulator answers `done` on a job's second poll.
        let stats = sim.stats().await;
        for j in jobs.jobs.iter().filter(|j| j.key.starts_with(name)) {
            assert_eq!(stats.keys[&j.id].calls, 2, "{name}: job {} polled", j.id);
        }
        // The result is the job's own, and the task's history says which job it was.
        let d = q
            .get(&id_of(&format!("{name} 7")))
            .await
            .expect("get")
            .expect("known");
        let result = d.result.expect("a result");
        assert!(
            result.data.contains(&format!("{name} 7")),
            "{name}: {}",
            result.data
        );
        let submitted: Vec<_> = d.history.iter().filter(|h| h.kind == "submitted").collect();
        assert_eq!(submitted.len(), 1, "{name}: {:?}", d.history);
    }
}

/// The simulator behind a proxy that loses the answer of each query's first submit after the
/// simulator made the job (a worker that died between the submit and the store, as the
/// upstream sees it). The proxy counts the submits it passed on.
async fn lossy_proxy(sim: String) -> (String, Arc<AtomicU64>) {
    let seen = Arc::new(std::sync::Mutex::new(
        std::collections::HashSet::<Bytes>::new(),
    ));
    let submits = Arc::new(AtomicU64::new(0));
    let counted = submits.clone();
    let app = Router::new().route(
        "/v1/predictions",
        post(move |headers: HeaderMap, body: Bytes| {
            let (sim, seen, counted) = (sim.clone(), seen.clone(), counted.clone());
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                let mut req = reqwest::Client::new()
                    .post(format!("{sim}/v1/predictions"))
                    .header("content-type", "application/json")
                    .body(body.clone());
                if let Some(k) = headers.get("idempotency-key") {
                    req = req.header("idempotency-key", k.to_str().unwrap_or(""));
                }
                let answer = req.send().await.expect("to the simulator");
                let status = answer.status().as_u16();
                let json: serde_json::Value = answer.json().await.expect("json");
                if seen.lock().unwrap().insert(body) {
                    return (
                        StatusCode::BAD_GATEWAY,
                        Json(serde_json::json!({"error": "lost"})),
                    );
                }
                (StatusCode::from_u16(status).unwrap(), Json(json))
            }
        }),
    );
    (serve_upstream(app).await, submits)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_submit_answer_costs_no_second_job_with_an_idempotency_key() {
    init_tracing();
    for (name, idempotency, jobs_per_query) in
        [("jobs-lost-idem", true, 1), ("jobs-lost-plain", false, 2)]
    {
        let sim = start_sim(sim::SimArgs {
            polls: 1,
            ..sim::SimArgs::default()
        })
        .await;
        let (proxy, submits) = lossy_proxy(sim.base.clone()).await;
        // The poll URLs the simulator gives point at itself: allowed, and without credentials.
        let mut up = predictions(&proxy, idempotency);
        up.job.allowed_origins = vec![sim.base.clone()];
        let q = queue(name).await;
        ask_twice_and_settle(&q, &up, name, 20).await;
        let jobs = jobs_of(&sim.base).await;
        assert_eq!(
            submits.load(Ordering::SeqCst),
            40,
            "{name}: every first submit was re-sent"
        );
        assert_eq!(jobs.created, 20 * jobs_per_query, "{name}: {jobs:?}");
        if idempotency {
            // One key per task, the same on both submits.
            let keys: BTreeMap<_, _> = jobs
                .jobs
                .iter()
                .map(|j| (&j.key, &j.idempotency_key))
                .collect();
            assert_eq!(keys.len(), 20);
            assert!(keys.values().all(|k| k.len() == 36), "{keys:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_url_on_another_origin_is_never_called() {
    init_tracing();
    let foreign_calls = Arc::new(AtomicU64::new(0));
    let counted = foreign_calls.clone();
    let foreign = serve_upstream(Router::new().fallback(any(move || {
        let counted = counted.clone();
        async move {
            counted.fetch_add(1, Ordering::SeqCst);
            Json(serde_json::json!({"status": "succeeded", "output": "from elsewhere"}))
        }
    })))
    .await;
    let get = format!("{foreign}/v1/predictions/x");
    let upstream = serve_upstream(Router::new().route(
        "/v1/predictions",
        post(move || {
            let get = get.clone();
            async move {
                (
                    StatusCode::CREATED,
                    Json(
                        serde_json::json!({"id": "x", "status": "starting", "urls": {"get": get}}),
                    ),
                )
            }
        }),
    ))
    .await;
    let q = queue("jobs-foreign").await;
    q.enqueue("foreign 1", "", &fast_policy().enqueue_policy())
        .await
        .expect("enqueue");
    let w = spawn(worker(
        &q,
        &predictions(&upstream, false),
        fast_policy(),
        fast_worker_args(2),
    ));
    let s = wait_settled(&q, 1, Duration::from_secs(30)).await;
    w.stop().await;
    assert_eq!((s.results, s.dead), (0, 1), "{s:?}");
    assert_eq!(
        foreign_calls.load(Ordering::SeqCst),
        0,
        "the other origin was called"
    );
    let task = q
        .get(&id_of("foreign 1"))
        .await
        .unwrap()
        .unwrap()
        .task
        .unwrap();
    assert_eq!(task.dead_reason, Some(queue::DeadReason::Fatal), "{task:?}");
    let error = task.last_error.unwrap_or_default();
    assert!(error.contains("another origin"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_keeps_its_first_job_and_a_stale_lease_attaches_none() {
    init_tracing();
    let q = queue("jobs-fencing").await;
    q.enqueue("fenced", "", &fast_policy().enqueue_policy())
        .await
        .expect("enqueue");
    let id = id_of("fenced");
    let item = |token: u64, job: &str| queue::Reschedule {
        id: id.clone(),
        token,
        delay_ms: 0,
        partial: None,
        latency_ms: 1,
        job: Some(job.to_string()),
    };
    let first = q
        .claim("w1", 1, 60_000)
        .await
        .expect("claim")
        .pop()
        .expect("a task");
    assert_eq!(first.job, None);
    // A lease that is not the current one attaches nothing.
    let r = q
        .reschedule_many(&[item(first.token + 7, "job-stale")])
        .await
        .expect("call");
    assert!(r[0].is_err(), "{r:?}");
    q.reschedule_many(&[item(first.token, "job-a")])
        .await
        .expect("call")[0]
        .as_ref()
        .expect("stored");
    let second = q
        .claim("w2", 1, 60_000)
        .await
        .expect("claim")
        .pop()
        .expect("again");
    assert_eq!(second.job.as_deref(), Some("job-a"));
    // The current lease cannot replace it either: one job per life of the task.
    q.reschedule_many(&[item(second.token, "job-b")])
        .await
        .expect("call")[0]
        .as_ref()
        .expect("rescheduled");
    let third = q
        .claim("w3", 1, 60_000)
        .await
        .expect("claim")
        .pop()
        .expect("again");
    assert_eq!(third.job.as_deref(), Some("job-a"));
    // A job reference longer than the bound is refused before anything is written.
    let long = "j".repeat(queue::MAX_JOB_BYTES + 1);
    assert!(q
        .reschedule_many(&[item(third.token, &long)])
        .await
        .is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_headers_go_with_the_submit_only() {
    // A listener that keeps each request's headers: the submit answers a job to follow here.
    let seen = Arc::new(std::sync::Mutex::new(Vec::<(String, HeaderMap)>::new()));
    let kept = seen.clone();
    let app = Router::new().route(
        "/{*path}",
        any(move |uri: axum::http::Uri, headers: HeaderMap| {
            let kept = kept.clone();
            async move {
                kept.lock().unwrap().push((uri.path().to_string(), headers));
                Json(serde_json::json!({"id": "j1", "status": "succeeded", "output": 1}))
            }
        }),
    );
    let base = serve_upstream(app).await;
    let args = UpstreamArgs {
        headers: vec!["X-Every-Call: 1".into()],
        job: JobArgs {
            submit_url: Some(format!("{base}/v1/jobs")),
            submit_headers: vec!["Cancel-After: 5m".into(), "Prefer: wait=1".into()],
            poll_url: Some(format!("{base}/v1/jobs/{{job}}")),
            ..UpstreamArgs::default().job
        },
        ..UpstreamArgs::default()
    };
    let up = worker::Upstream::new(&args).expect("valid settings");
    let worker::Answer::Submitted { job, .. } = up.submit("q", None, "k").await.expect("submit")
    else {
        panic!("a job")
    };
    up.poll_job(&job).await.expect("poll");
    let seen = seen.lock().unwrap();
    let [(submit_path, submit), (poll_path, poll)] = &seen[..] else {
        panic!("two calls: {seen:?}")
    };
    assert_eq!(
        (submit_path.as_str(), poll_path.as_str()),
        ("/v1/jobs", "/v1/jobs/j1")
    );
    assert_eq!(submit["cancel-after"], "5m");
    assert_eq!(submit["prefer"], "wait=1");
    assert_eq!(submit["x-every-call"], "1");
    assert_eq!(poll["x-every-call"], "1");
    assert!(
        poll.get("cancel-after").is_none() && poll.get("prefer").is_none(),
        "submit-only headers on a poll: {poll:?}"
    );
    // A malformed line stops the start naming the setting, never quoting the line.
    let bad = UpstreamArgs {
        job: JobArgs {
            submit_headers: vec!["s3cret-without-a-colon".into()],
            ..args.job.clone()
        },
        ..UpstreamArgs::default()
    };
    let e = worker::Upstream::new(&bad)
        .expect_err("refused")
        .to_string();
    assert!(
        e.contains("REPOLL_UPSTREAM_SUBMIT_HEADERS") && !e.contains("s3cret"),
        "{e}"
    );
}
