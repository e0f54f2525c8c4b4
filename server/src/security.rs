//! What every response carries so a browser treats our pages safely, and the shape of the
//! answers a browser or client gets when something is refused.
//!
//! - [`headers`] (middleware):
//!   - HTML gets a Content-Security-Policy whose only scripts are our own files and the
//!     inline hydration scripts carrying this response's **nonce** (a fresh random value per
//!     response, handed to Leptos through [`CspNonce`] so its `<script>` tags carry the same
//!     one). An injected `<script>` or `onerror=` has no nonce and does not run, even if some
//!     upstream text ever got past the escaping. `frame-ancestors 'none'` (and
//!     `X-Frame-Options: DENY` for old browsers) stops click-jacking of the admin buttons.
//!   - Every response: `X-Content-Type-Options: nosniff` (upstream JSON is never sniffed
//!     into HTML) and `Referrer-Policy: same-origin` (task ids in URLs stay with us).
//!   - Redirects stay on our own site: a `Location` naming another host is cut to its path.
//!     Leptos sends a no-JS form back to the page it came from, read from the `Referer`,
//!     which a foreign page can set.
//!   - Under `/api/v1/` every error is the API's JSON shape, including the ones made by
//!     layers rather than handlers (413 from the body limit, 408/503 from the timeout).

use axum::{
    body::Body,
    extract::Request,
    http::{header, HeaderValue, StatusCode, Uri},
    middleware::Next,
    response::{IntoResponse, Response},
};

/// This response's CSP nonce, put in the request's extensions for the page renderer.
#[derive(Clone, Debug)]
pub struct CspNonce(pub String);

impl CspNonce {
    fn fresh() -> CspNonce {
        CspNonce(hex::encode(rand::random::<[u8; 16]>()))
    }
}

/// The policy of HTML responses, for `nonce`.
pub fn content_security_policy(nonce: &str) -> String {
    // style-src allows inline style attributes (the charts position by style); styles cannot
    // run code. 'wasm-unsafe-eval' lets the page compile its own wasm, nothing else.
    format!(
        "default-src 'self'; script-src 'self' 'nonce-{nonce}' 'wasm-unsafe-eval'; \
         style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; \
         font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; \
         frame-ancestors 'none'"
    )
}

/// The middleware (see the module doc).
pub async fn headers(mut req: Request, next: Next) -> Response {
    let nonce = CspNonce::fresh();
    req.extensions_mut().insert(nonce.clone());
    let host = req.headers().get(header::HOST).cloned();
    let api = req.uri().path().starts_with("/api/v1/") || req.uri().path() == "/api/v1";
    let mut res = next.run(req).await;

    if api && (res.status().is_client_error() || res.status().is_server_error()) && !is_json(&res) {
        res = api_error_from(res);
    }
    let h = res.headers_mut();
    if is_html(h) {
        if let Ok(v) = HeaderValue::from_str(&content_security_policy(&nonce.0)) {
            h.insert(header::CONTENT_SECURITY_POLICY, v);
        }
    }
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    if let Some(location) = h.get(header::LOCATION) {
        if let Some(own) = own_location(location, host.as_ref()) {
            h.insert(header::LOCATION, own);
        }
    }
    res
}

fn is_html(h: &axum::http::HeaderMap) -> bool {
    h.get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/html"))
}

fn is_json(res: &Response) -> bool {
    res.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"))
}

/// A replacement for a `Location` that leaves our site: its path and query on our own host
/// (`None` when it is fine as it is).
pub fn own_location(location: &HeaderValue, host: Option<&HeaderValue>) -> Option<HeaderValue> {
    let text = location.to_str().ok()?;
    // "//host/x" (and "/\\host", which browsers read the same way) leaves the site too.
    if text.starts_with("//") || text.starts_with("/\\") || text.starts_with('\\') {
        return Some(HeaderValue::from_static("/"));
    }
    let uri: Uri = match text.parse() {
        Ok(u) => u,
        Err(_) => return Some(HeaderValue::from_static("/")),
    };
    let Some(authority) = uri.authority() else {
        // A relative reference; "//host/..." parses with an authority, so this is a path.
        return None;
    };
    let ours = host
        .and_then(|h| h.to_str().ok())
        .is_some_and(|h| h.eq_ignore_ascii_case(authority.as_str()));
    if ours {
        return None;
    }
    let path = uri
        .path_and_query()
        .map(|p| p.as_str())
        .filter(|p| p.starts_with('/') && !p.starts_with("//"))
        .unwrap_or("/");
    HeaderValue::from_str(path)
        .ok()
        .or(Some(HeaderValue::from_static("/")))
}

/// The API's error shape for a response a layer made (its headers such as `Retry-After` and
/// `Allow` are kept).
fn api_error_from(res: Response) -> Response {
    let status = res.status();
    use crate::api::ErrorCode as C;
    let (code, message) = match status {
        StatusCode::PAYLOAD_TOO_LARGE => (C::PayloadTooLarge, "the request body is too large"),
        StatusCode::NOT_FOUND => (C::NotFound, "no such API endpoint"),
        StatusCode::METHOD_NOT_ALLOWED => (C::MethodNotAllowed, "method not allowed here"),
        StatusCode::REQUEST_TIMEOUT => (C::Timeout, "the request took too long"),
        StatusCode::SERVICE_UNAVAILABLE => (C::Unavailable, "try again shortly"),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => (C::UnsupportedMediaType, "send JSON"),
        s if s.is_client_error() => (C::BadRequest, "the request is not valid"),
        _ => (C::Internal, "internal error"),
    };
    let (mut parts, _) = res.into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let body = crate::api::ErrorBody::new(code, message).to_json();
    Response::from_parts(parts, Body::from(body))
}

/// What a panicking handler answers: a generic 500, the panic stays in the log. One request
/// fails; the process, its other connections and its workers go on.
pub fn panic_response(_panic: Box<dyn std::any::Any + Send + 'static>) -> Response {
    tracing::error!("a request handler panicked; answered 500");
    (StatusCode::INTERNAL_SERVER_ERROR, "internal error").into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hv(s: &str) -> HeaderValue {
        HeaderValue::from_str(s).unwrap()
    }

    #[test]
    fn foreign_redirects_are_cut_to_a_path() {
        let host = hv("127.0.0.1:3000");
        let cut = |l: &str| own_location(&hv(l), Some(&host));
        assert_eq!(
            cut("https://evil.example/x?__err=1"),
            Some(hv("/x?__err=1"))
        );
        assert_eq!(cut("//evil.example/x"), Some(hv("/")));
        assert_eq!(cut("/\\evil.example/x"), Some(hv("/")));
        assert_eq!(cut("https://evil.example//other"), Some(hv("/")));
        assert_eq!(cut("http://127.0.0.1:3000/admin"), None);
        assert_eq!(cut("/admin/login"), None);
    }

    #[test]
    fn the_policy_names_the_nonce_and_forbids_framing() {
        let p = content_security_policy("abc");
        assert!(p.contains("'nonce-abc'"));
        assert!(p.contains("frame-ancestors 'none'"));
        assert!(!p.contains("unsafe-eval'") || p.contains("wasm-unsafe-eval"));
    }
}
