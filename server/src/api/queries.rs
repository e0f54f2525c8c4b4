//! `POST /api/v1/queries` and `GET /api/v1/queries/{id}`: thin HTTP wrappers around
//! `app::query_view::{submit, read}`, the same code the query page's server functions call.

use app::freshness::CacheRequest;
use app::query_view::{Freshness, QueryView, TaskId};
use axum::{
    extract::{Path, State},
    http::{header, HeaderMap, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    Json,
};
use serde::Deserialize;

use axum::{extract::FromRequestParts, http::request::Parts};

use super::error::{ApiError, ApiJson, ErrorBody};
use super::query_feed::Feed;
use crate::state::{ClientIp, WebState};

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
    /// Give `query` or `input`, one of the two.
    #[serde(default)]
    #[schema(min_length = 1, max_length = 512)]
    pub query: Option<String>,
    /// A structured input instead of `query`: a JSON object, at most 2048 bytes in its RFC 8785
    /// canonical form, nested at most 8 levels, 128 values in all (422 `invalid_query` naming
    /// the bound). It is canonicalised, so key order and number spelling never make two
    /// queries; the canonical text is the query's text (`query` in the answer), and a job API's
    /// submit body receives the object where it says `"{input}"`.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub input: Option<serde_json::Value>,
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
    /// What the caller accepts of a stored result, for clients that cannot set headers: the
    /// request directives of `Cache-Control` (`max-age=N`, `max-stale[=N]`, `no-cache`,
    /// `only-if-cached`), taken together with the header's.
    #[serde(default)]
    #[schema(max_length = 256)]
    pub cache_control: Option<String>,
}

/// The longest `cache_control` text (field and header together) read.
const MAX_CACHE_CONTROL: usize = 256;

/// The directives of the request's `Cache-Control` headers and the body's `cache_control`.
fn cache_request(headers: &HeaderMap, body: Option<&str>) -> Result<CacheRequest, ApiError> {
    let mut text = String::new();
    for v in headers.get_all(header::CACHE_CONTROL) {
        let v = v
            .to_str()
            .map_err(|_| bad_cache_control("Cache-Control is not text"))?;
        text.push_str(v);
        text.push(',');
    }
    text.push_str(body.unwrap_or(""));
    if text.len() > MAX_CACHE_CONTROL {
        return Err(bad_cache_control(&format!(
            "cache directives longer than {MAX_CACHE_CONTROL} bytes"
        )));
    }
    CacheRequest::parse(&text).map_err(|e| bad_cache_control(&e))
}

fn bad_cache_control(why: &str) -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        super::error::ErrorCode::InvalidCacheControl,
        format!("Cache-Control: {why}"),
    )
}

/// The answers counted in `repoll_answers_total{upstream,freshness}`: `fresh`, `stale` and
/// `negative` from the store, `miss` otherwise (a new task, a join, or a result too old for
/// the caller).
pub const ANSWERS_METRIC: &str = "repoll_answers_total";

fn count_answer(view: &QueryView) {
    let kind = match view.freshness {
        Some(Freshness::Fresh) if view.result.is_none() => "negative",
        Some(Freshness::Fresh) => "fresh",
        Some(Freshness::Stale) => "stale",
        None => "miss",
    };
    metrics::counter!(ANSWERS_METRIC, "upstream" => view.upstream.clone(), "freshness" => kind)
        .increment(1);
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
    params(
        ("Prefer" = Option<String>, Header, description = "`wait=N` (RFC 7240): answer once the query is final, or after N seconds (at most REPOLL_MAX_WAIT_MS), whichever comes first; the answer says `Preference-Applied: wait=N`. Without it the answer is immediate."),
        ("Cache-Control" = Option<String>, Header, description = "What the caller accepts of a stored result (RFC 9111 request directives): `max-age=N` (nothing older is taken: the refresh's progress is answered), `max-stale[=N]` (stale taken up to N s past fresh), `no-cache` (a refresh starts now or the running one is joined), `only-if-cached` (never start a task). The body's `cache_control` adds to it."),
    ),
    responses(
        (status = 200, body = QueryView, description = "From the store or final already: a stored result, fresh or stale (`freshness`, `age_ms`, `stale_reason`; a stale one is being refreshed or cannot be: see docs/freshness.md), a cached failure (status failed, freshness fresh), or a task that finished within the first-answer budget.",
            headers(
                ("Location" = String, description = "The query's resource, /api/v1/queries/{id}."),
                ("Preference-Applied" = String, description = "`wait=N`: the wait honoured (only when `Prefer: wait` was sent)."),
                ("Age" = u64, description = "Seconds since the stored answer was stored (stored answers only)."),
                ("Cache-Control" = String, description = "`max-age=<seconds fresh left>` on a stored answer (0 when stale); `no-store` on a task's progress."),
                ("Cache-Status" = String, description = "RFC 9211: `repoll; hit; ttl=N` (fresh), `repoll; fwd=stale; fwd-status=202|503; ttl=-N[; collapsed]; detail=<stale_reason>` (stale, a refresh started or joined), `repoll; hit; ttl=-N[; detail=upstream_failed]` (stale, nothing sent on), `repoll; fwd=miss; stored` (new task), `repoll; fwd=miss; collapsed` (joined), `repoll; fwd=request; ttl=N; stored|collapsed` (a fresh result refused by `no-cache` or `max-age`, its refresh back within the first-answer wait), `detail=negative` on a cached failure."),
            )),
        (status = 202, body = QueryView, description = "Processing: a task was created or joined (or the stored result is older than the caller accepts and its refresh runs); partial data included when the upstream has some. Follow `Location` or the events stream.",
            headers(
                ("Location" = String, description = "The query's resource, /api/v1/queries/{id}."),
                ("Preference-Applied" = String, description = "`wait=N`: the wait honoured (only when `Prefer: wait` was sent)."),
                ("Cache-Control" = String, description = "`no-store`."),
                ("Cache-Status" = String, description = "As for 200."),
            )),
        (status = 400, body = ErrorBody, description = "Malformed JSON (code malformed_json), or a malformed cache directive in `Cache-Control` or `cache_control` (code invalid_cache_control)."),
        (status = 413, body = ErrorBody, description = "Body larger than 4 KiB (code payload_too_large)."),
        (status = 415, body = ErrorBody, description = "Content type is not application/json (code unsupported_media_type)."),
        (status = 422, body = ErrorBody, description = "The query breaks the input rules (code invalid_query), the body has no string `query` (code invalid_body), names an unknown upstream (code unknown_upstream, the message lists the known ones) or a malformed tenant (code invalid_tenant; also when the operator's tenant header appears more than once)."),
        (status = 429, body = ErrorBody, description = "Rate limit of this client reached (code rate_limited): all submits, or those that refuse what is stored (`no-cache`, `max-age`; REPOLL_REFRESH_PER_MIN).",
            headers(("Retry-After" = u64, description = "Seconds to wait."))),
        (status = 503, body = ErrorBody, description = "The queue (Redis) is unavailable (code unavailable)."),
        (status = 504, body = ErrorBody, description = "`only-if-cached`, and nothing is stored or running for the query (code not_cached)."),
    )
)]
pub async fn submit(
    State(state): State<WebState>,
    headers: HeaderMap,
    RateLimited(client): RateLimited,
    ApiJson(body): ApiJson<SubmitBody>,
) -> Result<Response, ApiError> {
    let tenant = match &state.api.tenant_header {
        Some(name) => tenant_of(&headers, name)?,
        None => body.tenant.unwrap_or_default(),
    };
    let cache = cache_request(&headers, body.cache_control.as_deref())?;
    // A caller who refuses what is stored makes the upstream work: at most so many a minute.
    // (A max age at least the upstream's fresh window refuses nothing.)
    let fresh_ms = state
        .app
        .upstream(body.upstream.as_deref())
        .map_or(u64::MAX, |(q, _)| q.config().result_ttl_ms);
    if cache
        .max_age_for_queue()
        .is_some_and(|max_age| max_age < fresh_ms)
    {
        if let Some(limiter) = &state.api.refresh_limiter {
            limiter.check(client).map_err(ApiError::rate_limited)?;
        }
    }
    let text = match (body.query, &body.input) {
        (Some(query), None) => query,
        (None, Some(input)) => model::canonical_input(input).map_err(|e| {
            ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                super::error::ErrorCode::InvalidQuery,
                e.0,
            )
        })?,
        _ => {
            return Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                super::error::ErrorCode::InvalidBody,
                "give `query` (a string) or `input` (a JSON object): one of the two",
            ))
        }
    };
    let ask = app::query_view::Ask {
        text: &text,
        priority: body.priority,
        upstream: body.upstream.as_deref(),
        tenant: &tenant,
        cache,
    };
    let (view, answered) = app::query_view::submit_with(&state.app, &ask).await?;
    tracing::debug!(id = %view.id, ?answered, status = view.status.as_str(), "api: query submitted");
    count_answer(&view);
    let wait = preferred_wait(&headers, state.api.max_wait);
    let view = match wait {
        Some(wait) => waited(&state, client, view, wait).await?,
        None => view,
    };
    let status = if view.status.is_final() {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    let mut res = (status, Json(&view)).into_response();
    if let Ok(v) = HeaderValue::from_str(&format!("/api/v1/queries/{}", view.id)) {
        res.headers_mut().insert(header::LOCATION, v);
    }
    super::cache_status::insert(res.headers_mut(), &view, Some(answered));
    if let Some(wait) = wait {
        preference_applied(&mut res, wait);
    }
    Ok(res)
}

/// `Prefer: wait=N` (RFC 7240, as Replicate's API takes it): how long the caller will wait for
/// the final state, capped by `REPOLL_MAX_WAIT_MS`. None when no wait is asked or waits are
/// off. A preference that does not parse is ignored, as RFC 7240 says of any it does not
/// understand: the answer is then immediate, never an error.
fn preferred_wait(headers: &HeaderMap, max: std::time::Duration) -> Option<std::time::Duration> {
    if max.is_zero() {
        return None;
    }
    let secs = headers
        .get_all("prefer")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .find_map(|pref| {
            let (name, value) = pref.split_once('=')?;
            let value = value.split(';').next()?.trim().trim_matches('"');
            name.trim()
                .eq_ignore_ascii_case("wait")
                .then(|| value.parse::<u64>().ok())
                .flatten()
        })?;
    Some(std::time::Duration::from_secs(secs).min(max))
}

/// `view` if it is final; otherwise the query's state once it is final or `wait` has passed
/// (a waiting request holds a place under the live-stream caps, as a stream that sends once;
/// it is woken by the query's shared feed, not by polling Redis).
async fn waited(
    state: &WebState,
    client: Option<std::net::IpAddr>,
    view: QueryView,
    wait: std::time::Duration,
) -> Result<QueryView, ApiError> {
    if view.status.is_final() {
        return Ok(view);
    }
    let _permit = state.live.admit(client)?;
    let mut feed = state.api.feeds.follow(&state.app, &state.live, &view.id);
    let settled = |f: &Feed| match f {
        Feed::Known(shared) => shared.is_final,
        Feed::Loading => false,
        Feed::Unknown | Feed::Failed { .. } => true,
    };
    // Timing out is the answer "not yet": the state as it is then.
    let _ = tokio::time::timeout(wait, async { feed.wait_for(settled).await.map(drop) }).await;
    Ok(app::query_view::read(&state.app, &view.id)
        .await?
        .unwrap_or(view))
}

/// `Preference-Applied: wait=N`, the wait this answer honoured (N capped by the server's).
fn preference_applied(res: &mut Response, wait: std::time::Duration) {
    if let Ok(v) = HeaderValue::from_str(&format!("wait={}", wait.as_secs())) {
        res.headers_mut().insert("preference-applied", v);
    }
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
    params(
        ("id" = TaskId, Path, description = "Query id (from the submit answer)."),
        ("Prefer" = Option<String>, Header, description = "`wait=N` (RFC 7240): answer once the query is final, or after N seconds (at most REPOLL_MAX_WAIT_MS), whichever comes first."),
    ),
    responses(
        (status = 200, body = QueryView, description = "The current state; a stored result with its freshness (a read never starts a refresh). With `Prefer: wait=N`, the state once final or when the wait ran out.",
            headers(
                ("Preference-Applied" = String, description = "`wait=N`: the wait honoured (only when `Prefer: wait` was sent)."),
                ("Age" = u64, description = "Seconds since the stored answer was stored (stored answers only)."),
                ("Cache-Control" = String, description = "`max-age=<seconds fresh left>` on a stored answer (0 when stale); `no-store` on a task's progress."),
                ("Cache-Status" = String, description = "RFC 9211, as for the submit (`repoll; hit; ttl=N`, `repoll; fwd=stale; …`, `repoll; fwd=miss`)."),
            )),
        (status = 404, body = ErrorBody, description = "Unknown or malformed id, or expired (code not_found)."),
        (status = 503, body = ErrorBody, description = "The queue (Redis) is unavailable (code unavailable)."),
    )
)]
pub async fn get(
    State(state): State<WebState>,
    ClientIp(client): ClientIp,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id: TaskId = id.parse().map_err(|_| ApiError::not_found())?;
    let view = app::query_view::read(&state.app, &id)
        .await?
        .ok_or_else(ApiError::not_found)?;
    let wait = preferred_wait(&headers, state.api.max_wait);
    let view = match wait {
        Some(wait) => waited(&state, client, view, wait).await?,
        None => view,
    };
    let mut res = Json(&view).into_response();
    super::cache_status::insert(res.headers_mut(), &view, None);
    if let Some(wait) = wait {
        preference_applied(&mut res, wait);
    }
    Ok(res)
}

/// Extractor that admits a request under the rate limit or rejects it with 429 and
/// `Retry-After`. It reads no body, so it runs before the body is parsed: invalid requests
/// cost a token too.
/// The client's address (`app::client`'s rule), for the other per-client limits.
pub struct RateLimited(pub Option<std::net::IpAddr>);

impl FromRequestParts<WebState> for RateLimited {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &WebState) -> Result<Self, ApiError> {
        let client = app::client::client_ip_of(parts, state.api.trust_forwarded);
        let Some(limiter) = &state.api.limiter else {
            return Ok(RateLimited(client));
        };
        limiter
            .check(client)
            .map(|()| RateLimited(client))
            .map_err(ApiError::rate_limited)
    }
}
