//! `Prefer: wait=N` (RFC 7240, as Replicate's API takes it) on the submit and the read: the
//! answer comes when the query is final or when the wait runs out (the server's cap at most),
//! with `Preference-Applied: wait=N`; without the header, or with one that does not parse,
//! answers stay immediate and say nothing of a wait.

use crate::common;
use common::api::*;

use axum::{body::Body, http::Request};
use serde_json::json;
use server::api::ApiArgs;

fn submit_waiting(query: &str, prefer: &str) -> Request<Body> {
    Request::post("/api/v1/queries")
        .header("content-type", "application/json")
        .header("prefer", prefer)
        .body(Body::from(json!({ "query": query }).to_string()))
        .unwrap()
}

fn read_waiting(id: &str, prefer: &str) -> Request<Body> {
    Request::get(format!("/api/v1/queries/{id}"))
        .header("prefer", prefer)
        .body(Body::empty())
        .unwrap()
}

fn applied(r: &common::Reply) -> Option<&str> {
    r.headers
        .get("preference-applied")
        .and_then(|v| v.to_str().ok())
}

#[tokio::test]
async fn a_waiting_submit_answers_the_final_result_in_one_request() {
    let env = Env::start(Opts {
        worker: true,
        ..Opts::default()
    })
    .await;
    // Three polls at 100 ms before the simulator says done: longer than the first-answer wait.
    let r = env
        .send(submit_waiting(
            "waited for polls=3",
            "respond-async, wait=10",
        ))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json["status"], "done", "{}", r.body);
    assert_eq!(applied(&r), Some("wait=10"));
    // Reading it with a wait: final already, answered as it is, the wait said.
    let id = r.json["id"].as_str().unwrap().to_string();
    let r = env.send(read_waiting(&id, "wait=5")).await;
    assert_eq!((r.status, &r.json["status"]), (200, &json!("done")));
    assert_eq!(applied(&r), Some("wait=5"));
}

#[tokio::test]
async fn a_wait_that_runs_out_answers_the_state_then_capped_by_the_server() {
    // No worker: the task never ends, so every wait runs out.
    let env = Env::start(Opts {
        api: ApiArgs {
            rate_per_min: 0,
            max_wait_ms: 1_000,
            ..ApiArgs::default()
        },
        ..Opts::default()
    })
    .await;
    let r = env.submit("never polled").await;
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(applied(&r), None, "no Prefer, no wait said");
    let id = r.json["id"].as_str().unwrap().to_string();

    let r = env.send(read_waiting(&id, "wait=60")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json["status"], "processing");
    assert_eq!(applied(&r), Some("wait=1"), "capped at REPOLL_MAX_WAIT_MS");

    let r = env
        .send(submit_waiting("never polled either", "wait=60"))
        .await;
    assert_eq!((r.status, applied(&r)), (202, Some("wait=1")), "{}", r.body);

    // A preference that does not parse is ignored (RFC 7240): immediate, no wait said.
    for prefer in ["wait=soon", "wait", "wait=-1", "handling=lenient"] {
        let r = env.send(read_waiting(&id, prefer)).await;
        assert_eq!((r.status, applied(&r)), (200, None), "{prefer}: {}", r.body);
    }
}

#[tokio::test]
async fn waits_are_off_at_zero() {
    let env = Env::start(Opts {
        api: ApiArgs {
            rate_per_min: 0,
            max_wait_ms: 0,
            ..ApiArgs::default()
        },
        ..Opts::default()
    })
    .await;
    let r = env.send(submit_waiting("no waits here", "wait=10")).await;
    assert_eq!((r.status, applied(&r)), (202, None), "{}", r.body);
}
