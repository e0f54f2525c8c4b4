//! `POST /api/v1/queries` and `GET /api/v1/queries/{id}`: thin HTTP wrappers around
//! `app::query_view::{submit, read}`, the same code the query page's server functions call.

use app::query_view::{QueryView, TaskId};
use axum::{
    extract::{Path, State},
    http::{header, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    Json,
};
use serde::Deserialize;

use super::{
    error::{ApiError, ApiJson},
    rate::RateLimited,
};
use crate::web::WebState;

/// Body of `POST /api/v1/queries`.
#[derive(Debug, Deserialize)]
pub struct SubmitBody {
    pub query: String,
    /// `interactive` (default: a person is waiting) or `background`.
    #[serde(default)]
    pub priority: queue::Priority,
}

/// 202 while processing (a task was created or joined), 200 once final (a fresh stored
/// result, or a task that finished within the first-answer budget). `Location` names the
/// query's resource either way.
pub async fn submit(
    State(state): State<WebState>,
    _limit: RateLimited,
    ApiJson(body): ApiJson<SubmitBody>,
) -> Result<Response, ApiError> {
    let (view, created) =
        app::query_view::submit_with(&state.app, &body.query, body.priority).await?;
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

/// The current state of one query; 404 for an unknown or malformed id.
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
