//! `POST /theme`: the theme toggle without JavaScript (app::theme). The form names the theme
//! and the page it was on; the answer sets the theme cookie and sends the browser back to
//! that page (303), or to `/` when `back` is not a path of this site — never elsewhere, so
//! the form cannot be used to send someone to another site (no open redirect).
//!
//! It changes nothing but a cosmetic cookie of the browser that posts it, so it needs no
//! session; a cross-site post is refused all the same (`admin::same_origin`), so no foreign
//! page can restyle someone's dashboard.

use app::theme::{Theme, FORM_PATH};
use axum::{
    http::{header, StatusCode},
    response::{IntoResponse, Response},
    routing::post,
    Form, Router,
};
use serde::Deserialize;

/// The longest `back` path kept (longer ones go back to `/`): a page's path and query are far
/// shorter; the cap keeps a redirect header bounded.
const MAX_BACK: usize = 2048;

/// The toggle's routes.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new().route(FORM_PATH, post(choose))
}

#[derive(Deserialize)]
struct Choice {
    theme: Option<String>,
    back: Option<String>,
}

async fn choose(Form(choice): Form<Choice>) -> Response {
    let Some(theme) = choice.theme.as_deref().and_then(Theme::parse) else {
        return (
            StatusCode::BAD_REQUEST,
            "theme must be one of: system, light, dark",
        )
            .into_response();
    };
    let back = same_site_path(choice.back.as_deref().unwrap_or("/"));
    (
        StatusCode::SEE_OTHER,
        [
            (header::SET_COOKIE, theme.cookie()),
            (header::LOCATION, back.to_string()),
        ],
    )
        .into_response()
}

/// `back` when it is a path on this site, else `/`. A path starts with one `/`: `//host` and
/// `/\host` are read by browsers as another host, `https://…` is one; control characters
/// and spaces have no place in a Location header.
pub fn same_site_path(back: &str) -> &str {
    let mut chars = back.chars();
    let local = chars.next() == Some('/')
        && !matches!(chars.next(), Some('/' | '\\'))
        && back.len() <= MAX_BACK
        && !back.chars().any(|c| c.is_control() || c.is_whitespace());
    if local {
        back
    } else {
        "/"
    }
}

#[cfg(test)]
mod tests {
    use super::same_site_path;

    #[test]
    fn only_paths_of_this_site_are_kept() {
        for good in [
            "/",
            "/admin/tasks?state=dead",
            "/q/0123abcd",
            "/a/b?c=%2F%2Fx",
        ] {
            assert_eq!(same_site_path(good), good);
        }
        for bad in [
            "",
            "admin",
            "//evil.example/",
            "/\\evil.example",
            "https://evil.example/",
            "/ok\r\nSet-Cookie: x=1",
            "/a b",
        ] {
            assert_eq!(same_site_path(bad), "/", "{bad:?}");
        }
        assert_eq!(same_site_path(&format!("/{}", "a".repeat(3000))), "/");
    }
}
