//! The public JSON API (`/api/v1/...`) and the per-query live stream.
//!
//! - `queries`: submit a query, read its state.
//! - `events`: the per-query Server-Sent-Events stream.
//! - `rate`: the per-client rate limit of submits.
//! - `error`: the one error shape and the JSON extractor that uses it.
//! - `callbacks`: an upstream's answer posted to a task's callback URL.
//! - `openapi`: the OpenAPI document describing all of it.
//!
//! Every answer to a client mistake is a 4xx in the shape `{"error": {"code", "message"}}`.

mod callbacks;
mod error;
mod events;
mod openapi;
mod queries;
mod rate;

use std::time::Duration;

use axum::{
    extract::DefaultBodyLimit,
    routing::{any, get, post},
    Router,
};
use clap::Args;

pub use callbacks::{CallbackReceiver, CallbackUpstream};
pub use error::{ApiError, ApiJson, ErrorBody, ErrorCode};
pub use rate::Limiter;

use crate::web::WebState;

/// Largest request body of the API: a query is at most 512 characters, so a few KiB is ample,
/// and a larger body gets the API's JSON 413 (beyond the global limit it gets a plain 413).
pub const BODY_LIMIT_BYTES: usize = 4096;

/// Settings of the public API.
#[derive(Debug, Clone, Args)]
pub struct ApiArgs {
    /// How long a submit waits for the workers' first poll, so the first answer carries the
    /// upstream's partial data, in ms (0 = answer at once).
    #[arg(long, env = "REPOLL_FIRST_ANSWER_MS", default_value_t = 300)]
    pub first_answer_ms: u64,
    /// Submits (`POST /api/v1/queries`) allowed per client per minute (0 = no limit).
    #[arg(long, env = "REPOLL_RATE_PER_MIN", default_value_t = 60)]
    pub rate_per_min: u32,
    /// Submits a client may make at once before the per-minute rate applies.
    #[arg(long, env = "REPOLL_RATE_BURST", default_value_t = 20)]
    pub rate_burst: u32,
    /// Replaced by REPOLL_TRUST_FORWARDED (one setting for every per-client limit); still
    /// accepted, with a warning, and then means the same.
    #[arg(long, env = "REPOLL_TRUST_FORWARDED_FOR", hide = true)]
    pub trust_forwarded_for: bool,
    /// Interval of heartbeat comments on live streams, in ms.
    #[arg(long, env = "REPOLL_SSE_KEEPALIVE_MS", default_value_t = 15_000)]
    pub sse_keepalive_ms: u64,
    /// A request header that names the caller's tenant (e.g. `X-Api-Key-Id`, set by your API
    /// gateway): when set, a submit's tenant is that header's value (none when absent) and the
    /// body's `tenant` is ignored, so callers cannot pick another's share. Unset: the body's.
    #[arg(long, env = "REPOLL_TENANT_HEADER", value_parser = parse_header_name)]
    pub tenant_header: Option<axum::http::HeaderName>,
}

fn parse_header_name(s: &str) -> Result<axum::http::HeaderName, String> {
    axum::http::HeaderName::from_bytes(s.trim().as_bytes())
        .map_err(|_| format!("{s:?} is not an HTTP header name"))
}

impl Default for ApiArgs {
    /// The flags' defaults, without reading the environment (one source: the attributes).
    fn default() -> Self {
        worker::clap_defaults()
    }
}

/// State the API handlers need beyond [`WebState`]'s shared parts.
#[derive(Clone)]
pub struct ApiState {
    /// `None` when the rate limit is off.
    pub limiter: Option<Limiter>,
    pub keep_alive: Duration,
    /// `REPOLL_METRICS_TOKEN`: bearer token for `/metrics` from other hosts.
    pub metrics_token: Option<std::sync::Arc<str>>,
    /// `REPOLL_TRUST_FORWARDED` (the rule is `app::client`'s).
    pub trust_forwarded: bool,
    /// Callbacks from the upstream (`None`: off, every callback is a 404).
    pub callbacks: Option<CallbackReceiver>,
    /// `REPOLL_TENANT_HEADER`: the header that names a submit's tenant.
    pub tenant_header: Option<axum::http::HeaderName>,
}

impl Default for ApiState {
    fn default() -> Self {
        ApiState::new(&ApiArgs::default(), false)
    }
}

impl ApiState {
    /// `trust_forwarded`: the one trust setting (`REPOLL_TRUST_FORWARDED`, see `app::client`).
    pub fn new(args: &ApiArgs, trust_forwarded: bool) -> Self {
        ApiState {
            limiter: Limiter::new(args.rate_per_min, args.rate_burst, trust_forwarded),
            keep_alive: Duration::from_millis(args.sse_keepalive_ms.max(1)),
            metrics_token: None,
            trust_forwarded,
            callbacks: None,
            tenant_header: args.tenant_header.clone(),
        }
    }
}

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
