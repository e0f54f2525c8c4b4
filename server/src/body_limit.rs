//! `REPOLL_BODY_LIMIT`: the largest request body, for every route but the ones that carry
//! their own (the callback receiver takes what the upstream's answers may weigh,
//! `REPOLL_UPSTREAM_MAX_BODY`, and checks it itself once the token is known to be good).
//!
//! Why not tower-http's `RequestBodyLimitLayer`: it runs for every route, so a correctly
//! signed 100 KB callback met the 64 KiB global limit before its own 4 MiB one; and a body
//! cut by it while streaming (chunked) reached the handler as an error the handler described
//! with its own limit ("larger than 4194304 bytes", false). Here every 413 names the limit
//! that fired and its setting.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::{
    body::Body,
    extract::{Request, State},
    http::{header, StatusCode},
    middleware::Next,
    response::{IntoResponse, Response},
};
use http_body_util::{BodyExt, LengthLimitError, Limited};

/// Routes whose handler applies a limit of its own, instead of this one.
fn own_limit(path: &str) -> bool {
    path.starts_with("/api/v1/callbacks/")
}

/// The middleware, with the limit in bytes as its state.
pub async fn limit(State(max): State<usize>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    if own_limit(path) {
        return next.run(req).await;
    }
    let api = path.starts_with("/api/");
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return too_large(max, "REPOLL_BODY_LIMIT", api);
    }
    // A body without a length (chunked) is cut where it passes the limit; the flag tells
    // this layer that its limit, not a handler's, is what fired.
    let fired = Arc::new(AtomicBool::new(false));
    let seen = fired.clone();
    let req = req.map(move |body| {
        Body::new(Limited::new(body, max).map_err(move |e| {
            if e.is::<LengthLimitError>() {
                seen.store(true, Ordering::Relaxed);
            }
            e
        }))
    });
    let res = next.run(req).await;
    if fired.load(Ordering::Relaxed) {
        return too_large(max, "REPOLL_BODY_LIMIT", api);
    }
    res
}

/// A 413 naming the `limit` in bytes and the `setting` that sets it: in the API's JSON shape
/// under `/api/` (`api`), else plain text.
fn too_large(limit: usize, setting: &str, api: bool) -> Response {
    let text = crate::api::too_large_message(limit, setting);
    if api {
        let body = crate::api::ErrorBody::new(crate::api::ErrorCode::PayloadTooLarge, text);
        return (
            StatusCode::PAYLOAD_TOO_LARGE,
            [(header::CONTENT_TYPE, "application/json")],
            body.to_json(),
        )
            .into_response();
    }
    (
        StatusCode::PAYLOAD_TOO_LARGE,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        text,
    )
        .into_response()
}
