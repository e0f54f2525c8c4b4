//! A job API behind the real binaries: `repoll serve --sim` (two worker slots) and a separate
//! `repoll worker` process in front of the simulator's predictions, asked over the public API.
//! One job per query across both processes, every answer final, and a start that cannot work
//! (both a URL and a submit URL) refused with the reason.

use crate::common;
use common::process::*;

use std::process::Stdio;
use std::time::Duration;

use testkit::http::BlockingHttp;
use testkit::{free_port, ChildGuard};

/// The job API settings of the simulator's predictions on `sim_port`.
fn predictions(cmd: &mut std::process::Command, sim_port: u16) {
    cmd.env(
        "REPOLL_UPSTREAM_SUBMIT_URL",
        format!("http://127.0.0.1:{sim_port}/v1/predictions"),
    )
    .env(
        "REPOLL_UPSTREAM_SUBMIT_BODY",
        r#"{"input": {"q": "{key}"}}"#,
    )
    .env("REPOLL_UPSTREAM_POLL_URL", "body:/urls/get")
    .env("REPOLL_UPSTREAM_DATA_POINTER", "/output")
    .env("REPOLL_UPSTREAM_IDEMPOTENCY_HEADER", "Idempotency-Key")
    .env("REPOLL_POLL_INTERVAL_MS", "50")
    .env_remove("REPOLL_UPSTREAM_URL");
}

#[test]
fn a_job_api_behind_serve_and_a_worker_process_makes_one_job_per_query() {
    let (web_port, redis_port, sim_port) = (free_port(), free_port(), free_port());
    let _redis = spawn_redis(redis_port, &[]);
    let url = format!("redis://127.0.0.1:{redis_port}");
    let mut children = Reaped::default();
    let mut serve = serve_command(&url, web_port);
    serve
        .env("REPOLL_SIM", "true")
        .env("REPOLL_SIM_ADDR", format!("127.0.0.1:{sim_port}"))
        .env("REPOLL_SIM_POLLS", "2")
        .env("REPOLL_WORKERS", "2")
        .env("REPOLL_FIRST_ANSWER_MS", "0")
        .env("REPOLL_RATE_PER_MIN", "0");
    predictions(&mut serve, sim_port);
    children.serve(serve, web_port);
    let mut worker = repoll();
    worker
        .arg("worker")
        .env("REDIS_URL", &url)
        .env("RUST_LOG", "warn")
        .env_remove("REPOLL_CONFIG")
        .env_remove("REPOLL_QUEUE");
    predictions(&mut worker, sim_port);
    children
        .0
        .push(ChildGuard::spawn(worker).expect("spawn repoll worker"));

    let http = BlockingHttp::local(web_port);
    let ask = |q: &str| {
        let a = http.send(
            http.client
                .post(http.url("/api/v1/queries"))
                .header("content-type", "application/json")
                .body(serde_json::json!({ "query": q }).to_string()),
        );
        assert!(a.status == 200 || a.status == 202, "{a:?}");
        id_in(&a)
    };
    let queries: Vec<String> = (0..30).map(|i| format!("process job {i}")).collect();
    let ids: Vec<String> = queries.iter().map(|q| ask(q)).collect();
    // Everyone asks again while the jobs run: each joins its query's task.
    let again: Vec<String> = queries.iter().map(|q| ask(q)).collect();
    assert_eq!(ids, again, "a second ask joins the first's task");
    for (q, id) in queries.iter().zip(&ids) {
        let done = http.wait_done(id, Duration::from_secs(60)).to_string();
        assert!(done.contains(q.as_str()), "{q}: {done}");
    }
    let jobs: serde_json::Value =
        reqwest::blocking::get(format!("http://127.0.0.1:{sim_port}/_sim/jobs"))
            .expect("sim jobs")
            .json()
            .expect("json");
    assert_eq!(jobs["created"], 30, "one job per query: {jobs}");
    // The calls were counted by kind: submits and polls on the serve's own /metrics.
    let metrics = http_get(web_port, "/metrics").expect("metrics").body;
    assert!(
        metrics.contains(
            r#"repoll_upstream_calls_total{call="submit",outcome="ok",upstream="default"}"#
        ),
        "{metrics}"
    );
}

#[test]
fn a_url_and_a_submit_url_together_stop_the_start_naming_both() {
    let mut cmd = repoll();
    cmd.arg("worker")
        .env("REDIS_URL", "redis://127.0.0.1:1")
        .env("REPOLL_UPSTREAM_URL", "http://127.0.0.1:9/api?q={key}")
        .env("REPOLL_UPSTREAM_SUBMIT_URL", "http://127.0.0.1:9/v1/jobs")
        .env("REPOLL_UPSTREAM_POLL_URL", "body:/urls/get")
        .env_remove("REPOLL_CONFIG")
        .stdout(Stdio::null());
    let out = cmd.output().expect("run repoll worker");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("REPOLL_UPSTREAM_URL") && stderr.contains("REPOLL_UPSTREAM_SUBMIT_URL"),
        "{stderr}"
    );
}

#[test]
fn an_input_in_another_key_order_joins_its_task_and_goes_whole_into_the_submit() {
    let (web_port, redis_port, sim_port) = (free_port(), free_port(), free_port());
    let _redis = spawn_redis(redis_port, &[]);
    let mut children = Reaped::default();
    let mut serve = serve_command(&format!("redis://127.0.0.1:{redis_port}"), web_port);
    serve
        .env("REPOLL_SIM", "true")
        .env("REPOLL_SIM_ADDR", format!("127.0.0.1:{sim_port}"))
        .env("REPOLL_SIM_POLLS", "2")
        .env("REPOLL_WORKERS", "1")
        .env("REPOLL_FIRST_ANSWER_MS", "0")
        .env("REPOLL_RATE_PER_MIN", "0");
    predictions(&mut serve, sim_port);
    // The whole input object where the body says "{input}" (the simulator reads /input/q).
    serve.env("REPOLL_UPSTREAM_SUBMIT_BODY", r#"{"input": "{input}"}"#);
    children.serve(serve, web_port);
    let http = BlockingHttp::local(web_port);
    let post = |body: &str| {
        http.send(
            http.client
                .post(http.url("/api/v1/queries"))
                .header("content-type", "application/json")
                .body(body.to_string()),
        )
    };
    let first =
        post(r#"{"input": {"q": "a red  fox", "steps": 30.0, "opts": {"b": 1, "a": [2]}}}"#);
    let again =
        post(r#"{"input": {"opts": {"a": [2], "b": 1e0}, "steps": 30, "q": "a red  fox"}}"#);
    assert!(first.status == 200 || first.status == 202, "{first:?}");
    let id = id_in(&first);
    assert_eq!(
        id,
        id_in(&again),
        "another key order and number spelling join"
    );
    let done = http.wait_done(&id, Duration::from_secs(60));
    // The canonical text is the query; inner whitespace is the caller's data, kept.
    assert_eq!(
        done["query"],
        r#"{"opts":{"a":[2],"b":1},"q":"a red  fox","steps":30}"#
    );
    let jobs: serde_json::Value =
        reqwest::blocking::get(format!("http://127.0.0.1:{sim_port}/_sim/jobs"))
            .expect("sim jobs")
            .json()
            .expect("json");
    assert_eq!(jobs["created"], 1, "one job: {jobs}");
    assert_eq!(
        jobs["jobs"][0]["key"], "a red  fox",
        "the object went in whole: {jobs}"
    );
    // Bounds and shape: 422 naming what is wrong; nothing made.
    let deep = (0..9).fold("1".to_string(), |v, _| format!(r#"{{"k": {v}}}"#));
    for (body, code, says) in [
        (
            format!(r#"{{"input": {deep}}}"#),
            "invalid_query",
            "levels deep",
        ),
        (
            r#"{"input": [1, 2]}"#.to_string(),
            "invalid_query",
            "object",
        ),
        (
            r#"{"query": "x", "input": {"q": "x"}}"#.to_string(),
            "invalid_body",
            "one of the two",
        ),
        (
            r#"{"priority": "background"}"#.to_string(),
            "invalid_body",
            "one of the two",
        ),
    ] {
        let a = post(&body);
        assert_eq!(a.status, 422, "{body}: {a:?}");
        assert!(
            a.body.contains(code) && a.body.contains(says),
            "{body}: {a:?}"
        );
    }
    let jobs: serde_json::Value =
        reqwest::blocking::get(format!("http://127.0.0.1:{sim_port}/_sim/jobs"))
            .expect("sim jobs")
            .json()
            .expect("json");
    assert_eq!(jobs["created"], 1, "{jobs}");
}
