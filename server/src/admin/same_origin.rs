//! Cross-site request refusal for every state-changing request of the admin side and of the
//! Leptos server functions.
//!
//! A browser attaches cookies to requests a foreign page makes, so a signed-in admin visiting
//! a hostile site could otherwise be made to POST "purge". SameSite=Strict on the cookie is
//! the first defence; this is the second, independent of the cookie: browsers say where a
//! request comes from in `Sec-Fetch-Site` and `Origin`, and scripts cannot forge either.
//!
//! Rule, for every method other than GET/HEAD/OPTIONS on `/admin...`, on `/theme` and on the
//! server functions (`/api/...` except the public JSON API `/api/v1/...`, which is meant to be called
//! from anywhere and carries no cookie-based authority):
//! - `Sec-Fetch-Site`, if present, must be `same-origin` or `none` (typed by the user);
//! - `Origin`, if present, must name this host (`Host` header), and must not be `null`.
//!
//! A request with neither header is not from a browser (curl, tests) and is let through: it
//! carries no ambient credentials a third party could borrow.

use axum::{
    extract::Request,
    http::{header, HeaderMap, Method, StatusCode},
    middleware::Next,
    response::{IntoResponse, Response},
};

/// The middleware: refuses with 403 before any handler runs, so nothing changes.
pub async fn guard(req: Request, next: Next) -> Response {
    if guarded(req.method(), req.uri().path()) {
        if let Err(why) = same_origin(req.headers()) {
            // Counted always, logged within the shared budget, the path clipped.
            crate::refusals::refused("cross_site", why, req.uri().path());
            return (StatusCode::FORBIDDEN, "cross-site request refused").into_response();
        }
    }
    next.run(req).await
}

/// Whether the request is one this rule is about.
pub fn guarded(method: &Method, path: &str) -> bool {
    let safe = matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
    let admin = path == "/admin" || path.starts_with("/admin/");
    let server_fn = path.starts_with("/api/") && !path.starts_with("/api/v1/");
    // The theme toggle changes only a cookie, but a foreign page must not set it either.
    let theme = path == app::theme::FORM_PATH;
    !safe && (admin || server_fn || theme)
}

/// Ok when the headers show a same-origin (or non-browser) request; Err says why not.
pub fn same_origin(headers: &HeaderMap) -> Result<(), &'static str> {
    if let Some(site) = headers.get("sec-fetch-site") {
        let site = site.to_str().unwrap_or("");
        if !(site.eq_ignore_ascii_case("same-origin") || site.eq_ignore_ascii_case("none")) {
            return Err("sec-fetch-site is not same-origin");
        }
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().map_err(|_| "unreadable origin")?;
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .ok_or("origin without host")?;
        let authority = origin
            .split_once("://")
            .map(|(_, rest)| rest.trim_end_matches('/'))
            .ok_or("opaque origin")?;
        if !authority.eq_ignore_ascii_case(host.trim()) {
            return Err("origin is another site");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.insert(*k, v.parse().unwrap());
        }
        m
    }

    #[test]
    fn rule() {
        assert!(same_origin(&h(&[])).is_ok());
        assert!(same_origin(&h(&[("sec-fetch-site", "same-origin")])).is_ok());
        assert!(same_origin(&h(&[("sec-fetch-site", "cross-site")])).is_err());
        assert!(same_origin(&h(&[("sec-fetch-site", "same-site")])).is_err());
        let ok = h(&[
            ("origin", "http://127.0.0.1:3000"),
            ("host", "127.0.0.1:3000"),
        ]);
        assert!(same_origin(&ok).is_ok());
        let foreign = h(&[
            ("origin", "https://evil.example"),
            ("host", "127.0.0.1:3000"),
        ]);
        assert!(same_origin(&foreign).is_err());
        assert!(same_origin(&h(&[("origin", "null"), ("host", "a")])).is_err());
        assert!(same_origin(&h(&[("origin", "http://a")])).is_err());
    }

    #[test]
    fn scope() {
        assert!(guarded(&Method::POST, "/admin/fn/act123"));
        assert!(guarded(&Method::POST, "/api/check_redis123"));
        assert!(!guarded(&Method::POST, "/api/v1/queries"));
        assert!(!guarded(&Method::GET, "/admin"));
        assert!(!guarded(&Method::POST, "/administrator"));
        assert!(guarded(&Method::POST, "/theme"));
    }
}
