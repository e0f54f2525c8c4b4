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
use serde::{de::DeserializeOwned, Serialize};

/// The stable, machine-readable reason of an error answer. One enum for every answer the API
/// (and the layers in front of it) can give, so the OpenAPI document lists exactly these.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The body is not valid JSON (400).
    MalformedJson,
    /// The body is JSON but not the expected object, e.g. no string `query` (422).
    InvalidBody,
    /// The query breaks the input rules (422).
    InvalidQuery,
    /// The body names an upstream this deployment does not have; the message lists the known
    /// ones (422).
    UnknownUpstream,
    InvalidTenant,
    /// The content type is not `application/json` (415).
    UnsupportedMediaType,
    /// The body is larger than the limit (413).
    PayloadTooLarge,
    /// Another client mistake (400).
    BadRequest,
    /// A `Cache-Control` request directive (header or `cache_control`) with a malformed value (400).
    InvalidCacheControl,
    /// `only-if-cached`, and nothing is stored for the query (504).
    NotCached,
    /// A provider's webhook without a valid signature or secret, or with a stale timestamp
    /// (401).
    Unauthorized,
    /// Unknown endpoint, or unknown, malformed or expired query id (404).
    NotFound,
    /// The method is not allowed on this endpoint (405).
    MethodNotAllowed,
    /// The request took longer than the server's request timeout (408).
    Timeout,
    /// This client's rate limit is reached; see `Retry-After` (429).
    RateLimited,
    /// This client holds its maximum of live streams (429).
    TooManyStreams,
    /// The server holds its maximum of live streams (503).
    StreamsFull,
    /// The server holds its maximum of open connections (503, then the connection closes).
    Overloaded,
    /// The queue (Redis) is unavailable; try again shortly (503). Also: this process's queue
    /// was repartitioned while it ran, and it accepts nothing until restarted (503; the
    /// message says so).
    Unavailable,
    /// Something failed on our side; details are in the server log only (500).
    Internal,
}

impl ErrorCode {
    /// Every code (the OpenAPI test checks each is documented as it is sent).
    pub const ALL: &'static [ErrorCode] = &[
        ErrorCode::MalformedJson,
        ErrorCode::InvalidBody,
        ErrorCode::InvalidQuery,
        ErrorCode::UnknownUpstream,
        ErrorCode::InvalidTenant,
        ErrorCode::UnsupportedMediaType,
        ErrorCode::PayloadTooLarge,
        ErrorCode::BadRequest,
        ErrorCode::InvalidCacheControl,
        ErrorCode::NotCached,
        ErrorCode::Unauthorized,
        ErrorCode::NotFound,
        ErrorCode::MethodNotAllowed,
        ErrorCode::Timeout,
        ErrorCode::RateLimited,
        ErrorCode::TooManyStreams,
        ErrorCode::StreamsFull,
        ErrorCode::Overloaded,
        ErrorCode::Unavailable,
        ErrorCode::Internal,
    ];

    /// The code as sent.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::MalformedJson => "malformed_json",
            ErrorCode::InvalidBody => "invalid_body",
            ErrorCode::InvalidQuery => "invalid_query",
            ErrorCode::UnknownUpstream => "unknown_upstream",
            ErrorCode::InvalidTenant => "invalid_tenant",
            ErrorCode::UnsupportedMediaType => "unsupported_media_type",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::InvalidCacheControl => "invalid_cache_control",
            ErrorCode::NotCached => "not_cached",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::NotFound => "not_found",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
            ErrorCode::Timeout => "timeout",
            ErrorCode::RateLimited => "rate_limited",
            ErrorCode::TooManyStreams => "too_many_streams",
            ErrorCode::StreamsFull => "streams_full",
            ErrorCode::Overloaded => "overloaded",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Internal => "internal",
        }
    }
}

/// The body of every error answer: `{"error": {"code", "message"}}`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = Error)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// What went wrong.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    pub code: ErrorCode,
    /// For humans; never internal details.
    pub message: String,
}

impl ErrorBody {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                code,
                message: message.into(),
            },
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// An error answer of the API.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    /// Stable, machine-readable (documented in the OpenAPI document).
    pub code: ErrorCode,
    /// For humans; never internal details.
    pub message: String,
    /// Seconds, sent as `Retry-After` (429 and 503).
    pub retry_after: Option<u64>,
    /// Close the connection after this answer (`Connection: close`).
    pub close: bool,
}

impl ApiError {
    pub fn new(status: StatusCode, code: ErrorCode, message: impl Into<String>) -> Self {
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
            ErrorCode::NotFound,
            "no query with this id (it may have expired)",
        )
    }

    /// The queue (Redis) could not be reached: 503 with a second's `Retry-After`.
    pub fn unavailable() -> Self {
        ApiError {
            retry_after: Some(1),
            ..ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::Unavailable,
                "the queue is unavailable; try again shortly",
            )
        }
    }

    pub fn rate_limited(retry_after: u64) -> Self {
        ApiError {
            retry_after: Some(retry_after),
            ..ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                ErrorCode::RateLimited,
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
                ErrorCode::TooManyStreams,
                format!("this client has {cap} live streams open already; close one first"),
            ),
            StreamRefused::ProcessFull { cap } => (
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::StreamsFull,
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
            QueryError::Invalid(msg) => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                ErrorCode::InvalidQuery,
                msg,
            ),
            QueryError::UnknownUpstream(e) => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                ErrorCode::UnknownUpstream,
                e.to_string(),
            ),
            e @ QueryError::InvalidTenant => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                ErrorCode::InvalidTenant,
                e.to_string(),
            ),
            QueryError::Unavailable => ApiError::unavailable(),
            // Not for the client to fix, and not over by retrying here: the process must be
            // restarted (its /readyz says so); another instance may already serve.
            e @ QueryError::LayoutChanged => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::Unavailable,
                e.to_string(),
            ),
            e @ QueryError::NotCached => ApiError::new(
                StatusCode::GATEWAY_TIMEOUT,
                ErrorCode::NotCached,
                e.to_string(),
            ),
            QueryError::Internal => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                ErrorCode::Internal,
                "internal error",
            ),
        }
    }
}

/// Largest request body of the query API: a query is at most 512 characters, so a few KiB
/// is ample. Here, beside the error it makes: a larger body gets the API's JSON 413 naming it.
pub const BODY_LIMIT_BYTES: usize = 4096;

/// The words of every 413: the limit that fired, and where it is set.
pub fn too_large_message(limit: usize, setting: &str) -> String {
    format!("the request body is larger than {limit} bytes ({setting})")
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> Self {
        let (status, code) = match &r {
            JsonRejection::MissingJsonContentType(_) => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                ErrorCode::UnsupportedMediaType,
            ),
            JsonRejection::JsonSyntaxError(_) => {
                (StatusCode::BAD_REQUEST, ErrorCode::MalformedJson)
            }
            JsonRejection::JsonDataError(_) => {
                (StatusCode::UNPROCESSABLE_ENTITY, ErrorCode::InvalidBody)
            }
            other if other.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                // The only JSON bodies read are the query API's, under its own limit.
                return ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    ErrorCode::PayloadTooLarge,
                    too_large_message(BODY_LIMIT_BYTES, "the query API's own limit"),
                );
            }
            _ => (StatusCode::BAD_REQUEST, ErrorCode::BadRequest),
        };
        ApiError::new(status, code, r.body_text())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody::new(self.code, self.message);
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
