//! The upstream's callbacks through the real router and accept loop, over HTTP, against a
//! private redis-server and the simulator: a final answer ends the task at once, as done or,
//! when the upstream gave up, as failed, with the same verdict and error a poll gives.

use crate::common;
use common::api::*;

use std::time::Duration;

use serde_json::{json, Value};

const SECRET: &str = "callback-secret-of-this-test-0123456789";

fn signer() -> worker::Callbacks {
    worker::Callbacks::new(&worker::CallbackArgs {
        base_url: None,
        secret: Some(worker::Secret::from(SECRET)),
    })
    .unwrap()
    .unwrap()
}

/// The view of `id` once it is final (a 60 s hang guard, not a timing).
async fn final_view(http: &reqwest::Client, base: &str, id: &str) -> Value {
    let end = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let v: Value = http
            .get(format!("{base}/api/v1/queries/{id}"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if v["status"] != "processing" {
            return v;
        }
        assert!(std::time::Instant::now() < end, "{id} not final: {v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A signed callback saying "failed" ends the task at once: the answer tells the upstream it
/// ended as failed, and the query reads failed with the upstream's message, the very error a
/// poll reading the same "failed" leaves (a second task, failed by the worker's poll, is the
/// yardstick). Before it, a "processing" callback is a 202 that changes nothing; after it,
/// the used token is a 404. The upstream takes an hour to finish, so only the callback can end
/// the first task within the test (the worker polls it meanwhile: the callback may find it
/// waiting or leased).
#[tokio::test]
async fn a_failed_callback_ends_the_query_as_failed_with_the_upstreams_message() {
    let env = Env::start(Opts {
        worker: true,
        api: crate::common::api_unlimited(),
        callbacks: Some(signer()),
        ..Default::default()
    })
    .await;
    let base = format!("http://{}", env.listen().await);
    let http = reqwest::Client::new();
    let submit = |query: &'static str| {
        let http = http.clone();
        let base = base.clone();
        async move {
            let r: Value = http
                .post(format!("{base}/api/v1/queries"))
                .json(&json!({ "query": query }))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            r["id"].as_str().unwrap().to_string()
        }
    };
    let by_poll = submit("cb-yardstick status=failed error=no_such_order").await;
    let id = submit("cb-failed ms=3600000").await;
    let created = env
        .queue
        .get(&id)
        .await
        .unwrap()
        .and_then(|d| d.task)
        .expect("a live task")
        .created_ms;
    let url = format!(
        "{base}/api/v1/callbacks/{}",
        signer().token(&id, created, 0)
    );
    let post = |body: Value| {
        let http = http.clone();
        let url = url.clone();
        async move {
            let r = http.post(&url).json(&body).send().await.unwrap();
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.unwrap())
        }
    };

    let (status, ack) = post(json!({"status": "processing", "data": {"progress": 0.5}})).await;
    assert_eq!(
        (status, &ack),
        (202, &json!({"completed": false, "outcome": null}))
    );
    let (status, ack) = post(json!({"status": "failed", "error": "no_such_order"})).await;
    assert_eq!(
        (status, &ack),
        (200, &json!({"completed": true, "outcome": "failed"})),
        "the upstream learns its answer ended the task as failed"
    );
    let v = final_view(&http, &base, &id).await;
    assert_eq!(v["status"], "failed", "{v}");
    let yardstick = final_view(&http, &base, &by_poll).await;
    assert_eq!(yardstick["status"], "failed", "{yardstick}");
    assert_eq!(
        v["error"], yardstick["error"],
        "the same verdict and error as a poll reading \"failed\""
    );
    assert!(
        v["error"].as_str().unwrap().contains("no_such_order"),
        "{v}"
    );
    // Used: refused, and the task stays as it ended.
    let (status, ack) = post(json!({"status": "done", "data": 1})).await;
    assert_eq!(status, 404, "{ack}");
    assert_eq!(final_view(&http, &base, &id).await["status"], "failed");
    env.stop().await;
}

/// A done callback still completes the task, and its answer says so (`outcome` done).
#[tokio::test]
async fn a_done_callback_completes_the_query_and_says_done() {
    let env = Env::start(Opts {
        api: crate::common::api_unlimited(),
        callbacks: Some(signer()),
        ..Default::default()
    })
    .await;
    let r = env.submit("cb-done").await;
    let id = r.json["id"].as_str().unwrap().to_string();
    let created = env
        .queue
        .get(&id)
        .await
        .unwrap()
        .unwrap()
        .task
        .unwrap()
        .created_ms;
    let base = format!("http://{}", env.listen().await);
    let url = format!(
        "{base}/api/v1/callbacks/{}",
        signer().token(&id, created, 0)
    );
    let r = reqwest::Client::new()
        .post(&url)
        .json(&json!({"status": "done", "data": {"n": 7}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let ack: Value = r.json().await.unwrap();
    assert_eq!(ack, json!({"completed": true, "outcome": "done"}));
    let v = final_view(&reqwest::Client::new(), &base, &id).await;
    assert_eq!(
        (v["status"].clone(), v["result"].clone()),
        (json!("done"), json!({"n": 7}))
    );
    env.stop().await;
}

/// A callback's final result over the upstream's `REPOLL_UPSTREAM_MAX_RESULT` is not stored:
/// the task ends failed as it would from a poll (the same stored error, the same public words),
/// and the ack says so.
#[tokio::test]
async fn a_callback_result_over_the_max_result_ends_the_query_failed_unstored() {
    let env = Env::start(Opts {
        api: crate::common::api_unlimited(),
        callbacks: Some(signer()),
        max_result_bytes: Some(100),
        ..Default::default()
    })
    .await;
    let r = env.submit("cb-too-large").await;
    let id = r.json["id"].as_str().unwrap().to_string();
    let created = env
        .queue
        .get(&id)
        .await
        .unwrap()
        .unwrap()
        .task
        .unwrap()
        .created_ms;
    let base = format!("http://{}", env.listen().await);
    let url = format!(
        "{base}/api/v1/callbacks/{}",
        signer().token(&id, created, 0)
    );
    let r = reqwest::Client::new()
        .post(&url)
        .json(&json!({"status": "done", "data": {"text": "x".repeat(300)}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let ack: Value = r.json().await.unwrap();
    assert_eq!(ack, json!({"completed": true, "outcome": "failed"}));
    let v = final_view(&reqwest::Client::new(), &base, &id).await;
    assert_eq!(v["status"], "failed", "{v}");
    assert!(v["result"].is_null(), "{v}");
    let stored = env.queue.get(&id).await.unwrap().unwrap().task.unwrap();
    let error = stored.last_error.unwrap_or_default();
    assert!(
        error.starts_with(model::failure::RESULT_TOO_LARGE),
        "{error}"
    );
    env.stop().await;
}

/// A body of `n` bytes of `byte`, streamed without a length (as `Transfer-Encoding: chunked`).
fn streamed(n: usize, byte: u8) -> axum::body::Body {
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> = (0..n)
        .step_by(16 * 1024)
        .map(|at| Ok(vec![byte; (n - at).min(16 * 1024)]))
        .collect();
    axum::body::Body::from_stream(futures::stream::iter(chunks))
}

/// The task id and callback URL path of a new query `q`.
async fn callback_path(env: &Env, q: &str) -> String {
    let r = env.submit(q).await;
    let id = r.json["id"].as_str().unwrap().to_string();
    let task = env.queue.get(&id).await.unwrap().unwrap().task.unwrap();
    format!(
        "/api/v1/callbacks/{}",
        signer().token(&id, task.created_ms, 0)
    )
}

/// A correctly signed callback is held to the upstream's answer limit
/// (`REPOLL_UPSTREAM_MAX_BODY`, 4 MiB), not to `REPOLL_BODY_LIMIT` (64 KiB here): 100 KB of
/// data ends the task done. And every 413 names the limit that fired — with a length given
/// or streamed without one, on the callback, on the query API and on a page.
#[tokio::test]
async fn a_callback_takes_the_upstreams_limit_and_every_413_names_its_own() {
    use axum::http::Request;
    let env = Env::start(Opts {
        api: crate::common::api_unlimited(),
        callbacks: Some(signer()),
        ..Default::default()
    })
    .await;
    let large = json!({"status": "done", "data": {"text": "d".repeat(100_000)}}).to_string();
    let path = callback_path(&env, "cb-100kb").await;
    let r = env
        .send(
            Request::post(&path)
                .header("content-type", "application/json")
                .body(large.into())
                .unwrap(),
        )
        .await;
    assert_eq!(
        (r.status, &r.json),
        (200, &json!({"completed": true, "outcome": "done"})),
        "{}",
        r.body
    );

    let upstream_limit = worker::UpstreamArgs::default().max_body_bytes;
    let path = callback_path(&env, "cb-too-big").await;
    let r = env
        .send(
            Request::post(&path)
                .body(streamed(upstream_limit + 1, b' '))
                .unwrap(),
        )
        .await;
    let named = |limit: usize, setting: &str| {
        format!("the request body is larger than {limit} bytes ({setting})")
    };
    assert_eq!(r.status, 413);
    assert_eq!(
        r.json["error"]["message"],
        named(upstream_limit, "REPOLL_UPSTREAM_MAX_BODY"),
        "a streamed callback over the upstream's limit"
    );

    let api = |body| {
        Request::post("/api/v1/queries")
            .header("content-type", "application/json")
            .body(body)
            .unwrap()
    };
    let own = named(server::api::BODY_LIMIT_BYTES, "the query API's own limit");
    let global = named(64 * 1024, "REPOLL_BODY_LIMIT");
    for (what, req, want) in [
        ("API, 8 KB streamed", api(streamed(8 * 1024, b' ')), &own),
        (
            "API, 8 KB with a length",
            api(vec![b' '; 8 * 1024].into()),
            &own,
        ),
        (
            "API, 100 KB with a length",
            api(vec![b' '; 100 * 1024].into()),
            &global,
        ),
    ] {
        let r = env.send(req).await;
        assert_eq!(
            (r.status, r.json["error"]["message"].as_str()),
            (413, Some(want.as_str())),
            "{what}: {}",
            r.body
        );
    }
    // The query form's server function reads its body: the global limit is the one there.
    let form = <app::pages::SubmitQuery as leptos::server_fn::ServerFn>::PATH;
    let page = Request::post(form)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(streamed(100 * 1024, b'a'))
        .unwrap();
    let r = env.send(page).await;
    assert_eq!(
        (r.status, r.json["error"]["message"].as_str()),
        (413, Some(global.as_str())),
        "the query form, streamed"
    );
    env.stop().await;
}
