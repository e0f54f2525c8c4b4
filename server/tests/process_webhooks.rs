//! A job API provider's webhooks, through the real binary: `repoll serve --sim` fronting the
//! simulator's predictions (Standard Webhooks signatures, the result in the body) and its
//! transcripts (a header secret, "look now"), with polls so far apart that only a webhook can
//! end a task within the test. Valid webhooks end or wake their task at once; forged, stale,
//! replayed and unknown ones change nothing.

use crate::common;
use common::process::*;

use std::time::Duration;

use serde_json::{json, Value};
use testkit::http::BlockingHttp;
use testkit::{free_port, RedisServer};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// `repoll serve --sim` with one worker slot, a job upstream set by `settings`, and polls an
/// hour apart (the first one too): only a webhook ends a task while a test waits.
fn serve_with(settings: &[(&str, String)]) -> (Reaped, RedisServer, u16, u16) {
    let (web_port, redis_port, sim_port) = (free_port(), free_port(), free_port());
    let redis = spawn_redis(redis_port, &[]);
    let mut serve = serve_command(&format!("redis://127.0.0.1:{redis_port}"), web_port);
    serve
        .env("REPOLL_SIM", "true")
        .env("REPOLL_SIM_ADDR", format!("127.0.0.1:{sim_port}"))
        .env("REPOLL_SIM_WEBHOOK_SECRET", SECRET)
        .env("REPOLL_WORKERS", "1")
        .env("REPOLL_FIRST_ANSWER_MS", "0")
        .env("REPOLL_RATE_PER_MIN", "0")
        .env("REPOLL_POLL_INTERVAL_MS", "3600000")
        .env("REPOLL_POLL_MAX_INTERVAL_MS", "3600000")
        .env("REPOLL_DEADLINE_MS", "86400000")
        .env_remove("REPOLL_UPSTREAM_URL");
    for (k, v) in settings {
        serve.env(
            k,
            v.replace("SIM", &sim_port.to_string())
                .replace("WEB", &web_port.to_string()),
        );
    }
    let mut children = Reaped::default();
    children.serve(serve, web_port);
    (children, redis, web_port, sim_port)
}

fn predictions() -> Vec<(&'static str, String)> {
    vec![
        ("REPOLL_UPSTREAM_SUBMIT_URL", "http://127.0.0.1:SIM/v1/predictions".into()),
        (
            "REPOLL_UPSTREAM_SUBMIT_BODY",
            r#"{"input": {"q": "{key}"}, "webhook": "http://127.0.0.1:WEB/api/v1/webhooks/default"}"#.into(),
        ),
        ("REPOLL_UPSTREAM_POLL_URL", "body:/urls/get".into()),
        ("REPOLL_UPSTREAM_DATA_POINTER", "/output".into()),
        ("REPOLL_UPSTREAM_PROCESSING", "starting,processing".into()),
        ("REPOLL_UPSTREAM_DONE", "succeeded".into()),
        ("REPOLL_UPSTREAM_WEBHOOK_SECRET", SECRET.into()),
    ]
}

fn ask(http: &BlockingHttp, q: &str) -> String {
    let a = http.send(
        http.client
            .post(http.url("/api/v1/queries"))
            .header("content-type", "application/json")
            .body(json!({ "query": q }).to_string()),
    );
    assert!(a.status == 200 || a.status == 202, "{a:?}");
    id_in(&a)
}

fn sim_get(sim_port: u16, path: &str) -> Value {
    reqwest::blocking::get(format!("http://127.0.0.1:{sim_port}{path}"))
        .and_then(|r| r.json())
        .expect("simulator answer")
}

/// The simulator's job for key `q`, once the worker has submitted it.
fn job_of(sim_port: u16, q: &str) -> String {
    for _ in 0..200 {
        let jobs = sim_get(sim_port, "/_sim/jobs");
        let found = jobs["jobs"].as_array().and_then(|js| {
            js.iter()
                .find(|j| j["key"] == q)
                .and_then(|j| j["id"].as_str().map(str::to_string))
        });
        if let Some(id) = found {
            return id;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("no job submitted for {q}");
}

/// Posts a webhook with the Standard Webhooks headers `id` / `ts` / `signature`.
fn post_webhook(web_port: u16, body: &str, id: &str, ts: i64, signature: &str) -> (u16, Value) {
    let r = reqwest::blocking::Client::new()
        .post(format!(
            "http://127.0.0.1:{web_port}/api/v1/webhooks/default"
        ))
        .header("content-type", "application/json")
        .header("webhook-id", id)
        .header("webhook-timestamp", ts.to_string())
        .header("webhook-signature", signature)
        .body(body.to_string())
        .send()
        .expect("webhook");
    let status = r.status().as_u16();
    (status, r.json().unwrap_or(Value::Null))
}

/// The value of `repoll_webhooks_total{upstream="default",outcome}` on the serve's `/metrics`
/// (0 when the series is absent), whatever the order of its labels.
fn webhooks_counted(web_port: u16, outcome: &str) -> u64 {
    let metrics = http_get(web_port, "/metrics").expect("metrics").body;
    let want = [
        format!("outcome=\"{outcome}\""),
        "upstream=\"default\"".to_string(),
    ];
    metrics
        .lines()
        .filter(|l| l.starts_with("repoll_webhooks_total{"))
        .filter(|l| want.iter().all(|w| l.contains(w.as_str())))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64
}

fn status_of(http: &BlockingHttp, id: &str) -> Value {
    let a = http.send(http.client.get(http.url(&format!("/api/v1/queries/{id}"))));
    serde_json::from_str::<Value>(&a.body).expect("query json")["status"].clone()
}

#[test]
fn a_signed_result_webhook_ends_its_task_before_any_poll() {
    let (_children, _redis, web_port, sim_port) = serve_with(&predictions());
    let http = BlockingHttp::local(web_port);
    // Done 300 ms after the submit, by time: the simulator's webhook says so then. The first
    // poll would be an hour later.
    let q = "webhook ends me ms=300";
    let id = ask(&http, q);
    let done = http.wait_done(&id, Duration::from_secs(30)).to_string();
    assert!(done.contains("webhook ends me"), "{done}");
    let job = job_of(sim_port, q);
    let key = sim_get(sim_port, &format!("/_sim/key?q={job}"));
    assert_eq!(key["calls"], 0, "ended by the webhook, not a poll: {key}");
    let jobs = sim_get(sim_port, "/_sim/jobs");
    assert_eq!(jobs["webhooks"], 1, "{jobs}");
    // The provider sends it again (a retry, or a replay): answered 2xx, nothing changes.
    let again: Value = reqwest::blocking::Client::new()
        .post(format!(
            "http://127.0.0.1:{sim_port}/_sim/jobs/{job}/webhook"
        ))
        .send()
        .and_then(|r| r.json())
        .expect("re-send");
    assert_eq!(again["status"], 200, "{again}");
    assert_eq!(webhooks_counted(web_port, "done"), 1);
    assert_eq!(webhooks_counted(web_port, "replay"), 1);
}

#[test]
fn forged_stale_and_unknown_webhooks_change_nothing() {
    let (_children, _redis, web_port, sim_port) = serve_with(&predictions());
    let http = BlockingHttp::local(web_port);
    // Done by polls (none for an hour): the task waits, and only our webhooks reach it.
    let q = "webhook target polls=2";
    let id = ask(&http, q);
    let job = job_of(sim_port, q);
    let job_url = format!("http://127.0.0.1:{sim_port}/v1/predictions/{job}");
    let body = json!({
        "id": job, "status": "succeeded", "output": {"answer": "from the webhook"},
        "urls": {"get": job_url},
    })
    .to_string();
    let sign = |id: &str, ts: i64, body: &str| {
        sim::webhooks::standard_signature(SECRET, id, ts, body.as_bytes())
    };
    // The job is indexed once the submit is stored: wait for the task to hold it.
    std::thread::sleep(Duration::from_millis(300));
    let now = now_s();
    let forged =
        sim::webhooks::standard_signature("whsec_c29tZW9uZSBlbHNl", "msg_1", now, body.as_bytes());
    let (status, _) = post_webhook(web_port, &body, "msg_1", now, &forged);
    assert_eq!(status, 401, "forged");
    let (status, _) = post_webhook(
        web_port,
        &body,
        "msg_2",
        now - 400,
        &sign("msg_2", now - 400, &body),
    );
    assert_eq!(status, 401, "stale");
    let (status, _) = post_webhook(
        web_port,
        &body,
        "msg_3",
        now + 400,
        &sign("msg_3", now + 400, &body),
    );
    assert_eq!(status, 401, "from the future");
    // Signed by the provider with a body changed on the way: forged too.
    let changed = body.replace("from the webhook", "from an attacker");
    let (status, _) = post_webhook(web_port, &changed, "msg_4", now, &sign("msg_4", now, &body));
    assert_eq!(status, 401, "changed body");
    let unknown = body.replace(&job, "jnosuchjob");
    let (status, ack) = post_webhook(
        web_port,
        &unknown,
        "msg_5",
        now,
        &sign("msg_5", now, &unknown),
    );
    assert_eq!(
        (status, ack["outcome"].as_str()),
        (200, Some("unknown_job")),
        "{ack}"
    );
    assert_eq!(status_of(&http, &id), "processing", "nothing changed");

    // The real one ends the task at once, with the webhook's output.
    let (status, ack) = post_webhook(web_port, &body, "msg_6", now, &sign("msg_6", now, &body));
    assert_eq!(
        (status, ack["outcome"].as_str()),
        (200, Some("done")),
        "{ack}"
    );
    let done = http.wait_done(&id, Duration::from_secs(10)).to_string();
    assert!(done.contains("from the webhook"), "{done}");
    // Replayed: 2xx (a sender would retry anything else for days), nothing changes.
    let (status, ack) = post_webhook(web_port, &body, "msg_6", now, &sign("msg_6", now, &body));
    assert_eq!(
        (status, ack["outcome"].as_str()),
        (200, Some("replay")),
        "{ack}"
    );
    for (outcome, n) in [("forged", 2), ("stale", 2), ("unknown_job", 1), ("done", 1)] {
        assert_eq!(webhooks_counted(web_port, outcome), n, "{outcome}");
    }
}

#[test]
fn a_look_now_webhook_with_a_header_secret_brings_the_next_poll_forward() {
    let settings = vec![
        ("REPOLL_UPSTREAM_SUBMIT_URL", "http://127.0.0.1:SIM/v2/transcript".into()),
        (
            "REPOLL_UPSTREAM_SUBMIT_BODY",
            r#"{"audio_url": "{key}", "webhook_url": "http://127.0.0.1:WEB/api/v1/webhooks/default", "webhook_auth_header_name": "X-Hook-Auth", "webhook_auth_header_value": "hook s3cret"}"#.into(),
        ),
        ("REPOLL_UPSTREAM_POLL_URL", "http://127.0.0.1:SIM/v2/transcript/{job}".into()),
        ("REPOLL_UPSTREAM_DATA_POINTER", "/text".into()),
        ("REPOLL_UPSTREAM_PROCESSING", "queued,processing".into()),
        ("REPOLL_UPSTREAM_DONE", "completed".into()),
        ("REPOLL_UPSTREAM_FAILED", "error".into()),
        ("REPOLL_UPSTREAM_WEBHOOK_SECRET", "hook s3cret".into()),
        ("REPOLL_UPSTREAM_WEBHOOK_HEADER", "X-Hook-Auth".into()),
        ("REPOLL_UPSTREAM_WEBHOOK_JOB_POINTER", "/transcript_id".into()),
        ("REPOLL_UPSTREAM_WEBHOOK_MODE", "notify".into()),
    ];
    let (_children, _redis, web_port, sim_port) = serve_with(&settings);
    let http = BlockingHttp::local(web_port);
    // A wrong header value is refused before anything is read.
    let r = reqwest::blocking::Client::new()
        .post(format!(
            "http://127.0.0.1:{web_port}/api/v1/webhooks/default"
        ))
        .header("x-hook-auth", "guess")
        .body(r#"{"transcript_id": "x", "status": "completed"}"#)
        .send()
        .expect("webhook");
    assert_eq!(r.status().as_u16(), 401);
    let q = "look now please ms=300";
    let id = ask(&http, q);
    // The webhook only says "completed": the worker polls at once, and the poll's answer is
    // the result.
    let done = http.wait_done(&id, Duration::from_secs(30)).to_string();
    assert!(done.contains("look now please"), "{done}");
    let job = job_of(sim_port, q);
    let key = sim_get(sim_port, &format!("/_sim/key?q={job}"));
    assert_eq!(
        key["calls"], 1,
        "one poll, brought forward by the webhook: {key}"
    );
    assert_eq!(webhooks_counted(web_port, "looked"), 1);
}
