//! The axum router of `repoll serve`.
//!
//! [`router`] is a plain function of [`WebState`] so tests drive it with
//! `tower::ServiceExt::oneshot` exactly as the server runs it.

use std::time::Duration;

use app::{shell, App};
use axum::{extract::State, http::StatusCode, response::IntoResponse, routing::get, Router};
use leptos::prelude::*;
use leptos_axum::{generate_route_list, LeptosRoutes};
// The process state lives below the routes (`crate::state`); the paths `web::WebState` &
// co. stay for callers.
pub use crate::state::{ClientIp, WebState};

use tower_http::{
    catch_panic::CatchPanicLayer, limit::RequestBodyLimitLayer, timeout::TimeoutLayer,
    trace::TraceLayer,
};

/// Limits applied to every request.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub body_bytes: usize,
    pub timeout: Duration,
}

/// Leptos options built from our own config rather than Cargo.toml metadata, so the binary
/// runs the same under cargo-leptos, `cargo run` and tests.
pub fn leptos_options(site_root: &str) -> LeptosOptions {
    LeptosOptions::builder()
        .output_name("repoll")
        .site_root(site_root)
        .site_pkg_dir("pkg")
        .build()
}

/// The app's routes, generated once per process.
///
/// Why once: generating them renders the app with resource loading suppressed through a
/// *process-global* flag in leptos_server, and a resource first polled on any thread while
/// that flag is up waits forever (leptos-rs/leptos#4773). `repoll serve` builds its router
/// before it listens, but a process that builds routers while others serve pages (the test
/// suites, one router per test on parallel threads) would hang a page now and then: CI saw
/// an admin page time out after 30 s that way. A `OnceLock` makes every later router reuse
/// the first list, so no render can overlap a generation.
fn route_list() -> Vec<leptos_axum::AxumRouteListing> {
    static ROUTES: std::sync::OnceLock<Vec<leptos_axum::AxumRouteListing>> =
        std::sync::OnceLock::new();
    ROUTES
        .get_or_init(|| {
            ROUTE_LISTS_GENERATED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            generate_route_list(App)
        })
        .clone()
}

static ROUTE_LISTS_GENERATED: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

/// How many times this process generated the route list: 1 once a router exists. The hang
/// above is a race a test cannot force, so the tests check its cause instead: a second
/// generation in a process that already serves pages.
pub fn route_lists_generated() -> usize {
    ROUTE_LISTS_GENERATED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Builds the whole application router. `extra` is merged in before the layers, so extra
/// routes (metrics) get the same tracing and limits.
pub fn router(state: WebState, limits: Limits, extra: Router) -> Router {
    let routes = route_list();
    let ctx = state.app.clone();
    // The query page's submit server function shares the API's per-client buckets.
    let gate = state.api.limiter.clone().map(|limiter| {
        app::context::SubmitGate(std::sync::Arc::new(
            move |parts: &axum::http::request::Parts| limiter.check_parts(parts),
        ))
    });
    let options = state.leptos_options.clone();
    let app = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .merge(crate::api::router())
        .merge(crate::admin::router())
        .leptos_routes_with_context(
            &state,
            routes,
            move || {
                provide_context(ctx.clone());
                if let Some(gate) = &gate {
                    provide_context(gate.clone());
                }
                // The nonce of this response's CSP (crate::security), so Leptos's inline
                // scripts carry the one value the policy allows.
                if let Some(nonce) = use_context::<axum::http::request::Parts>()
                    .and_then(|p| p.extensions.get::<crate::security::CspNonce>().cloned())
                {
                    provide_context(leptos::nonce::Nonce::from_value(nonce.0));
                }
            },
            move || shell(options.clone()),
        )
        .fallback(leptos_axum::file_and_error_handler::<WebState, _>(shell))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::admin::page_guard,
        ))
        .with_state(state);
    // The query form without JavaScript: a refused query is answered 422 with the form page
    // and its reason, rendered by this same router (see `form_error_page`).
    let pages = app.clone();
    app.layer(axum::middleware::from_fn(move |req, next| {
        form_error_page(pages.clone(), req, next)
    }))
    .merge(extra)
    // Cross-site POSTs to the admin side and the server functions are refused here,
    // before any handler (see crate::admin::same_origin).
    .layer(axum::middleware::from_fn(crate::admin::same_origin_guard))
    .layer(RequestBodyLimitLayer::new(limits.body_bytes))
    .layer(TimeoutLayer::with_status_code(
        StatusCode::SERVICE_UNAVAILABLE,
        limits.timeout,
    ))
    .layer(axum::middleware::from_fn(crate::security::headers))
    // A panic in a handler is one failed request (500), not a dead process.
    .layer(CatchPanicLayer::custom(crate::security::panic_response))
    .layer(TraceLayer::new_for_http())
}

/// A plain HTML form post of the query form (no JavaScript) that the server function refused
/// comes back from Leptos as a redirect to the form with the error in the URL
/// (`/?__path=..&__err=..`), i.e. a 302 and then a 200 page. A user's mistake must be a 4xx:
/// so this renders that same form page (with the reason, read from those parameters) right
/// away and answers it with 422. The browser stays at the server function's URL; the form on
/// the page posts to it again as usual. Only the query form's function is rewritten: the
/// admin forms keep post/redirect/get.
///
/// Leptos puts the reason into the URL of the `Referer`; a post without one (a browser with
/// referrers turned off, `curl`) would get a bare redirect to `/` and lose the reason. Such a
/// post is given the form's own page as its `Referer` (see [`own_form_page`]), so it gets the
/// same 422 page.
async fn form_error_page(
    pages: Router,
    mut req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::http::{header, Method, Request};
    use leptos::server_fn::ServerFn;
    use tower::ServiceExt;
    let form_post = req.method() == Method::POST
        && req.uri().path() == <app::pages::SubmitQuery as ServerFn>::PATH
        && req
            .headers()
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("text/html"));
    if !form_post {
        return next.run(req).await;
    }
    let nonce = req.extensions().get::<crate::security::CspNonce>().cloned();
    let host = req.headers().get(header::HOST).cloned();
    if !req.headers().contains_key(header::REFERER) {
        req.headers_mut()
            .insert(header::REFERER, own_form_page(host.as_ref()));
    }
    let res = next.run(req).await;
    let error_query = res
        .status()
        .is_redirection()
        .then(|| res.headers().get(header::LOCATION))
        .flatten()
        .and_then(|l| l.to_str().ok())
        .and_then(|l| l.split_once('?').map(|(_, q)| q.to_string()))
        .filter(|q| q.split('&').any(|p| p.starts_with("__err=")));
    let Some(query) = error_query else {
        return res;
    };
    let mut get = Request::builder()
        .method(Method::GET)
        .uri(format!("/?{query}"))
        .header(header::ACCEPT, "text/html");
    if let Some(host) = host {
        get = get.header(header::HOST, host);
    }
    let Ok(mut get) = get.body(axum::body::Body::empty()) else {
        return res;
    };
    if let Some(nonce) = nonce {
        get.extensions_mut().insert(nonce);
    }
    match pages.oneshot(get).await {
        Ok(mut page) if page.status().is_success() => {
            *page.status_mut() = StatusCode::UNPROCESSABLE_ENTITY;
            page
        }
        _ => res,
    }
}

/// The query form's page, `/`, as an absolute URL (Leptos adds the error to the `Referer` only
/// when it parses as one): on the request's own host (a plain `host[:port]`), or a placeholder
/// host when it has no usable one. Only its path and query are ever used: the page is rendered
/// right here, and a redirect to it that got out anyway names our host or is cut to its path
/// (`crate::security::own_location`).
fn own_form_page(host: Option<&axum::http::HeaderValue>) -> axum::http::HeaderValue {
    use axum::http::HeaderValue;
    host.and_then(|h| h.to_str().ok())
        .filter(|h| !h.contains('@') && h.parse::<axum::http::uri::Authority>().is_ok())
        .and_then(|h| HeaderValue::from_str(&format!("http://{h}/")).ok())
        .unwrap_or_else(|| HeaderValue::from_static("http://localhost/"))
}

/// Liveness: the process is up and serving HTTP.
async fn healthz() -> &'static str {
    "ok"
}

/// Readiness: Redis answers PING within a second, and no queue this process serves was
/// repartitioned under it (it accepts nothing until restarted: the reason says so, for an
/// orchestrator to restart it).
async fn readyz(State(state): State<WebState>) -> impl IntoResponse {
    if state
        .app
        .queues()
        .any(|(_, q)| q.layout_changed().is_some())
    {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "queue layout changed (repartitioned): restart this process",
        );
    }
    let mut conn = state.app.queue.connection();
    let ping = tokio::time::timeout(
        Duration::from_secs(1),
        redis::cmd("PING").query_async::<String>(&mut conn),
    )
    .await;
    match ping {
        Ok(Ok(_)) => (StatusCode::OK, "ready"),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "readiness: redis error");
            (StatusCode::SERVICE_UNAVAILABLE, "redis unavailable")
        }
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "redis timeout"),
    }
}

/// `/metrics` behind a check: queue depths and worker counts are operational facts, not for
/// anonymous visitors. Loopback clients (a local Prometheus agent, `curl` on the host) are
/// let in; others need `Authorization: Bearer <REPOLL_METRICS_TOKEN>`; without a token
/// configured, only loopback.
pub fn guarded_metrics(metrics: Router, state: WebState) -> Router {
    metrics.layer(axum::middleware::from_fn_with_state(state, metrics_guard))
}

async fn metrics_guard(
    State(state): State<WebState>,
    ClientIp(client): ClientIp,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let loopback = client.is_some_and(|ip| ip.is_loopback());
    let bearer = req
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let token_ok = match (&state.api.metrics_token, bearer) {
        (Some(want), Some(given)) => constant_time_eq(want.as_bytes(), given.as_bytes()),
        _ => false,
    };
    if loopback || token_ok {
        next.run(req).await
    } else {
        (
            StatusCode::UNAUTHORIZED,
            [(axum::http::header::WWW_AUTHENTICATE, "Bearer")],
            "metrics need a bearer token (REPOLL_METRICS_TOKEN)",
        )
            .into_response()
    }
}

/// Equal without an early exit on the first differing byte (the length may show).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn the_form_page_is_on_our_own_host_or_a_placeholder() {
        let page = |h: Option<&str>| {
            own_form_page(h.map(HeaderValue::from_str).transpose().unwrap().as_ref())
        };
        assert_eq!(page(Some("127.0.0.1:3000")), "http://127.0.0.1:3000/");
        assert_eq!(page(Some("repoll.example")), "http://repoll.example/");
        for odd in [
            None,
            Some("evil.example@ours"),
            Some("a b"),
            Some("x/y"),
            Some(""),
        ] {
            assert_eq!(page(odd), "http://localhost/", "{odd:?}");
        }
    }
}
