//! The axum router of `repoll serve`.
//!
//! [`router`] is a plain function of [`WebState`] so tests drive it with
//! `tower::ServiceExt::oneshot` exactly as the server runs it.

use std::time::Duration;

use app::{context::AppContext, shell, App};
use axum::{
    extract::{FromRef, State},
    http::StatusCode,
    response::IntoResponse,
    routing::get,
    Router,
};
use leptos::prelude::*;
use leptos_axum::{generate_route_list, LeptosRoutes};
use tower_http::{limit::RequestBodyLimitLayer, timeout::TimeoutLayer, trace::TraceLayer};

/// Everything a request handler may need.
#[derive(Clone, FromRef)]
pub struct WebState {
    pub leptos_options: LeptosOptions,
    pub app: AppContext,
    /// Fan-out of the queue's Pub/Sub notifications to live streams.
    pub live: crate::live::Live,
    /// Public API settings and state (rate limiter, ...).
    pub api: crate::api::ApiState,
    /// Admin settings and state (credentials, sessions, ...).
    pub admin: crate::admin::AdminState,
}

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

/// Builds the whole application router. `extra` is merged in before the layers, so extra
/// routes (metrics) get the same tracing and limits.
pub fn router(state: WebState, limits: Limits, extra: Router) -> Router {
    let routes = generate_route_list(App);
    let ctx = state.app.clone();
    // The query page's submit server function shares the API's per-client buckets.
    let gate = state.api.limiter.clone().map(|limiter| {
        app::context::SubmitGate(std::sync::Arc::new(
            move |parts: &axum::http::request::Parts| limiter.check_parts(parts),
        ))
    });
    let options = state.leptos_options.clone();
    Router::new()
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
            },
            move || shell(options.clone()),
        )
        .fallback(leptos_axum::file_and_error_handler::<WebState, _>(shell))
        .with_state(state)
        .merge(extra)
        // Cross-site POSTs to the admin side and the server functions are refused here,
        // before any handler (see crate::admin::same_origin).
        .layer(axum::middleware::from_fn(crate::admin::same_origin_guard))
        .layer(RequestBodyLimitLayer::new(limits.body_bytes))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            limits.timeout,
        ))
        .layer(TraceLayer::new_for_http())
}

/// Liveness: the process is up and serving HTTP.
async fn healthz() -> &'static str {
    "ok"
}

/// Readiness: Redis answers PING within a second.
async fn readyz(State(state): State<WebState>) -> impl IntoResponse {
    let mut conn = state.app.queue.connection();
    let ping = tokio::time::timeout(
        Duration::from_secs(1),
        queue::redis::cmd("PING").query_async::<String>(&mut conn),
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
