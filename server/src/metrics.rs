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

/// Installs the recorder (see [`worker::install_prometheus`]) and serves `GET /metrics` on `addr`
/// until the task is dropped, for `repoll worker --metrics-addr`.
pub async fn serve_metrics(addr: SocketAddr) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "metrics on /metrics");
    axum::serve(listener, metrics_router(worker::install_prometheus())).await
}
