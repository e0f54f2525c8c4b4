//! The checks every admin server function runs first.
//!
//! Server functions are plain URLs anyone can POST to, so the check lives in them (not only in
//! the pages): no session → 401 "sign in required", viewer → 403. The status is set only on
//! server-function calls from scripts; a page render or a plain form post keeps its own status
//! (the page redirects to the sign-in page; a form post is redirected back with the error).

use http::{request::Parts, StatusCode};
use leptos::prelude::*;

use super::{session::cookie_id, Role, Session, Sessions};
use model::REDIS_UNREACHABLE;

/// URL prefix of every admin server function (see `#[server(prefix = ...)]` in the pages).
pub const ADMIN_FN_PREFIX: &str = "/admin/fn";

/// A Redis call for `what` (e.g. "task list") that failed: logged with its error, answered 503
/// [`REDIS_UNREACHABLE`], the one wording every admin read, action and sign-in uses.
pub fn unreachable(what: &str, error: impl std::fmt::Display) -> ServerFnError {
    tracing::warn!(error = %error, what, "a Redis call of an admin request failed");
    refuse(StatusCode::SERVICE_UNAVAILABLE, REDIS_UNREACHABLE)
}

/// The error a refused request gets, with `status` on a scripted server-function call.
pub fn refuse(status: StatusCode, message: &str) -> ServerFnError {
    if let (Some(parts), Some(res)) = (
        use_context::<Parts>(),
        use_context::<leptos_axum::ResponseOptions>(),
    ) {
        let accepts_html = parts
            .headers
            .get(http::header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("text/html"));
        if parts.uri.path().starts_with(ADMIN_FN_PREFIX) && !accepts_html {
            res.set_status(status);
        }
    }
    ServerFnError::new(message)
}

/// The session of the current request, if signed in.
pub async fn current() -> Result<Option<Session>, ServerFnError> {
    let ctx = crate::context::app_context()?;
    let Some(id) = use_context::<Parts>().and_then(|p| cookie_id(&p.headers)) else {
        return Ok(None);
    };
    Sessions::of(&ctx)
        .get(&id)
        .await
        .map_err(|e| unreachable("session lookup", e))
}

/// The session, if it may act as `role`; otherwise the refusal to return.
pub async fn require(role: Role) -> Result<Session, ServerFnError> {
    match current().await? {
        None => Err(refuse(StatusCode::UNAUTHORIZED, "sign in required")),
        Some(s) if role == Role::Admin && s.role != Role::Admin => Err(refuse(
            StatusCode::FORBIDDEN,
            "not allowed: this account is read-only",
        )),
        Some(s) => Ok(s),
    }
}

/// Whether the browser reached us over https (directly, or per a trusted proxy).
pub fn request_is_https(parts: &Parts, trust_forwarded: bool) -> bool {
    parts.uri.scheme_str() == Some("https")
        || (trust_forwarded
            && parts
                .headers
                .get("x-forwarded-proto")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("https")))
}

#[cfg(test)]
mod tests {
    use super::request_is_https;

    fn parts(uri: &str, proto: Option<&str>) -> http::request::Parts {
        let mut b = http::Request::builder().uri(uri);
        if let Some(p) = proto {
            b = b.header("x-forwarded-proto", p);
        }
        b.body(()).unwrap().into_parts().0
    }

    /// `Secure` cookies over https: a request's own scheme, or a proxy's `X-Forwarded-Proto`
    /// only when the operator trusts the proxy (anyone can send the header).
    #[test]
    fn https_is_the_scheme_or_a_trusted_proxy_header() {
        assert!(request_is_https(&parts("https://h/admin", None), false));
        assert!(!request_is_https(&parts("/admin", None), true));
        assert!(!request_is_https(&parts("/admin", Some("https")), false));
        assert!(request_is_https(&parts("/admin", Some(" HTTPS ")), true));
        assert!(!request_is_https(&parts("/admin", Some("http")), true));
    }
}
