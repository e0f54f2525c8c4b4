//! repoll's user interface: Leptos components rendered on the server (`ssr`) and hydrated in
//! the browser (`hydrate`).
//!
//! A tour of the modules:
//! - [`shell`] / [`App`]: the HTML document, the navigation and the routes.
//! - [`status`]: the Redis status panel and the server function behind it — the smallest
//!   complete path from a browser click through a server function to Redis and back.
//! - [`pages`]: one module per page.
//! - [`auth`]: who may use the admin dashboard (roles; on the server: passwords, sessions).
//! - [`query_view`]: one query as the user sees it, shared by the query page and the JSON API.
//! - [`theme`]: the colour theme a visitor chose (system, light or dark) and its toggle.
//! - [`freshness`]: whether a stored result is served, fresh or stale and why, and what the
//!   caller accepts (`Cache-Control` request directives).
//! - `client` (server only): the one client-address rule every per-client limit uses.
//! - `context` (server only): what the server hands to server functions (Redis connection,
//!   queue name); never compiled into the wasm.

// The dashboard's views are deeply nested types (tachys encodes the markup in the type); the
// release build computes their layout past the default limit of 128.
#![recursion_limit = "256"]

pub mod auth;
pub mod freshness;
pub mod pages;
pub mod query_view;
pub mod status;
pub mod theme;

#[cfg(feature = "ssr")]
pub mod client;
#[cfg(feature = "ssr")]
pub mod context;

use leptos::prelude::*;
use leptos_meta::{provide_meta_context, MetaTags, Stylesheet, Title};
use leptos_router::{
    components::{Route, Router, Routes, A},
    path, SsrMode,
};

/// The HTML document the server renders around [`App`]; the hydration scripts it includes
/// load the wasm that takes over the page.
pub fn shell(options: LeptosOptions) -> impl IntoView {
    // The visitor's theme is in the server's HTML, so the first paint has its colours (no
    // flash of the other scheme before the wasm loads).
    #[cfg(feature = "ssr")]
    let theme = theme::requested();
    #[cfg(not(feature = "ssr"))]
    let theme = theme::Theme::default();
    view! {
        <!DOCTYPE html>
        <html lang="en" data-theme=theme.as_str()>
            <head>
                <meta charset="utf-8" />
                <meta name="viewport" content="width=device-width, initial-scale=1" />
                <link rel="icon" href="/favicon.svg" type="image/svg+xml" />
                <AutoReload options=options.clone() />
                <HydrationScripts options />
                <MetaTags />
            </head>
            <body>
                <App />
            </body>
        </html>
    }
}

/// The application: navigation and routes.
#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();
    view! {
        <Stylesheet id="leptos" href="/pkg/repoll.css" />
        <Title text="repoll" />
        <Router>
            <header class="topbar">
                <span class="brand">"repoll"</span>
                <nav>
                    <A href="/">"Query"</A>
                    <A href="/admin">"Dashboard"</A>
                </nav>
                <theme::ThemeToggle />
            </header>
            <main>
                <Routes fallback=pages::NotFound>
                    <Route path=path!("") view=pages::QueryPage />
                    <Route path=path!("/q/:id") view=pages::QueryResultPage ssr=SsrMode::Async />
                    <Route path=path!("/admin") view=pages::OverviewPage ssr=SsrMode::Async />
                    <Route path=path!("/admin/login") view=pages::LoginPage />
                    <Route path=path!("/admin/tasks") view=pages::TasksPage ssr=SsrMode::Async />
                    <Route path=path!("/admin/tasks/:id") view=pages::TaskPage ssr=SsrMode::Async />
                    <Route path=path!("/admin/leases") view=pages::LeasesPage ssr=SsrMode::Async />
                    <Route path=path!("/admin/upstreams") view=pages::UpstreamsPage ssr=SsrMode::Async />
                    <Route path=path!("/admin/bulk") view=pages::BulkPage ssr=SsrMode::Async />
                    <Route path=path!("/admin/dead") view=pages::DeadWorkPage ssr=SsrMode::Async />
                </Routes>
            </main>
        </Router>
    }
}
