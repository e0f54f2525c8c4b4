//! The API's one error shape, `{"error": {"code", "message"}}`, and the JSON body extractor
//! whose rejections use it.
//!
//! Why a custom extractor: axum's own `Json` rejections are plain text, and a client that
//! sends the wrong content type or broken JSON deserves the same machine-readable answer as
//! any other mistake — always a 4xx, never a 5xx.

use app::query_view::QueryError;
use axum::{
    extract::{rejection::JsonRejection, FromRequest, Request},
    http::{header, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    Json,
};
use serde::de::DeserializeOwned;

/// An error answer of the API.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    /// Stable, machine-readable (documented in the OpenAPI document).
    pub code: &'static str,
    /// For humans; never internal details.
    pub message: String,
    /// Seconds, sent as `Retry-After` (429 and 503).
    pub retry_after: Option<u64>,
    /// Close the connection after this answer (`Connection: close`).
    pub close: bool,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            retry_after: None,
            close: false,
        }
    }

    pub fn not_found() -> Self {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "no query with this id (it may have expired)",
        )
    }

    pub fn rate_limited(retry_after: u64) -> Self {
        ApiError {
            retry_after: Some(retry_after),
            ..ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                format!("too many queries from this client; retry in {retry_after} s"),
            )
        }
    }
}

impl From<crate::live_hub::StreamRefused> for ApiError {
    /// A live stream over a cap. The response also closes the connection (see
    /// `IntoResponse`): a refused client must not keep a descriptor open by keep-alive.
    fn from(r: crate::live_hub::StreamRefused) -> Self {
        use crate::live_hub::StreamRefused;
        let (status, code, message) = match r {
            StreamRefused::ClientFull { cap } => (
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_streams",
                format!("this client has {cap} live streams open already; close one first"),
            ),
            StreamRefused::ProcessFull { cap } => (
                StatusCode::SERVICE_UNAVAILABLE,
                "streams_full",
                format!("the server holds its maximum of {cap} live streams; try again later"),
            ),
        };
        ApiError {
            retry_after: Some(5),
            close: true,
            ..ApiError::new(status, code, message)
        }
    }
}

impl From<QueryError> for ApiError {
    fn from(e: QueryError) -> Self {
        match e {
            QueryError::Invalid(msg) => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_query", msg)
            }
            QueryError::Unavailable => ApiError {
                retry_after: Some(1),
                ..ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "unavailable",
                    "the queue is unavailable; try again shortly",
                )
            },
            QueryError::Internal => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "internal error",
            ),
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> Self {
        let (status, code) = match &r {
            JsonRejection::MissingJsonContentType(_) => {
                (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")
            }
            JsonRejection::JsonSyntaxError(_) => (StatusCode::BAD_REQUEST, "malformed_json"),
            JsonRejection::JsonDataError(_) => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_body"),
            other if other.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
            }
            _ => (StatusCode::BAD_REQUEST, "bad_request"),
        };
        ApiError::new(status, code, r.body_text())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({
            "error": { "code": self.code, "message": self.message }
        });
        let mut res = (self.status, Json(body)).into_response();
        if let Some(s) = self.retry_after {
            if let Ok(v) = HeaderValue::from_str(&s.to_string()) {
                res.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        if self.close {
            res.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        res
    }
}

/// `axum::Json` with rejections in the API's error shape.
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        Json::<T>::from_request(req, state)
            .await
            .map(|Json(v)| ApiJson(v))
            .map_err(ApiError::from)
    }
}
