//! The public JSON API (`/api/v1/...`) and the per-query live stream.
//!
//! - `queries`: submit a query, read its state.
//! - `events`: the per-query Server-Sent-Events stream.
//! - `query_feed`: one shared read per change of a watched query, for all its streams.
//! - `rate`: the per-client rate limit of submits.
//! - `error`: the one error shape and the JSON extractor that uses it.
//! - `callbacks`: an upstream's answer posted to a task's callback URL.
//! - `webhooks`: a job API provider's signed webhooks, at one URL per upstream.
//! - `openapi`: the OpenAPI document describing all of it.
//! - `state`: the API's settings and state (below the handlers: `crate::state` holds it).
//!
//! Every answer to a client mistake is a 4xx in the shape `{"error": {"code", "message"}}`.

mod cache_status;
mod callbacks;
mod error;
mod events;
mod openapi;
mod queries;
pub mod query_feed;
mod rate;
pub mod state;
mod webhooks;

use axum::{
    extract::DefaultBodyLimit,
    routing::{any, get, post},
    Router,
};
pub use error::{too_large_message, ApiError, ApiJson, ErrorBody, ErrorCode, BODY_LIMIT_BYTES};
pub use queries::ANSWERS_METRIC;
pub use rate::Limiter;
pub use state::{wait_cap, ApiArgs, ApiState, CallbackReceiver, CallbackUpstream, WebhookUpstream};

use crate::state::WebState;

/// Routes of the public API.
pub fn router() -> Router<WebState> {
    Router::new()
        .route("/api/v1/queries", post(queries::submit))
        .route("/api/v1/queries/{id}", get(queries::get))
        .route("/api/v1/queries/{id}/events", get(events::events))
        .route("/api/v1/openapi.json", get(openapi::document))
        // Its own body limit (the upstream's answer limit), checked after the token.
        .route(
            "/api/v1/callbacks/{token}",
            post(callbacks::receive).layer(DefaultBodyLimit::disable()),
        )
        .route(
            "/api/v1/webhooks/{upstream}",
            post(webhooks::receive).layer(DefaultBodyLimit::disable()),
        )
        // Unknown API paths answer JSON, not the HTML 404 page.
        .route("/api/v1", any(not_found))
        .route("/api/v1/{*rest}", any(not_found))
        .layer(DefaultBodyLimit::max(BODY_LIMIT_BYTES))
}

async fn not_found() -> ApiError {
    ApiError::new(
        axum::http::StatusCode::NOT_FOUND,
        ErrorCode::NotFound,
        "no such API endpoint",
    )
}
