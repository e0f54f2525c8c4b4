//! `GET /metrics`: what the worker's Prometheus recorder ([`worker::install_prometheus`])
//! renders, mounted in `repoll serve`'s router (behind its guard) or, for `repoll worker
//! --metrics-addr`, on a listener of its own.

use std::net::SocketAddr;

use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;

/// `GET /metrics` in Prometheus text format, for mounting in a web server.
pub fn metrics_router(handle: PrometheusHandle) -> axum::Router {
    axum::Router::new().route(
        "/metrics",
        get(move || {
            let handle = handle.clone();
            async move {
                (
                    [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                    handle.render(),
                )
                    .into_response()
            }
        }),
    )
}

/// The `# HELP` line of every series the web side records (the worker's describe themselves
/// in [`worker::install_prometheus`]); after the recorder is installed.
pub fn describe_web_metrics() {
    use metrics::{describe_counter, describe_gauge};
    describe_counter!(
        crate::api::ANSWERS_METRIC,
        "Submits answered, by upstream and freshness (fresh, stale, negative, miss)."
    );
    describe_counter!(
        crate::http_server::CONNECTIONS_REFUSED_METRIC,
        "Connections refused with 503 because REPOLL_MAX_CONNECTIONS were open."
    );
    describe_counter!(
        crate::http_server::BAD_REQUEST_LINES_METRIC,
        "Requests refused for a target that names no resource (authority or asterisk form)."
    );
    describe_counter!(
        crate::refusals::REFUSED_METRIC,
        "Requests refused before any handler, by reason (cross_site, metrics_unauthorized)."
    );
    describe_gauge!(crate::live_hub::LIVE_STREAMS_METRIC, "Live streams open.");
    describe_counter!(
        crate::live_hub::DROPPED_METRIC,
        "Live streams dropped by the server, by reason (slow: the reader stopped reading)."
    );
    describe_counter!(
        crate::managed_redis::RESTARTS_METRIC,
        "Restarts of the managed redis-server."
    );
}

/// Installs the recorder (see [`worker::install_prometheus`]) and serves `GET /metrics` on `addr`
/// until the task is dropped, for `repoll worker --metrics-addr`.
pub async fn serve_metrics(addr: SocketAddr) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "metrics on /metrics");
    let handle = worker::install_prometheus();
    crate::traces::register_counters();
    axum::serve(listener, metrics_router(handle)).await
}
