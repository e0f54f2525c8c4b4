//! HTTP handlers: decode the request, ask [`SimState`] for a plan, carry it out.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::fault_answer::fault_response;
use crate::limits::{MAX_DEEP, MAX_KEY_BYTES, MAX_PAD_BYTES};
use crate::overrides::Overrides;
use crate::state::{CallbackPlan, Plan, SimState};

type Shared = State<Arc<SimState>>;

fn bad_request(msg: &str) -> Response {
    (StatusCode::BAD_REQUEST, Json(json!({"error": msg}))).into_response()
}

/// `GET /api/query?q=<key>`. A key longer than [`MAX_KEY_BYTES`] or with an override out of
/// range is answered 400 with the reason, and nothing is remembered for it.
pub async fn query(
    State(sim): Shared,
    headers: axum::http::HeaderMap,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    let Some(key) = params.get("q").filter(|k| !k.is_empty()) else {
        return bad_request("missing query parameter q");
    };
    if key.len() > MAX_KEY_BYTES {
        return bad_request(&format!(
            "q: {} bytes is out of range 1..={MAX_KEY_BYTES}",
            key.len()
        ));
    }
    let o = match Overrides::parse(key, &params) {
        Ok(o) => o,
        Err(e) => return bad_request(&e.to_string()),
    };
    let traceparent = headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let plan = sim.plan_traced(key, &o, traceparent);
    if let (Plan::Answer(_), Some(url)) = (&plan, params.get("callback").filter(|u| !u.is_empty()))
    {
        if let Some(cb) = sim.plan_callback(key, &o, url) {
            tokio::spawn(send_callback(sim.clone(), key.to_string(), cb));
        }
    }
    let latency = sim.latency(&o);
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    match plan {
        Plan::Answer(body) => {
            let pad = o.pad_for(body["status"].as_str().unwrap_or_default());
            if pad > 0 || o.deep > 0 {
                shaped(&body, pad, o.deep)
            } else {
                Json(body).into_response()
            }
        }
        Plan::Fault {
            fault,
            retry_after_s,
        } => fault_response(fault, retry_after_s, sim.args.hang_ms).await,
    }
}

/// The filler of `pad=`: made once, then every padded answer sends a slice of it as it is.
static FILLER: LazyLock<Box<[u8]>> = LazyLock::new(|| vec![b'x'; MAX_PAD_BYTES].into_boxed_slice());

/// The brackets of `deep=`, made once like the filler.
static OPEN: LazyLock<Box<[u8]>> = LazyLock::new(|| vec![b'['; MAX_DEEP].into_boxed_slice());
static CLOSE: LazyLock<Box<[u8]>> = LazyLock::new(|| vec![b']'; MAX_DEEP].into_boxed_slice());

/// `answer` with `pad` filler bytes (at most [`MAX_PAD_BYTES`]) and `deep` levels of nested
/// arrays (at most [`MAX_DEEP`]). The filler is appended to the message of a failed answer, or
/// is the string `"pad"` of its data otherwise; the arrays are the member `"deep"` next to it.
/// The body is sent in pieces, the large ones borrowed from [`FILLER`], [`OPEN`] and
/// [`CLOSE`], so however many such answers are in flight, they are in memory once.
fn shaped(answer: &serde_json::Value, pad: usize, deep: usize) -> Response {
    let status = &answer["status"];
    let head = if status == "failed" {
        // The message as a JSON string without its closing quote; the filler continues it.
        let message = serde_json::to_string(&answer["error"]).unwrap_or_else(|_| "\"".into());
        let open = message.strip_suffix('"').unwrap_or("\"");
        format!(r#"{{"status":"failed","error":{open}"#)
    } else {
        // The data is an object (`data_for`): the filler goes in as its last member.
        let data = serde_json::to_string(&answer["data"]).unwrap_or_else(|_| "{}".into());
        let open = data.strip_suffix('}').unwrap_or("{");
        let sep = if open.len() > 1 { "," } else { "" };
        format!(r#"{{"status":{status},"data":{open}{sep}"pad":""#)
    };
    // After the filler: the string's quote, then the data's object (or, failed, the answer's)
    // is still open.
    let close = if status == "failed" { "}" } else { "}}" };
    let filler: &'static [u8] = &FILLER[..pad.min(MAX_PAD_BYTES)];
    let deep = deep.min(MAX_DEEP);
    let mut chunks: Vec<Result<Bytes, std::io::Error>> = vec![
        Ok(Bytes::from(head)),
        Ok(Bytes::from_static(filler)),
        Ok(Bytes::from_static(b"\"")),
    ];
    if deep > 0 {
        chunks.push(Ok(Bytes::from_static(br#","deep":"#)));
        chunks.push(Ok(Bytes::from_static(&OPEN[..deep])));
        chunks.push(Ok(Bytes::from_static(&CLOSE[..deep])));
    }
    chunks.push(Ok(Bytes::from_static(close.as_bytes())));
    let mut r = Response::new(Body::from_stream(futures::stream::iter(chunks)));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// Posts the final answer to the callback URL when the key is done (one try, 5 s at most:
/// the poll is the safety net, as with a real upstream).
async fn send_callback(sim: Arc<SimState>, key: String, cb: CallbackPlan) {
    tokio::time::sleep(cb.after).await;
    match sim.client.post(&cb.url).json(&cb.body).send().await {
        Ok(r) => {
            tracing::debug!(%key, status = %r.status(), "callback sent");
            sim.callback_sent(&key);
        }
        Err(e) => tracing::debug!(%key, error = %e, "callback failed"),
    }
}

/// `GET /_sim/stats`.
pub async fn stats(State(sim): Shared) -> Response {
    Json(sim.stats()).into_response()
}

/// `GET /_sim/key?q=<key>`.
pub async fn key_detail(
    State(sim): Shared,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    let key = params.get("q").map(String::as_str).unwrap_or_default();
    Json(sim.key_detail(key)).into_response()
}

/// `POST /_sim/outage?ms=N`: every call answers 503 for the next N ms (0 ends it; at most an
/// hour). Answers the outage left, `{"outage_ms": N}`.
pub async fn outage(State(sim): Shared, Query(params): Query<HashMap<String, String>>) -> Response {
    let ms = match params.get("ms").map(|v| v.parse::<u64>()) {
        Some(Ok(ms)) if ms <= crate::state::MAX_OUTAGE_MS => ms,
        _ => {
            return bad_request(&format!(
                "ms: a number of milliseconds in 0..={} is required",
                crate::state::MAX_OUTAGE_MS
            ))
        }
    };
    sim.set_outage(ms);
    Json(json!({"outage_ms": sim.outage_left_ms()})).into_response()
}

/// `POST /_sim/reset`.
pub async fn reset(State(sim): Shared) -> StatusCode {
    sim.reset();
    StatusCode::NO_CONTENT
}
