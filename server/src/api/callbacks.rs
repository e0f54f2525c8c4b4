//! `POST /api/v1/callbacks/{token}`: an upstream that was handed a callback URL (its URL
//! template holds `{callback_url}`, see `worker::callback`) posts its answer here, and a final
//! one ends the task at once instead of at the next poll: "done" completes it with the data,
//! "failed" ends it dead with the upstream's message, the verdict a poll reading the same
//! answer gives (`worker::task`: reason `fatal`).
//!
//! Order of checks, so a stranger learns nothing and changes nothing: the token's signature
//! (HMAC, constant time) before the body is read; then the body through the upstream's own
//! pointers and size limit; then the queue, which ends only the live task of the token's
//! life before its expiry (Redis time). Every refusal of the token is the same 404. Polling
//! continues as the safety net, so an answer that is not final yet is accepted (202) and
//! stored nowhere: the next poll reads it.

use axum::{
    body::Body,
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Response},
    Json,
};
use serde::Serialize;
use worker::Answer;

use super::error::{ApiError, ErrorBody, ErrorCode};
use crate::state::WebState;

/// The answer to a callback.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CallbackAck {
    /// True when this callback ended the task (see `outcome`); false when the answer was not
    /// final (the task goes on polling).
    pub completed: bool,
    /// How the task ended: `done` (the data is its result) or `failed` (dead, the upstream's
    /// message its error); null when the answer was not final.
    #[schema(required = true)]
    pub outcome: Option<CallbackOutcome>,
}

/// How a callback ended its task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum CallbackOutcome {
    Done,
    Failed,
}

impl CallbackAck {
    fn ended(outcome: CallbackOutcome) -> Response {
        let ack = CallbackAck {
            completed: true,
            outcome: Some(outcome),
        };
        (StatusCode::OK, Json(ack)).into_response()
    }

    fn not_final() -> Response {
        let ack = CallbackAck {
            completed: false,
            outcome: None,
        };
        (StatusCode::ACCEPTED, Json(ack)).into_response()
    }
}

/// A callback with a valid token was read: an event of the request's server span (and a log
/// line), so a trace shows where the task's answer came in and what it did.
fn received(id: &str, outcome: &str) {
    tracing::info!(id, outcome, "callback received");
}

fn no_such_callback() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        ErrorCode::NotFound,
        "no such callback (unknown, used or expired)",
    )
}

/// The upstream's answer for one task, by its callback token.
#[utoipa::path(
    post,
    path = "/api/v1/callbacks/{token}",
    operation_id = "receiveCallback",
    summary = "The upstream's answer for one task (callbacks)",
    params(("token" = String, Path, description = "The token of the callback URL the upstream was given.")),
    request_body(content = serde_json::Value, description = "The upstream's answer, read with the same status / data pointers as a poll's."),
    responses(
        (status = 200, body = CallbackAck, description = "Final: the task ended (completed true), as done with the answer's data (outcome done) or, when the upstream said it failed, as failed with the upstream's message as its error (outcome failed)."),
        (status = 202, body = CallbackAck, description = "Not final (processing): nothing stored, polling goes on (completed false, outcome null)."),
        (status = 400, body = ErrorBody, description = "The body is not JSON (code malformed_json). Nothing changed."),
        (status = 404, body = ErrorBody, description = "Unknown, forged, used or expired token, a task of that life no longer live (ended, cancelled), or callbacks are off (code not_found). Nothing changed."),
        (status = 413, body = ErrorBody, description = "Body larger than the upstream's answer limit (code payload_too_large). Nothing changed."),
        (status = 422, body = ErrorBody, description = "The body has no status the upstream settings know (code invalid_body). Nothing changed."),
        (status = 503, body = ErrorBody, description = "The queue (Redis) is unavailable (code unavailable), with Retry-After; post again."),
    )
)]
pub async fn receive(
    State(state): State<WebState>,
    Path(token): Path<String>,
    body: Body,
) -> Result<Response, ApiError> {
    let Some(rx) = state.api.callbacks.as_ref() else {
        return Err(no_such_callback());
    };
    let Some(claim) = rx.callbacks.verify(&token) else {
        return Err(no_such_callback());
    };
    // A signed token of an upstream this process no longer has (a config change): refused
    // like any other.
    let Some(rx) = rx.upstreams.iter().find(|u| u.name == claim.upstream) else {
        return Err(no_such_callback());
    };
    let value = parse_json(&read_body(body, rx.max_body).await?)?;
    let Some((outcome, text)) = read_final(&rx.reader, rx.max_result, &value)? else {
        received(&claim.id, "processing");
        return Ok(CallbackAck::not_final());
    };
    let (id, created, expires) = (&claim.id, claim.created_ms, claim.expires_ms);
    let written = match outcome {
        CallbackOutcome::Done => {
            rx.queue
                .complete_by_callback(id, created, expires, &text)
                .await
        }
        CallbackOutcome::Failed => rx.queue.fail_by_callback(id, created, expires, &text).await,
    };
    let ended = written.map_err(|e| {
        tracing::warn!(error = %e, "a callback could not be written");
        ApiError::unavailable()
    })?;
    if !ended {
        received(id, "not live");
        return Err(no_such_callback());
    }
    received(
        id,
        if outcome == CallbackOutcome::Done {
            "done"
        } else {
            "failed"
        },
    );
    metrics::counter!(worker::telemetry::CALLBACKS).increment(1);
    Ok(CallbackAck::ended(outcome))
}

/// A callback's or webhook's body: at most `max_body` bytes (413).
pub(super) async fn read_body(body: Body, max_body: usize) -> Result<axum::body::Bytes, ApiError> {
    axum::body::to_bytes(body, max_body).await.map_err(|_| {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::PayloadTooLarge,
            super::error::too_large_message(max_body, "REPOLL_UPSTREAM_MAX_BODY"),
        )
    })
}

/// A callback's or webhook's body as JSON (400 when it is not).
pub(super) fn parse_json(bytes: &[u8]) -> Result<serde_json::Value, ApiError> {
    serde_json::from_slice(bytes).map_err(|_| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::MalformedJson,
            "the body is not JSON",
        )
    })
}

/// A final answer read through the upstream's pointers, as the task would store it: done
/// with its data as text, or failed with the upstream's message; None when it is not final;
/// 422 when the upstream's settings know no status in it.
pub(super) fn read_final(
    reader: &worker::upstream::AnswerReader,
    max_result: usize,
    value: &serde_json::Value,
) -> Result<Option<(CallbackOutcome, String)>, ApiError> {
    Ok(Some(match reader.read(value, None) {
        // Stored in the very forms a poll's answer is (model::failure), so the dashboard and
        // the public wording read the same whichever way the answer came: a final result over
        // the upstream's REPOLL_UPSTREAM_MAX_RESULT ends the task dead, unstored, as a poll's.
        Ok(Answer::Done { data }) => match data.to_string() {
            text if text.len() > max_result => (
                CallbackOutcome::Failed,
                model::failure::result_too_large(text.len(), max_result),
            ),
            text => (CallbackOutcome::Done, text),
        },
        // The upstream's data beside a failure is dropped, as a poll drops it: a dead task
        // keeps its last partial and the message.
        Ok(Answer::Failed { message, .. }) => (
            CallbackOutcome::Failed,
            model::failure::upstream_failed(&message),
        ),
        Ok(Answer::Processing { .. } | Answer::Submitted { .. }) => return Ok(None),
        Err(e) => {
            return Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                ErrorCode::InvalidBody,
                e.to_string(),
            ))
        }
    }))
}
