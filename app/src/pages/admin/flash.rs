//! The result of an admin action after a form post without JavaScript (post/redirect/get).
//!
//! With JavaScript, a form's result comes back as the action's value and the page shows it in
//! place. Without, the browser posts, gets a 303 back to the page, and loads it again, so the
//! answer would be lost: [`set`] leaves it in a short-lived cookie on the redirect, and the
//! next page render [`take`]s it (showing it once and clearing the cookie). The cookie is
//! HttpOnly, SameSite=Strict, scoped to `/admin`, kept 60 s, and its text is shown as text.

/// Name of the cookie.
pub const COOKIE: &str = "repoll_flash";
/// Longest message kept (the action sentences are short; this bounds the cookie).
const MAX_CHARS: usize = 300;

/// Whether this server-function call is a plain form post (no JavaScript): the browser asks
/// for a page, not for data.
pub fn is_form_post(parts: &http::request::Parts) -> bool {
    parts
        .headers
        .get(http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/html"))
}

/// Leaves `message` for the page the browser is sent back to, if this call is a form post.
pub fn set(message: &str) {
    let (Some(parts), Some(response)) = (
        leptos::prelude::use_context::<http::request::Parts>(),
        leptos::prelude::use_context::<leptos_axum::ResponseOptions>(),
    ) else {
        return;
    };
    if !is_form_post(&parts) {
        return;
    }
    let text: String = message.chars().take(MAX_CHARS).collect();
    let cookie = format!(
        "{COOKIE}={}; Path=/admin; HttpOnly; SameSite=Strict; Max-Age=60",
        urlencoding::encode(&text)
    );
    if let Ok(v) = http::HeaderValue::from_str(&cookie) {
        response.append_header(http::header::SET_COOKIE, v);
    }
}

/// The message left by the last form post, once: the response that shows it clears it.
pub fn take() -> Option<String> {
    let parts = leptos::prelude::use_context::<http::request::Parts>()?;
    let raw = crate::auth::cookie_value(&parts.headers, COOKIE)?;
    if let Some(response) = leptos::prelude::use_context::<leptos_axum::ResponseOptions>() {
        response.append_header(
            http::header::SET_COOKIE,
            http::HeaderValue::from_static(
                "repoll_flash=; Path=/admin; HttpOnly; SameSite=Strict; Max-Age=0",
            ),
        );
    }
    let text = urlencoding::decode(&raw).ok()?.into_owned();
    let text: String = text.chars().take(MAX_CHARS).collect();
    (!text.trim().is_empty()).then_some(text)
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_a_page_request_is_a_form_post() {
        let req = |accept: &str| {
            http::Request::builder()
                .header(http::header::ACCEPT, accept)
                .body(())
                .unwrap()
                .into_parts()
                .0
        };
        assert!(super::is_form_post(&req("text/html,application/xhtml+xml")));
        assert!(!super::is_form_post(&req("application/json")));
    }
}
