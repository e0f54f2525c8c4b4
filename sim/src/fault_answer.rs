//! The HTTP answer of a [`Fault`]: what a request shows instead of its normal answer (the
//! repeating API's and the job APIs' alike).

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::faults::Fault;

/// The answer of `fault`: an error status, a broken body, a hang, a reset.
pub(crate) async fn fault_response(fault: Fault, retry_after_s: u64, hang_ms: u64) -> Response {
    let error = |code: StatusCode, msg: &str| (code, Json(json!({"error": msg}))).into_response();
    match fault {
        Fault::Internal => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "simulated internal error",
        ),
        Fault::Unavailable => error(StatusCode::SERVICE_UNAVAILABLE, "simulated outage"),
        Fault::RateLimited => {
            let mut r = error(StatusCode::TOO_MANY_REQUESTS, "simulated rate limit");
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(retry_after_s));
            r
        }
        Fault::Malformed => json_bytes(r#"{"status": "done", "data": {"items": [1, 2"#),
        Fault::WrongShape => json_bytes(r#"{"result": {"state": 42}, "items": "none"}"#),
        Fault::Panic => panic!("simulated panic (fail=panic)"),
        Fault::Hang => {
            tokio::time::sleep(Duration::from_millis(hang_ms)).await;
            error(StatusCode::GATEWAY_TIMEOUT, "simulated hang ended")
        }
        Fault::Reset => {
            // Headers and a few bytes go out, then the body fails: hyper aborts the connection,
            // which the client sees as a connection cut in the middle of the answer.
            let chunks: Vec<Result<Bytes, std::io::Error>> = vec![
                Ok(Bytes::from_static(b"{\"status\": \"proc")),
                Err(std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    "simulated connection reset",
                )),
            ];
            let mut r = Response::new(Body::from_stream(futures::stream::iter(chunks)));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            r
        }
    }
}

fn json_bytes(body: &'static str) -> Response {
    let mut r = Response::new(Body::from(body));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}
