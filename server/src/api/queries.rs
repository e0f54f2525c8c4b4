//! `POST /api/v1/queries` and `GET /api/v1/queries/{id}`: thin HTTP wrappers around
//! `app::query_view::{submit, read}`, the same code the query page's server functions call.

use app::query_view::{QueryView, TaskId};
use axum::{
    extract::{Path, State},
    http::{header, HeaderMap, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    Json,
};
use serde::Deserialize;

use axum::{extract::FromRequestParts, http::request::Parts};

use super::error::{ApiError, ApiJson, ErrorBody};
use crate::state::WebState;

/// Body of `POST /api/v1/queries`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct SubmitBody {
    /// Unicode-normalised (NFC), trimmed and whitespace-collapsed; then 1 to 512 characters,
    /// without control characters (whitespace ones become spaces) or characters that show
    /// nothing (Unicode's default-ignorable and format characters: zero-width space, soft
    /// hyphen, BOM, tag characters, bidirectional controls, ...). Accepted where writing uses
    /// them: a zero-width joiner inside an emoji sequence or between letters of a joining or
    /// Indic script, a zero-width non-joiner between such letters, a variation selector after
    /// a character it selects a form of, tag letters inside a subdivision flag. The `pattern`
    /// (ECMA-262 with the `u` flag) refuses what is refused wherever it stands; where a joiner
    /// or selector stands is checked by the server (422 `invalid_query`, naming the code point).
    /// (`max_length` is `model::MAX_QUERY_CHARS`; an attribute takes no constant, the
    /// OpenAPI test compares.)
    #[schema(min_length = 1, max_length = 512)]
    pub query: String,
    /// `interactive` (default: a person is waiting) or `background`.
    #[serde(default)]
    pub priority: queue::Priority,
    /// The upstream API to ask (`default` when absent). A deployment with several upstreams
    /// names them in its config file; the same query for two upstreams is two tasks.
    #[serde(default)]
    pub upstream: Option<String>,
    /// Who asks (1 to 64 of letters, digits and `._:@-`; absent = no tenant): tenants share
    /// each upstream fairly and may each be capped. Ignored when the deployment names a
    /// tenant header (`REPOLL_TENANT_HEADER`): then that header says who asks.
    #[serde(default)]
    pub tenant: Option<String>,
}

/// 202 while processing (a task was created or joined), 200 once final (a fresh stored
/// result, or a task that finished within the first-answer budget). `Location` names the
/// query's resource either way.
#[utoipa::path(
    post,
    path = "/api/v1/queries",
    operation_id = "submitQuery",
    summary = "Submit a query (or join the identical one already running)",
    request_body = SubmitBody,
    responses(
        (status = 200, body = QueryView, description = "Final already: a fresh stored result (status done), or the task finished (or failed) within the first-answer budget."),
        (status = 202, body = QueryView, description = "Processing: a task was created or joined; partial data included when the upstream has some. Follow `Location` or the events stream.",
            headers(("Location" = String, description = "The query's resource, /api/v1/queries/{id}."))),
        (status = 400, body = ErrorBody, description = "Malformed JSON (code malformed_json)."),
        (status = 413, body = ErrorBody, description = "Body larger than 4 KiB (code payload_too_large)."),
        (status = 415, body = ErrorBody, description = "Content type is not application/json (code unsupported_media_type)."),
        (status = 422, body = ErrorBody, description = "The query breaks the input rules (code invalid_query), the body has no string `query` (code invalid_body), names an unknown upstream (code unknown_upstream, the message lists the known ones) or a malformed tenant (code invalid_tenant; also when the operator's tenant header appears more than once)."),
        (status = 429, body = ErrorBody, description = "Rate limit of this client reached (code rate_limited).",
            headers(("Retry-After" = u64, description = "Seconds to wait."))),
        (status = 503, body = ErrorBody, description = "The queue (Redis) is unavailable (code unavailable)."),
    )
)]
pub async fn submit(
    State(state): State<WebState>,
    headers: HeaderMap,
    _limit: RateLimited,
    ApiJson(body): ApiJson<SubmitBody>,
) -> Result<Response, ApiError> {
    let tenant = match &state.api.tenant_header {
        Some(name) => tenant_of(&headers, name)?,
        None => body.tenant.unwrap_or_default(),
    };
    let (view, created) = app::query_view::submit_with(
        &state.app,
        &body.query,
        body.priority,
        body.upstream.as_deref(),
        &tenant,
    )
    .await?;
    tracing::debug!(id = %view.id, created, status = view.status.as_str(), "api: query submitted");
    let status = if view.status.is_final() {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    let mut res = (status, Json(&view)).into_response();
    if let Ok(v) = HeaderValue::from_str(&format!("/api/v1/queries/{}", view.id)) {
        res.headers_mut().insert(header::LOCATION, v);
    }
    Ok(res)
}

/// The tenant named by the operator's header `name`: the only source when configured (a
/// gateway sets it); an absent header is no tenant. The header must appear once: a gateway
/// that appends its value instead of replacing the client's would otherwise let the client's
/// copy (the first) win, so a repeated header is refused like a comma-joined one (which is
/// no valid tenant either). A value that is not text is a malformed tenant, not "none".
fn tenant_of(headers: &HeaderMap, name: &axum::http::HeaderName) -> Result<String, ApiError> {
    let mut values = headers.get_all(name).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return match headers.contains_key(name) {
            false => Ok(String::new()),
            true => Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                super::error::ErrorCode::InvalidTenant,
                format!("the {name} header names the tenant and must appear once"),
            )),
        };
    };
    value
        .to_str()
        .map(str::to_string)
        .map_err(|_| ApiError::from(app::query_view::QueryError::InvalidTenant))
}

/// The current state of one query; 404 for an unknown or malformed id.
#[utoipa::path(
    get,
    path = "/api/v1/queries/{id}",
    operation_id = "getQuery",
    summary = "Current state of a query",
    params(("id" = TaskId, Path, description = "Query id (from the submit answer).")),
    responses(
        (status = 200, body = QueryView, description = "The current state."),
        (status = 404, body = ErrorBody, description = "Unknown or malformed id, or expired (code not_found)."),
        (status = 503, body = ErrorBody, description = "The queue (Redis) is unavailable (code unavailable)."),
    )
)]
pub async fn get(
    State(state): State<WebState>,
    Path(id): Path<String>,
) -> Result<Json<QueryView>, ApiError> {
    let id: TaskId = id.parse().map_err(|_| ApiError::not_found())?;
    app::query_view::read(&state.app, &id)
        .await?
        .map(Json)
        .ok_or_else(ApiError::not_found)
}

/// Extractor that admits a request under the rate limit or rejects it with 429 and
/// `Retry-After`. It reads no body, so it runs before the body is parsed: invalid requests
/// cost a token too.
pub struct RateLimited;

impl FromRequestParts<WebState> for RateLimited {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &WebState) -> Result<Self, ApiError> {
        let Some(limiter) = &state.api.limiter else {
            return Ok(RateLimited);
        };
        limiter
            .check_parts(parts)
            .map(|()| RateLimited)
            .map_err(ApiError::rate_limited)
    }
}
