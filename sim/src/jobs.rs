//! Job-shaped APIs: the caller submits once, gets a job, and follows the job until it ends —
//! the shape of most real asynchronous APIs (issue 41). Four of their forms, each on its own
//! paths, all backed by one book of jobs:
//!
//! - **predictions** (Replicate's form): `POST /v1/predictions` with a JSON body answers `201
//!   {"id", "status": "starting", "urls": {"get", "cancel"}}`; `GET /v1/predictions/{id}`
//!   answers `{"id", "status": "processing" | "succeeded" | "failed" | "canceled", "output",
//!   "error", "urls"}`; `POST /v1/predictions/{id}/cancel` cancels it.
//! - **operations** (Azure's, RFC 9110's `202 Accepted`): `POST /v1/operations` answers `202`
//!   with an empty body, `Operation-Location: <url>` and `Retry-After: 1`; that URL answers
//!   `{"id", "status": "notStarted" | "running" | "succeeded" | "failed" | "canceled"}`, with
//!   `"resourceLocation"` once it succeeded, where `GET /v1/results/{id}` answers `{"result"}`.
//! - **long-running operations** (Google's): `POST /v1/models/sim:predictLongRunning` answers
//!   `{"name": "operations/{id}"}` (no `done` until it is done, as Google leaves it out); `GET
//!   /v1/operations/{id}` answers `{"name", "done": true, "response"}` (or `"error"`) at the end;
//!   `POST /v1/operations/{id}:cancel` cancels it.
//! - **transcripts** (AssemblyAI's): `POST /v2/transcript` answers `{"id", "status": "queued"}`;
//!   `GET /v2/transcript/{id}` answers `"processing"`, then `"completed"` with `"text"` (or
//!   `"error"` with the message).
//!
//! The operations and long-running forms also take their submits at the real APIs' paths
//! (Azure Document Intelligence's `…/documentModels/<model>:analyze`, Vertex AI's
//! `…/models/<model>:predictLongRunning`), so the recipes of docs/recipes.md run unchanged but
//! for the host.
//!
//! A job's **key** — what its data is made from and where its overrides are read
//! ([`crate::overrides`]) — is the string at `/input/q` of the submit body, else at `/q`,
//! else the body's JSON text. Each job moves towards done with its own polls (the simulator's
//! per-key state, under the job's id), so `/_sim/stats` shows one chain of polls per job.
//!
//! The fault knobs (rates and outage) apply to submits as to polls, rolled after the job is
//! made: an error answer to a submit that worked.
//!
//! **Idempotency**: a submit with an `Idempotency-Key` header seen before gets the job that key
//! made (the same answer, no new job), or `422` if its body differs (the key was reused for
//! another request), as Stripe-style APIs do. `GET /_sim/jobs` is the witness: jobs created,
//! submits, cancels, and each job's id, key and idempotency key.
//!
//! Bounded like the rest of the simulator: at most `--sim-max-keys` jobs are remembered (the
//! oldest forgotten first), a submit body is at most [`MAX_SUBMIT_BYTES`].

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::job_book::{key_of, Form, Job, Submitted, MAX_IDEMPOTENCY_KEY};
pub use crate::job_book::{JobLine, JobStats};
use crate::overrides::Overrides;
use crate::state::{Plan, SimState};

/// Largest submit body read, in bytes.
pub const MAX_SUBMIT_BYTES: usize = 64 * 1024;

type Shared = State<Arc<SimState>>;

fn problem(code: StatusCode, msg: &str) -> Response {
    (code, Json(json!({"error": msg}))).into_response()
}

/// Where this request reached the simulator: the URLs in its answers point back there (the
/// request's own `Host`, which a worker's origin guard then checks).
fn origin(headers: &HeaderMap) -> String {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| {
            h.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b':' | b'-' | b'[' | b']'))
        })
        .unwrap_or("127.0.0.1");
    format!("http://{host}")
}

/// A submit through `form`: the job made (or found by its idempotency key).
async fn submit(
    sim: &Arc<SimState>,
    form: Form,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Job, Response> {
    if body.len() > MAX_SUBMIT_BYTES {
        return Err(problem(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!("body: at most {MAX_SUBMIT_BYTES} bytes"),
        ));
    }
    if serde_json::from_slice::<Value>(&body).is_err() {
        return Err(problem(StatusCode::BAD_REQUEST, "body: not JSON"));
    }
    let idem = headers
        .get("idempotency-key")
        .map(|v| v.to_str().unwrap_or("\u{fffd}"))
        .unwrap_or("");
    if idem.len() > MAX_IDEMPOTENCY_KEY || idem.contains('\u{fffd}') {
        return Err(problem(
            StatusCode::BAD_REQUEST,
            &format!("Idempotency-Key: visible ASCII, at most {MAX_IDEMPOTENCY_KEY} bytes"),
        ));
    }
    let o = Overrides::parse(&key_of(&body), &HashMap::new())
        .map_err(|e| problem(StatusCode::BAD_REQUEST, &e.to_string()))?;
    let latency = sim.latency(&o);
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    let job = match sim.jobs.submit(form, body, idem, sim.args.max_keys) {
        Submitted::New(job) => {
            plan_webhook(sim, &job, headers);
            job
        }
        Submitted::Again(job) => job,
        Submitted::Conflict => {
            return Err(problem(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Idempotency-Key was used with another body",
            ))
        }
    };
    // The fault knobs apply to submits too, after the job is made: the caller sees an error
    // (or a hang, a reset) for a job that exists — what a re-sent submit must not pay twice.
    if let Some(Plan::Fault {
        fault,
        retry_after_s,
    }) = sim.submit_fault()
    {
        return Err(
            crate::fault_answer::fault_response(fault, retry_after_s, sim.args.hang_ms).await,
        );
    }
    Ok(job)
}

/// The new job's webhook, if its submit asked for one and it is done by time: its clock starts
/// now, and the webhook goes out when it is done ([`crate::webhooks`]).
fn plan_webhook(sim: &Arc<SimState>, job: &Job, headers: &HeaderMap) {
    let Ok(submit) = serde_json::from_slice::<Value>(&job.body) else {
        return;
    };
    let Ok(o) = Overrides::parse(&job.key, &HashMap::new()) else {
        return;
    };
    let items = o.items.unwrap_or(sim.args.items);
    let data = crate::state::data_for(&job.key, items, 1.0, o.payload.as_deref());
    let finished = prediction(&origin(headers), job, "succeeded", &data, &Value::Null);
    let Some(delivery) = crate::webhooks::plan(job, &submit, &finished) else {
        return;
    };
    let Some(after) = sim.start_clock(&job.id, &o) else {
        return;
    };
    tokio::spawn(crate::webhooks::send(
        sim.clone(),
        job.id.clone(),
        after,
        delivery,
    ));
}

/// One poll of `id` through `form`: the simulator's plan for the job (its own state), as the
/// common answer `{status: processing | done | failed, data, error}`, or the response to send
/// instead (unknown job, a fault).
async fn poll(sim: &SimState, form: Form, id: &str) -> Result<(Job, Value), Response> {
    let Some(job) = sim.jobs.get(id).filter(|j| j.form == form) else {
        return Err(problem(StatusCode::NOT_FOUND, "no such job"));
    };
    if job.canceled {
        return Ok((job, json!({"status": "canceled", "data": null})));
    }
    let o = Overrides::parse(&job.key, &HashMap::new())
        .map_err(|e| problem(StatusCode::BAD_REQUEST, &e.to_string()))?;
    let plan = sim.plan(&job.id, &o);
    let latency = sim.latency(&o);
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    match plan {
        Plan::Answer(mut body) => {
            // The data is made from the job's key, not its id.
            if body.get("data").is_some() {
                let progress = if body["status"] == "done" { 1.0 } else { 0.5 };
                body["data"] = crate::state::data_for(
                    &job.key,
                    o.items.unwrap_or(sim.args.items),
                    progress,
                    o.payload.as_deref(),
                );
            }
            Ok((job, body))
        }
        Plan::Fault {
            fault,
            retry_after_s,
        } => Err(crate::fault_answer::fault_response(fault, retry_after_s, sim.args.hang_ms).await),
    }
}

fn status_word(common: &Value, words: [&'static str; 4]) -> &'static str {
    match common["status"].as_str() {
        Some("done") => words[1],
        Some("failed") => words[2],
        Some("canceled") => words[3],
        _ => words[0],
    }
}

// ---- predictions ----------------------------------------------------------------------------

fn prediction(origin: &str, job: &Job, status: &str, output: &Value, error: &Value) -> Value {
    let get = format!("{origin}/v1/predictions/{}", job.id);
    json!({
        "id": job.id,
        "status": status,
        "output": output,
        "error": error,
        "urls": {"get": get, "cancel": format!("{get}/cancel")},
    })
}

/// `POST /v1/predictions`.
pub async fn predictions_submit(State(sim): Shared, headers: HeaderMap, body: Bytes) -> Response {
    match submit(&sim, Form::Prediction, &headers, body).await {
        Ok(job) => {
            let body = prediction(
                &origin(&headers),
                &job,
                "starting",
                &Value::Null,
                &Value::Null,
            );
            (StatusCode::CREATED, Json(body)).into_response()
        }
        Err(r) => r,
    }
}

/// `GET /v1/predictions/{id}`.
pub async fn predictions_get(
    State(sim): Shared,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    match poll(&sim, Form::Prediction, &id).await {
        Ok((job, common)) => {
            let status = status_word(&common, ["processing", "succeeded", "failed", "canceled"]);
            Json(prediction(
                &origin(&headers),
                &job,
                status,
                &common["data"],
                &common["error"],
            ))
            .into_response()
        }
        Err(r) => r,
    }
}

/// `POST /v1/predictions/{id}/cancel`.
pub async fn predictions_cancel(
    State(sim): Shared,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    match sim.jobs.cancel(&id).filter(|j| j.form == Form::Prediction) {
        Some(job) => Json(prediction(
            &origin(&headers),
            &job,
            "canceled",
            &Value::Null,
            &Value::Null,
        ))
        .into_response(),
        None => problem(StatusCode::NOT_FOUND, "no such job"),
    }
}

// ---- operations (Azure) ---------------------------------------------------------------------

/// `POST /v1/operations`: 202, empty body, `Operation-Location`, `Retry-After: 1`.
pub async fn operations_submit(State(sim): Shared, headers: HeaderMap, body: Bytes) -> Response {
    match submit(&sim, Form::Operation, &headers, body).await {
        Ok(job) => {
            let location = format!("{}/v1/operations/{}", origin(&headers), job.id);
            let mut r = StatusCode::ACCEPTED.into_response();
            if let Ok(v) = HeaderValue::from_str(&location) {
                r.headers_mut().insert("operation-location", v);
            }
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            r
        }
        Err(r) => r,
    }
}

/// `GET /v1/operations/{id}`; also `POST /v1/operations/{id}:cancel` (Google's form, below)
/// arrives here as the id `{id}:cancel`.
pub async fn operations_get(
    State(sim): Shared,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    // Google's operations share the path: an id names its job either way.
    if sim
        .jobs
        .get(&id)
        .is_some_and(|j| j.form == Form::LongRunning)
    {
        return long_running_get(&sim, &id).await;
    }
    match poll(&sim, Form::Operation, &id).await {
        Ok((job, common)) => {
            let status = status_word(&common, ["running", "succeeded", "failed", "canceled"]);
            let mut body = json!({"id": job.id, "status": status});
            if status == "succeeded" {
                // Both places the Azure guidelines name: the result inline, and its own URL.
                body["result"] = common["data"].clone();
                body["resourceLocation"] =
                    json!(format!("{}/v1/results/{}", origin(&headers), job.id));
            }
            if status == "failed" {
                body["error"] = json!({"code": "Failed", "message": common["error"]});
            }
            Json(body).into_response()
        }
        Err(r) => r,
    }
}

/// `GET /v1/results/{id}`: a succeeded operation's result (404 before).
pub async fn results_get(State(sim): Shared, Path(id): Path<String>) -> Response {
    let Some(job) = sim
        .jobs
        .get(&id)
        .filter(|j| j.form == Form::Operation && !j.canceled)
    else {
        return problem(StatusCode::NOT_FOUND, "no such result");
    };
    let o = Overrides::parse(&job.key, &HashMap::new()).unwrap_or_default();
    let data = crate::state::data_for(
        &job.key,
        o.items.unwrap_or(sim.args.items),
        1.0,
        o.payload.as_deref(),
    );
    Json(json!({"result": data})).into_response()
}

// ---- long-running operations (Google) -------------------------------------------------------

/// `POST /v1/models/sim:predictLongRunning`.
pub async fn long_running_submit(State(sim): Shared, headers: HeaderMap, body: Bytes) -> Response {
    match submit(&sim, Form::LongRunning, &headers, body).await {
        Ok(job) => Json(json!({"name": format!("operations/{}", job.id)})).into_response(),
        Err(r) => r,
    }
}

async fn long_running_get(sim: &SimState, id: &str) -> Response {
    match poll(sim, Form::LongRunning, id).await {
        Ok((job, common)) => {
            let name = format!("operations/{}", job.id);
            match common["status"].as_str() {
                Some("done") => {
                    Json(json!({"name": name, "done": true, "response": common["data"]}))
                }
                Some("failed") => Json(json!({"name": name, "done": true,
                    "error": {"code": 13, "message": common["error"]}})),
                Some("canceled") => Json(json!({"name": name, "done": true,
                    "error": {"code": 1, "message": "CANCELLED"}})),
                // Google leaves `done` out until it is true.
                _ => Json(json!({"name": name, "metadata": {"progress": common["data"]}})),
            }
            .into_response()
        }
        Err(r) => r,
    }
}

/// `POST /v1/operations/{id}:cancel` (the path segment is `{id}:cancel`).
pub async fn operations_post(State(sim): Shared, Path(segment): Path<String>) -> Response {
    let Some(id) = segment.strip_suffix(":cancel") else {
        return problem(StatusCode::NOT_FOUND, "POST only to {id}:cancel");
    };
    match sim.jobs.cancel(id) {
        Some(_) => Json(json!({})).into_response(),
        None => problem(StatusCode::NOT_FOUND, "no such operation"),
    }
}

// ---- transcripts (AssemblyAI) ---------------------------------------------------------------

fn transcript(job: &Job, status: &str, text: &Value, error: &Value) -> Value {
    let mut body = json!({"id": job.id, "status": status, "text": text});
    if !error.is_null() {
        body["error"] = error.clone();
    }
    body
}

/// `POST /v2/transcript`: `{"id", "status": "queued"}`.
pub async fn transcripts_submit(State(sim): Shared, headers: HeaderMap, body: Bytes) -> Response {
    match submit(&sim, Form::Transcript, &headers, body).await {
        Ok(job) => Json(transcript(&job, "queued", &Value::Null, &Value::Null)).into_response(),
        Err(r) => r,
    }
}

/// `GET /v2/transcript/{id}`: `queued` / `processing` / `completed` / `error`.
pub async fn transcripts_get(State(sim): Shared, Path(id): Path<String>) -> Response {
    match poll(&sim, Form::Transcript, &id).await {
        Ok((job, common)) => {
            let status = status_word(&common, ["processing", "completed", "error", "error"]);
            Json(transcript(&job, status, &common["data"], &common["error"])).into_response()
        }
        Err(r) => r,
    }
}

/// `POST /_sim/jobs/{id}/webhook`: the job's webhook sent again, byte for byte and with its
/// first signature (a provider's retry, or a replay), answering the status it got.
pub async fn resend_webhook(State(sim): Shared, Path(id): Path<String>) -> Response {
    let Some(delivery) = sim.jobs.get(&id).and_then(|j| j.webhook) else {
        return problem(StatusCode::NOT_FOUND, "no webhook was sent for that job");
    };
    match crate::webhooks::deliver(&sim, &delivery).await {
        Some(status) => Json(json!({ "status": status })).into_response(),
        None => problem(StatusCode::BAD_GATEWAY, "the webhook's URL did not answer"),
    }
}

/// `GET /_sim/jobs`.
pub async fn stats(State(sim): Shared) -> Json<JobStats> {
    Json(sim.jobs.stats())
}
