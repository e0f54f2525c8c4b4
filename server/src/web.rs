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
pub use crate::state::{ClientIp, WebParts, WebState};

use tower_http::{catch_panic::CatchPanicLayer, timeout::TimeoutLayer, trace::TraceLayer};

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
    // What every rendered page gets, the routed ones and the 404 page alike (one closure, so
    // the not-found page's scripts carry the nonce its CSP names, as every other page's do).
    let context = move || {
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
    };
    // The JSON API and the probes: no page, form or server function among them, so none of
    // the pages' layers below (each a no-op for these paths, but each a boxed service clone
    // and a boxed future per request) stands between them and the shared layers.
    let direct = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .merge(crate::api::router())
        .with_state(state.clone())
        .merge(extra);
    let pages = Router::new()
        .merge(crate::admin::router())
        .merge(crate::theme::router())
        .leptos_routes_with_context(&state, routes, context.clone(), move || {
            shell(options.clone())
        })
        .fallback(static_files_or_not_found(context))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::admin::page_guard,
        ))
        .with_state(state);
    // The query form without JavaScript: a refused query is answered 422 with the form page
    // and its reason, rendered by this same router (see `form_error_page`).
    let form_pages = pages.clone();
    let pages = pages
        .layer(axum::middleware::from_fn(move |req, next| {
            form_error_page(form_pages.clone(), req, next)
        }))
        .layer(axum::middleware::from_fn(server_fn_argument_errors))
        // Cross-site POSTs to the admin side and the server functions are refused here,
        // before any handler (see crate::admin::same_origin).
        .layer(axum::middleware::from_fn(crate::admin::same_origin_guard));
    direct
        .merge(pages)
        // REPOLL_BODY_LIMIT, for every route without a limit of its own (crate::body_limit).
        .layer(axum::middleware::from_fn_with_state(
            limits.body_bytes,
            crate::body_limit::limit,
        ))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            limits.timeout,
        ))
        .layer(axum::middleware::from_fn(crate::security::headers))
        // A panic in a handler is one failed request (500), not a dead process.
        .layer(CatchPanicLayer::custom(crate::security::panic_response))
        // The request's server span, a child of the caller's traceparent (crate::traces).
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(crate::traces::request_span)
                .on_response(crate::traces::record_response),
        )
}

/// The fallback: a file of the site root (the wasm, styles, images) or the app's 404 page.
///
/// A path no file of ours can have — longer than [`FILE_PATH_MAX`] bytes — never reaches the
/// file system: the OS answers such a name with "File name too long", which the file service
/// logged as an ERROR per request (an anonymous log flood). It gets the same 404 page, quietly.
fn static_files_or_not_found(
    context: impl Fn() + Clone + Send + 'static,
) -> impl Fn(
    axum::http::Uri,
    State<WebState>,
    axum::extract::Request,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = axum::response::Response> + Send>>
       + Clone
       + Send
       + 'static {
    let files = leptos_axum::file_and_error_handler_with_context::<WebState, _>(context, shell);
    move |uri: axum::http::Uri, state: State<WebState>, req: axum::extract::Request| {
        // The page is rendered from `req` (its real path); only the file lookup is given a
        // name that cannot exist.
        let lookup = if uri.path().len() > FILE_PATH_MAX {
            axum::http::Uri::from_static(NO_SUCH_FILE)
        } else {
            uri
        };
        files(lookup, state, req)
    }
}

/// The longest path looked up as a file: ours are far shorter (`/pkg/repoll.wasm`), and a
/// file name's limit (NAME_MAX) is 255 bytes.
const FILE_PATH_MAX: usize = 255;

/// Where a too-long path's file lookup is sent instead: a name the site root never holds.
const NO_SUCH_FILE: &str = "/.repoll-no-such-file";

/// The most bytes of a query form post read by [`form_error_page`]: a query is at most 512
/// characters (percent-encoded, 12 bytes each at worst) and an upstream's name.
const FORM_BYTES_MAX: usize = 64 * 1024;

/// The most characters of a refused query put back into the form: a too-long one comes back
/// whole enough to be shortened, and its page's URL stays well inside a URI's 64 KiB.
const KEPT_CHARS: usize = 2048;

/// A plain HTML form post of the query form (no JavaScript) that the server function refused
/// comes back from Leptos as a redirect to the form with the error in the URL
/// (`/?__path=..&__err=..`), i.e. a 302 and then a 200 page. A user's mistake must be a 4xx:
/// so this renders that same form page (with the reason, read from those parameters) right
/// away and answers it with 422, the refused text back in its input (`?query=`, at most
/// [`KEPT_CHARS`] of it) to be corrected rather than typed again — as a server-rendered form
/// answers a refused post (Rails' and Django's 422). The browser stays at the server
/// function's URL; the form on the page posts to it again as usual. Only the query form's
/// function is rewritten: the admin forms keep post/redirect/get.
///
/// Leptos puts the reason into the URL of the `Referer`; a post without one (a browser with
/// referrers turned off, `curl`) would get a bare redirect to `/` and lose the reason. Such a
/// post is given the form's own page as its `Referer` (see [`own_page`]), so it gets the
/// same 422 page. An admin form posted without one is given its admin page
/// ([`admin_form_page`]) the same way, so it goes back there rather than to the query page.
async fn form_error_page(
    pages: Router,
    mut req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::http::{header, Method, Request};
    use leptos::server_fn::ServerFn;
    use tower::ServiceExt;
    let html_post = req.method() == Method::POST
        && req
            .headers()
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("text/html"));
    let host = req.headers().get(header::HOST).cloned();
    let path = req.uri().path().to_string();
    // An admin form posted without a `Referer` goes back to the admin page it belongs to,
    // not to `/` (Leptos's default), with its error or its flash message.
    if html_post && !req.headers().contains_key(header::REFERER) {
        if let Some(page) = admin_form_page(&path) {
            req.headers_mut()
                .insert(header::REFERER, own_page(host.as_ref(), page));
        }
    }
    let form_post = html_post && path == <app::pages::SubmitQuery as ServerFn>::PATH;
    if !form_post {
        return next.run(req).await;
    }
    let nonce = req.extensions().get::<crate::security::CspNonce>().cloned();
    if !req.headers().contains_key(header::REFERER) {
        req.headers_mut()
            .insert(header::REFERER, own_page(host.as_ref(), "/"));
    }
    // The form's text is read here and the same bytes handed on to the server function.
    let (parts, body) = req.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, FORM_BYTES_MAX).await else {
        return (
            StatusCode::PAYLOAD_TOO_LARGE,
            "The form is larger than a query form can be.",
        )
            .into_response();
    };
    let kept: Option<String> = form_urlencoded::parse(&bytes)
        .find(|(name, _)| name == "query")
        .map(|(_, text)| text.chars().take(KEPT_CHARS).collect());
    let res = next
        .run(Request::from_parts(parts, axum::body::Body::from(bytes)))
        .await;
    let error_query = res
        .status()
        .is_redirection()
        .then(|| res.headers().get(header::LOCATION))
        .flatten()
        .and_then(|l| l.to_str().ok())
        .and_then(|l| l.split_once('?').map(|(_, q)| q.to_string()))
        .filter(|q| q.split('&').any(|p| p.starts_with("__err=")));
    let Some(mut query) = error_query else {
        return res;
    };
    if let Some(text) = kept {
        query.push('&');
        query.push_str(
            &form_urlencoded::Serializer::new(String::new())
                .append_pair("query", &text)
                .finish(),
        );
    }
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

/// The admin page a server function's form is posted from: sign-in and sign-out belong to
/// the sign-in page, bulk actions to `/admin/bulk`, every other admin function to `/admin`;
/// None for a function that is not the admin side's.
fn admin_form_page(fn_path: &str) -> Option<&'static str> {
    use app::pages::admin::{
        bulk::BulkAct,
        login::{SignIn, SignOut},
    };
    use leptos::server_fn::ServerFn;
    if fn_path == SignIn::PATH || fn_path == SignOut::PATH {
        Some("/admin/login")
    } else if fn_path == BulkAct::PATH {
        Some("/admin/bulk")
    } else if fn_path.starts_with(app::auth::ADMIN_FN_PREFIX) {
        Some("/admin")
    } else {
        None
    }
}

/// Our page `path` as an absolute URL (Leptos adds an error to the `Referer` only when it
/// parses as one): on the request's own host (a plain `host[:port]`), or a placeholder host
/// when it has no usable one. Only its path and query are ever used: the query form's page is
/// rendered right here, and a redirect that gets out names our host or is cut to its path
/// (`crate::security::own_location`).
fn own_page(host: Option<&axum::http::HeaderValue>, path: &str) -> axum::http::HeaderValue {
    use axum::http::HeaderValue;
    let host = host
        .and_then(|h| h.to_str().ok())
        .filter(|h| !h.contains('@') && h.parse::<axum::http::uri::Authority>().is_ok())
        .unwrap_or("localhost");
    HeaderValue::from_str(&format!("http://{host}{path}"))
        .unwrap_or_else(|_| HeaderValue::from_static("http://localhost/"))
}

/// A server function called with missing or malformed arguments is the client's mistake, yet
/// Leptos answers it 500 (`Args|…`, `MissingArg|…`, `Deserialization|…` as plain text, marked
/// with its `serverfnerror` header) — which would page whoever watches the 5xx rate. Such an
/// answer becomes 400 with the API's error shape (`bad_request`). Every other answer passes
/// untouched; a form post without JavaScript gets its redirect back to the form as before.
async fn server_fn_argument_errors(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use leptos::server_fn::error::SERVER_FN_ERROR_HEADER;
    let res = next.run(req).await;
    if res.status() != StatusCode::INTERNAL_SERVER_ERROR
        || !res.headers().contains_key(SERVER_FN_ERROR_HEADER)
    {
        return res;
    }
    let (parts, body) = res.into_parts();
    // An error's text is short; a body that is not is not one of these.
    let Ok(bytes) = axum::body::to_bytes(body, 64 * 1024).await else {
        return crate::api::ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            crate::api::ErrorCode::Internal,
            "internal error",
        )
        .into_response();
    };
    if is_argument_error(&bytes) {
        return crate::api::ApiError::new(
            StatusCode::BAD_REQUEST,
            crate::api::ErrorCode::BadRequest,
            "missing or malformed arguments",
        )
        .into_response();
    }
    axum::response::Response::from_parts(parts, axum::body::Body::from(bytes))
}

/// Whether a server function's error body says its arguments could not be read.
fn is_argument_error(body: &[u8]) -> bool {
    [b"Args|".as_slice(), b"MissingArg|", b"Deserialization|"]
        .iter()
        .any(|p| body.starts_with(p))
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
/// anonymous visitors. See [`metrics_allowed`] for who may read them.
pub fn guarded_metrics(metrics: Router, state: WebState) -> Router {
    metrics.layer(axum::middleware::from_fn_with_state(state, metrics_guard))
}

async fn metrics_guard(
    State(state): State<WebState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    // The socket's peer, and the client by the one rule of `app::client` (the address a
    // trusted proxy appended, under REPOLL_TRUST_FORWARDED): a loopback peer behind a proxy
    // on the same host says nothing about the client.
    let peer = req
        .extensions()
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0.ip());
    let client = app::client::client_ip(req.headers(), peer, state.api.trust_forwarded);
    let bearer = req
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token);
    if metrics_allowed(state.api.metrics_token.as_deref(), bearer, peer, client) {
        next.run(req).await
    } else {
        crate::refusals::refused(
            "metrics_unauthorized",
            "no valid bearer token, and not a loopback client",
            req.uri().path(),
        );
        (
            StatusCode::UNAUTHORIZED,
            [(axum::http::header::WWW_AUTHENTICATE, "Bearer")],
            "metrics need the bearer token (REPOLL_METRICS_TOKEN), or without one a loopback client",
        )
            .into_response()
    }
}

/// The token of an `Authorization: Bearer <token>` value. The scheme is case-insensitive
/// (RFC 9110 §11.1: `bearer`, `BEARER` are the same scheme).
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim_start_matches(' '))
}

/// Who may read `/metrics`. With a token configured (REPOLL_METRICS_TOKEN): whoever sends it,
/// and nobody else — loopback clients included, since a reverse proxy on the same host makes
/// every client a loopback one. Without a token: a client on this host only (a Prometheus
/// agent or `curl`): the socket peer must be loopback, and so must the `client` a trusted
/// proxy names (with REPOLL_TRUST_FORWARDED a remote client behind a local proxy is remote).
/// `peer` must be the socket's, never a forwarded address.
pub fn metrics_allowed(
    token: Option<&str>,
    bearer: Option<&str>,
    peer: Option<std::net::IpAddr>,
    client: Option<std::net::IpAddr>,
) -> bool {
    let local = |ip: Option<std::net::IpAddr>| ip.is_some_and(|ip| ip.to_canonical().is_loopback());
    match token {
        Some(want) => {
            bearer.is_some_and(|given| constant_time_eq(want.as_bytes(), given.as_bytes()))
        }
        None => local(peer) && local(client),
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
            own_page(
                h.map(HeaderValue::from_str).transpose().unwrap().as_ref(),
                "/",
            )
        };
        assert_eq!(page(Some("127.0.0.1:3000")), "http://127.0.0.1:3000/");
        assert_eq!(page(Some("repoll.example")), "http://repoll.example/");
        assert_eq!(
            own_page(Some(&HeaderValue::from_static("h:1")), "/admin/login"),
            "http://h:1/admin/login"
        );
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

    /// `/metrics` with a token: the token, for every client, loopback too (a proxy on the same
    /// host makes every client loopback). Without: a loopback socket peer only — the peer is
    /// the socket's, so a forwarded `127.0.0.1` from another host never counts.
    #[test]
    fn metrics_need_the_token_when_there_is_one_else_a_loopback_peer() {
        let lo = Some(std::net::IpAddr::from([127, 0, 0, 1]));
        let lo6 = Some("::1".parse().unwrap());
        let mapped = Some("::ffff:127.0.0.1".parse().unwrap());
        let far = Some(std::net::IpAddr::from([10, 0, 0, 13]));
        let token = Some("s3cret");
        assert!(metrics_allowed(token, Some("s3cret"), far, far));
        assert!(metrics_allowed(token, Some("s3cret"), lo, lo));
        assert!(!metrics_allowed(token, None, lo, lo));
        assert!(!metrics_allowed(token, Some("s3cre"), lo, lo));
        assert!(!metrics_allowed(token, Some("s3cret "), far, far));
        for peer in [lo, lo6, mapped] {
            assert!(metrics_allowed(None, None, peer, peer), "{peer:?}");
        }
        assert!(!metrics_allowed(None, None, far, far));
        assert!(!metrics_allowed(None, Some("anything"), far, far));
        assert!(!metrics_allowed(None, None, None, None));
        // Behind a trusted proxy on this host: the peer is loopback, the client is not.
        assert!(!metrics_allowed(None, None, lo, far));
    }

    /// `Authorization` schemes are case-insensitive; the token is what follows the space.
    #[test]
    fn the_bearer_scheme_is_read_in_any_case() {
        for v in ["Bearer t0k", "bearer t0k", "BEARER t0k", "Bearer  t0k"] {
            assert_eq!(bearer_token(v), Some("t0k"), "{v}");
        }
        for v in ["Basic t0k", "Bearert0k", "t0k", ""] {
            assert_eq!(bearer_token(v), None, "{v}");
        }
    }

    /// With REPOLL_TRUST_FORWARDED, a remote client named by the proxy is refused without the
    /// token, though the proxy's own connection is loopback; a loopback-named one is let in.
    #[test]
    fn a_forwarded_remote_client_is_refused_without_the_token() {
        let mut h = axum::http::HeaderMap::new();
        h.insert("x-forwarded-for", HeaderValue::from_static("1.2.3.4"));
        let lo = Some(std::net::IpAddr::from([127, 0, 0, 1]));
        let client = app::client::client_ip(&h, lo, true);
        assert!(!metrics_allowed(None, None, lo, client));
        let untrusted = app::client::client_ip(&h, lo, false);
        assert!(metrics_allowed(None, None, lo, untrusted));
        h.insert("x-forwarded-for", HeaderValue::from_static("127.0.0.1"));
        assert!(metrics_allowed(
            None,
            None,
            lo,
            app::client::client_ip(&h, lo, true)
        ));
    }
}
