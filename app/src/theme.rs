//! The colour theme a visitor chose: follow the system, or always light, or always dark.
//!
//! Remembered in a cookie ([`COOKIE`]) that the server reads while it renders, so the first
//! paint already has the right colours (`data-theme` on `<html>`, see [`crate::shell`]; the
//! stylesheet lets it override `prefers-color-scheme`). The [`ThemeToggle`] is a plain form
//! that posts to [`FORM_PATH`] (the server sets the cookie and sends the browser back, so it
//! works without JavaScript); once hydrated, a click changes the theme at once in the page
//! and writes the same cookie from the browser.

use leptos::prelude::*;

/// The cookie that holds the choice.
pub const COOKIE: &str = "repoll_theme";

/// Where the toggle's form posts (without JavaScript).
pub const FORM_PATH: &str = "/theme";

/// A year: the choice outlives the browser session.
const COOKIE_MAX_AGE_S: u64 = 365 * 24 * 3600;

/// The visitor's choice.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Theme {
    /// Follow the system's `prefers-color-scheme`.
    #[default]
    System,
    Light,
    Dark,
}

impl Theme {
    pub const ALL: [Theme; 3] = [Theme::System, Theme::Light, Theme::Dark];

    /// The value in the cookie, the form and `data-theme`.
    pub fn as_str(self) -> &'static str {
        match self {
            Theme::System => "system",
            Theme::Light => "light",
            Theme::Dark => "dark",
        }
    }

    /// The button's words.
    pub fn label(self) -> &'static str {
        match self {
            Theme::System => "System",
            Theme::Light => "Light",
            Theme::Dark => "Dark",
        }
    }

    /// Exactly one of the three values; anything else is `None`.
    pub fn parse(s: &str) -> Option<Theme> {
        Theme::ALL.into_iter().find(|t| t.as_str() == s)
    }

    /// The `Set-Cookie` value (server) and `document.cookie` value (browser) that remember it.
    /// Not HttpOnly: the page's own script writes it too; it holds nothing secret.
    pub fn cookie(self) -> String {
        format!(
            "{COOKIE}={}; Path=/; Max-Age={COOKIE_MAX_AGE_S}; SameSite=Lax",
            self.as_str()
        )
    }
}

/// The theme of the request being rendered (its cookie; an unknown value is `System`).
#[cfg(feature = "ssr")]
pub fn requested() -> Theme {
    use_context::<http::request::Parts>()
        .and_then(|p| crate::auth::cookie_value(&p.headers, COOKIE))
        .and_then(|v| Theme::parse(&v))
        .unwrap_or_default()
}

/// The theme the server rendered the page with, read back from `<html data-theme>` so the
/// hydrated toggle starts where the server's HTML is.
#[cfg(feature = "hydrate")]
fn rendered() -> Theme {
    document()
        .document_element()
        .and_then(|html| html.get_attribute("data-theme"))
        .and_then(|v| Theme::parse(&v))
        .unwrap_or_default()
}

/// Applies `theme` in the browser at once and remembers it.
#[cfg(feature = "hydrate")]
fn apply(theme: Theme) {
    use wasm_bindgen::JsCast;
    let doc = document();
    if let Some(html) = doc.document_element() {
        let _ = html.set_attribute("data-theme", theme.as_str());
    }
    if let Ok(doc) = doc.dyn_into::<web_sys::HtmlDocument>() {
        let _ = doc.set_cookie(&theme.cookie());
    }
}

/// System / Light / Dark, the current one pressed. Without JavaScript each button posts the
/// form (the server answers with the cookie and a redirect back to this page).
#[component]
pub fn ThemeToggle() -> impl IntoView {
    #[cfg(feature = "ssr")]
    let initial = requested();
    #[cfg(feature = "hydrate")]
    let initial = rendered();
    #[cfg(not(any(feature = "ssr", feature = "hydrate")))]
    let initial = Theme::default();
    let current = RwSignal::new(initial);
    let location = leptos_router::hooks::use_location();
    let back = move || page_path(&location.pathname.get(), &location.search.get());
    let buttons = Theme::ALL
        .into_iter()
        .map(|theme| {
            let pressed = move || {
                if current.get() == theme {
                    "true"
                } else {
                    "false"
                }
            };
            view! {
                <button
                    type="submit"
                    name="theme"
                    value=theme.as_str()
                    aria-pressed=pressed
                    data-testid=format!("theme-{}", theme.as_str())
                    on:click=move |ev| {
                        ev.prevent_default();
                        current.set(theme);
                        #[cfg(feature = "hydrate")]
                        apply(theme);
                    }
                >
                    {theme.label()}
                </button>
            }
        })
        .collect_view();
    view! {
        <form method="post" action=FORM_PATH class="theme-toggle" data-testid="theme-toggle">
            <input type="hidden" name="back" value=back />
            <div role="group" aria-label="Colour theme">{buttons}</div>
        </form>
    }
}

/// The page's path with its query string (the router's `search`, without its `?`): where the
/// no-JavaScript form comes back to.
fn page_path(pathname: &str, search: &str) -> String {
    if search.is_empty() {
        pathname.to_string()
    } else {
        format!("{pathname}?{search}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_accepts_the_three_values_only() {
        for t in Theme::ALL {
            assert_eq!(Theme::parse(t.as_str()), Some(t));
        }
        for bad in ["", "Dark", "dark ", "blue", "system;x=1"] {
            assert_eq!(Theme::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn page_path_keeps_the_query_string() {
        assert_eq!(
            page_path("/admin/tasks", "state=dead"),
            "/admin/tasks?state=dead"
        );
        assert_eq!(page_path("/", ""), "/");
    }

    #[test]
    fn cookie_names_the_value_for_a_year_on_every_path() {
        assert_eq!(
            Theme::Dark.cookie(),
            "repoll_theme=dark; Path=/; Max-Age=31536000; SameSite=Lax"
        );
    }
}
