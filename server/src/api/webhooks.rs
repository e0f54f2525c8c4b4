//! `POST /api/v1/webhooks/{upstream}`: a job API provider's webhook about one of its jobs
//! (Replicate's, AssemblyAI's, any Standard Webhooks sender's), at one fixed URL per upstream
//! — the URL a provider's dashboard is given, where the per-task callback URL
//! (`callbacks.rs`) cannot be.
//!
//! Order of checks, so a stranger changes nothing and an authentic sender is never told to
//! stop (a 410 would disable the endpoint at some senders, and senders retry any non-2xx for
//! days): the upstream must take webhooks (404); the body is read within the upstream's answer
//! limit (413); its proof — a Standard Webhooks signature or the header secret — before
//! anything is parsed (401, `forged`); a signed timestamp within five minutes of Redis time
//! (401, `stale`); then the body (400, or 422 without a job at the webhook job pointer). The
//! job index finds the task; the queue applies the webhook only to the live life that still
//! holds that job, once per webhook id. An authentic webhook that changes nothing (an unknown
//! job, a replay, an ended task, a refreshed task's old job) is answered 200 and counted.

use axum::{
    body::Body,
    extract::{Path, State},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    Json,
};
use serde::Serialize;
use worker::{WebhookMode, Webhooks};

use super::callbacks::{parse_json, read_body, read_final, CallbackOutcome};
use super::error::{ApiError, ErrorBody, ErrorCode};
use super::state::WebhookUpstream;
use crate::state::WebState;

/// The answer to an authentic webhook.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct WebhookAck {
    /// True when the webhook changed its task (ended it, or made its next poll due now).
    pub applied: bool,
    /// What it did: `done`, `failed` (the task ended so), `looked` (its next poll is due now),
    /// `not_final` (a result that is not final yet: polls go on), `unknown_job` (no task holds
    /// the job), `other_job` (the task holds a newer job), `not_live` (the task has ended),
    /// `replay` (this webhook id was applied before).
    pub outcome: &'static str,
}

fn ack(status: StatusCode, applied: bool, outcome: &'static str) -> Response {
    (status, Json(WebhookAck { applied, outcome })).into_response()
}

fn unauthorized(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, ErrorCode::Unauthorized, message)
}

/// Counts one webhook by what came of it.
fn count(up: &WebhookUpstream, outcome: &'static str) {
    metrics::counter!(worker::telemetry::WEBHOOKS, "upstream" => up.name.clone(), "outcome" => outcome)
        .increment(1);
}

/// A provider's webhook about one of its jobs.
#[utoipa::path(
    post,
    path = "/api/v1/webhooks/{upstream}",
    operation_id = "receiveWebhook",
    summary = "A job API provider's webhook (Standard Webhooks or a header secret)",
    params(("upstream" = String, Path, description = "The upstream's name (`default` for the top-level upstream)."),
        ("webhook-id" = Option<String>, Header, description = "Standard Webhooks: the message id (a replay of one applied before changes nothing)."),
        ("webhook-timestamp" = Option<i64>, Header, description = "Standard Webhooks: seconds since the epoch, within 5 minutes of now."),
        ("webhook-signature" = Option<String>, Header, description = "Standard Webhooks: space-separated `v1,<base64>` signatures of `id.timestamp.body`.")),
    request_body(content = serde_json::Value, description = "The provider's job, as a poll of it reads (mode `result`), or any body naming the job (mode `notify`)."),
    responses(
        (status = 200, body = WebhookAck, description = "Authentic: applied (done, failed, looked) or nothing to change (unknown_job, other_job, not_live, replay)."),
        (status = 202, body = WebhookAck, description = "Authentic, a result that is not final: nothing changed, polls go on (not_final)."),
        (status = 400, body = ErrorBody, description = "The body is not JSON (code malformed_json). Nothing changed."),
        (status = 401, body = ErrorBody, description = "No valid signature or header secret, or a timestamp more than 5 minutes from now (code unauthorized). Nothing changed."),
        (status = 404, body = ErrorBody, description = "No upstream of that name takes webhooks (code not_found)."),
        (status = 413, body = ErrorBody, description = "Body larger than the upstream's answer limit (code payload_too_large). Nothing changed."),
        (status = 422, body = ErrorBody, description = "No job at the webhook job pointer, or (mode result) no status the upstream settings know (code invalid_body). Nothing changed."),
        (status = 503, body = ErrorBody, description = "The queue (Redis) is unavailable (code unavailable), with Retry-After; send again."),
    )
)]
pub async fn receive(
    State(state): State<WebState>,
    Path(upstream): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let Some(up) = state.api.webhooks.iter().find(|u| u.name == upstream) else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            ErrorCode::NotFound,
            "no upstream of that name takes webhooks",
        ));
    };
    let bytes = read_body(body, up.max_body).await?;
    let delivery = up.webhooks.verify(&headers, &bytes).map_err(|r| {
        count(up, r.label());
        unauthorized(r.to_string())
    })?;
    if delivery.timestamp_ms.is_some() {
        let now = up
            .queue
            .now_ms()
            .await
            .map_err(|_| ApiError::unavailable())?;
        if !Webhooks::fresh(&delivery, now) {
            count(up, "stale");
            return Err(unauthorized(
                "webhook-timestamp is more than 5 minutes from now",
            ));
        }
    }
    let value = parse_json(&bytes)?;
    let Some(job) = up.webhooks.job_of(&value) else {
        count(up, "malformed");
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            ErrorCode::InvalidBody,
            "the body names no job at the webhook job pointer (REPOLL_UPSTREAM_WEBHOOK_JOB_POINTER)",
        ));
    };
    let read = match up.webhooks.mode {
        WebhookMode::Notify => None,
        WebhookMode::Result => match read_final(&up.reader, up.max_result, &value)? {
            Some(read) => Some(read),
            None => {
                count(up, "not_final");
                return Ok(ack(StatusCode::ACCEPTED, false, "not_final"));
            }
        },
    };
    let (effect, done_as) = match &read {
        None => (queue::CallbackEffect::Look, "looked"),
        Some((CallbackOutcome::Done, text)) => (queue::CallbackEffect::Done(text), "done"),
        Some((CallbackOutcome::Failed, text)) => (queue::CallbackEffect::Failed(text), "failed"),
    };
    let unavailable = |e: queue::QueueError| {
        tracing::warn!(error = %e, "a webhook could not be applied");
        ApiError::unavailable()
    };
    let Some((id, created)) = up.queue.find_job(&job).await.map_err(unavailable)? else {
        count(up, "unknown_job");
        return Ok(ack(StatusCode::OK, false, "unknown_job"));
    };
    let webhook_id = delivery.id.as_deref().unwrap_or("");
    let memory = worker::WEBHOOK_REPLAY_MEMORY_MS;
    let applied = up
        .queue
        .apply_webhook(&id, created, &job, webhook_id, memory, effect)
        .await
        .map_err(unavailable)?;
    let outcome = match applied {
        queue::WebhookApplied::Applied => done_as,
        queue::WebhookApplied::Gone => "not_live",
        queue::WebhookApplied::Replay => "replay",
        queue::WebhookApplied::OtherJob => "other_job",
    };
    // An event of the request's server span (and a log line): where the task's answer came.
    tracing::info!(%id, outcome, "webhook received");
    count(up, outcome);
    Ok(ack(
        StatusCode::OK,
        applied == queue::WebhookApplied::Applied,
        outcome,
    ))
}
