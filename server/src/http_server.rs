//! The HTTP accept loop of `repoll serve`, with the limits `axum::serve` does not have.
//!
//! Why not `axum::serve`: it sets no header-read timeout, no idle timeout and no connection
//! cap, and leaves Nagle on. Measured against it: 1,000 half-sent requests held 1,019
//! descriptors for as long as the client liked and `/healthz` took 9.8 s; a kept-alive
//! `GET /` waited ~40 ms for the client's delayed ACK on every page. So this loop:
//!
//! - caps open connections ([`ConnLimits::max_connections`], never more than the process's
//!   descriptor limit allows, which is raised to its hard limit at start). Over the cap a
//!   connection gets a short JSON 503 and is closed, so the listener never spins on
//!   "too many open files" and `/healthz` keeps answering;
//! - gives every connection [`ConnLimits::header_timeout`] to send a request's headers,
//!   counted from the connection's start and again from the end of each response, so it is
//!   also the idle keep-alive timeout (hyper's `header_read_timeout`, which runs whenever the
//!   connection waits for a request head);
//! - sets `TCP_NODELAY`, so a response's last small write is not held back;
//! - speaks HTTP/1.1 only: browsers reach repoll directly over plain HTTP (HTTP/2 needs TLS)
//!   or through a proxy, and HTTP/1 keeps one request per connection under the caps above;
//! - drains on shutdown: stops accepting, lets open requests finish within the grace period;
//! - lets only requests whose target is a path reach the app ([`routable_target`]): an
//!   authority-form (`CONNECT host:port`, `POST host:port`) or asterisk-form (`OPTIONS *`)
//!   request line is answered 400 and counted (`repoll_bad_request_lines_total`), nothing
//!   logged. Why: Leptos's handlers unwrap the target's path and panicked on those, one 500
//!   and a backtrace in the log per request, an anonymous log flood;
//! - closes a connection on request ([`ConnCloser`]): a live stream whose reader stopped
//!   taking events is dropped at once, with what it had not sent.

use std::{
    os::fd::AsRawFd,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use axum::{
    extract::ConnectInfo,
    http::{header, HeaderValue, StatusCode, Uri},
    response::{IntoResponse, Response},
    Router,
};
use hyper::body::Incoming;
use hyper_util::{
    rt::{TokioIo, TokioTimer},
    server::graceful::GracefulShutdown,
    service::TowerToHyperService,
};
use tokio::{io::AsyncWriteExt, net::TcpListener, sync::Semaphore};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// Descriptors kept free for everything that is not an HTTP connection (Redis, the upstream
/// client, files, the simulator).
const RESERVED_FDS: u64 = 256;

/// Over-cap refusals written at once; beyond this a connection is simply closed.
const MAX_REFUSALS_IN_FLIGHT: usize = 64;

/// The connection limits (see the module doc).
#[derive(Clone, Copy, Debug)]
pub struct ConnLimits {
    pub max_connections: usize,
    pub header_timeout: Duration,
}

/// Counters the tests and `/metrics` read.
#[derive(Default, Debug)]
pub struct ConnStats {
    pub refused: AtomicU64,
    /// Requests answered 400 for a target that is not a path ([`routable_target`]).
    pub bad_request_lines: AtomicU64,
}

/// The counter of connections refused because the connection cap was reached.
pub const CONNECTIONS_REFUSED_METRIC: &str = "repoll_connections_refused_total";

/// The counter of request lines refused by [`routable_target`].
pub const BAD_REQUEST_LINES_METRIC: &str = "repoll_bad_request_lines_total";

// The handle a request gets to close its own connection (below the routes, so a handler can
// take it without importing the accept loop).
pub use crate::conn::ConnCloser;

/// Whether a request's target can reach the app: origin-form (`/path?query`) or absolute-form
/// (`http://host/path`, which HTTP/1.1 servers must accept; its path is used). Not the
/// authority-form (`host:port`, for CONNECT to a proxy) or the asterisk-form (`*`, OPTIONS of
/// the server as a whole): they name no resource here, and Leptos's handlers panicked on
/// them.
pub fn routable_target(uri: &Uri) -> bool {
    uri.path_and_query()
        .is_some_and(|pq| pq.as_str().starts_with('/'))
}

/// The answer to a request whose target is not a path: a JSON 400 that closes the
/// connection (a client that sends such lines is not one to keep talking to).
fn bad_request_line() -> Response {
    let body = crate::api::ErrorBody::new(
        crate::api::ErrorCode::BadRequest,
        "the request target must be a path (origin-form, e.g. GET /path HTTP/1.1)",
    )
    .to_json();
    let mut res = (
        StatusCode::BAD_REQUEST,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response();
    res.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    res
}

/// Raises the soft descriptor limit to the hard one (what servers usually do: the soft
/// default of 1,024 is a historical value), and returns the soft limit now in force.
pub fn raise_fd_limit() -> u64 {
    // SAFETY: getrlimit/setrlimit only read/write the struct we pass.
    unsafe {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 1024;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim.rlim_cur = lim.rlim_max;
            }
        }
        lim.rlim_cur
    }
}

/// The connection cap to use: the configured one, but never more than the descriptors left
/// after [`RESERVED_FDS`] (and at least 16).
pub fn effective_max_connections(configured: usize, fd_limit: u64) -> usize {
    let room = fd_limit.saturating_sub(RESERVED_FDS).max(16);
    configured
        .min(usize::try_from(room).unwrap_or(usize::MAX))
        .max(1)
}

/// Serves `router` on `listener` until `shutdown`, then drains for up to `grace`.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnLimits,
    stats: Arc<ConnStats>,
    shutdown: CancellationToken,
    grace: Duration,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let refusals = Arc::new(Semaphore::new(MAX_REFUSALS_IN_FLIGHT));
    let graceful = GracefulShutdown::new();
    // 0 until something happens, so an alert on it has a series from the start.
    metrics::counter!(BAD_REQUEST_LINES_METRIC).increment(0);
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);

    loop {
        let (stream, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // Per-connection errors (the client reset before we accepted) are routine;
                    // anything else (out of descriptors) gets a pause instead of a hot loop.
                    if !is_connection_error(&e) {
                        tracing::warn!(error = %e, "accept failed; pausing");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    continue;
                }
            },
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            stats.refused.fetch_add(1, Ordering::Relaxed);
            metrics::counter!(CONNECTIONS_REFUSED_METRIC).increment(1);
            if let Ok(turn) = refusals.clone().try_acquire_owned() {
                tokio::spawn(async move {
                    refuse(stream).await;
                    drop(turn);
                });
            }
            continue;
        };
        let _ = stream.set_nodelay(true);
        let fd = stream.as_raw_fd();
        let closer = ConnCloser::default();
        let service = {
            let (router, stats, closer) = (router.clone(), stats.clone(), closer.clone());
            tower::service_fn(move |mut req: axum::http::Request<Incoming>| {
                let router = router.clone();
                let routable = routable_target(req.uri());
                if !routable {
                    stats.bad_request_lines.fetch_add(1, Ordering::Relaxed);
                    metrics::counter!(BAD_REQUEST_LINES_METRIC).increment(1);
                }
                req.extensions_mut().insert(ConnectInfo(peer));
                req.extensions_mut().insert(closer.clone());
                async move {
                    if !routable {
                        return Ok(bad_request_line());
                    }
                    router.oneshot(req).await
                }
            })
        };
        let conn = http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            {
                let mut conn = std::pin::pin!(conn);
                tokio::select! {
                    ended = conn.as_mut() => {
                        if let Err(e) = ended {
                            tracing::debug!(error = %e, %peer, "connection ended with an error");
                        }
                    }
                    _ = closer.closed() => {
                        // The connection is still open (`conn` owns it until the end of this
                        // block), so the descriptor is still this socket's.
                        discard_unsent_on_close(fd);
                    }
                }
            }
            // The socket is closed: its place is free.
            drop(slot);
        });
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(grace) => {
            // Long-lived responses (live streams) would hold a drain open forever.
            tracing::warn!(?grace, "connections still open after the grace period; closing them");
        }
    }
    Ok(())
}

/// The answer of a connection over the cap: a complete, tiny JSON 503, then close. Bounded in
/// time, so a client that never reads cannot hold the refusal open.
async fn refuse(mut stream: tokio::net::TcpStream) {
    let body = crate::api::ErrorBody::new(
        crate::api::ErrorCode::Overloaded,
        "too many open connections; try again shortly",
    )
    .to_json();
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         retry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        stream.write_all(response.as_bytes()).await?;
        stream.shutdown().await
    })
    .await;
}

/// `SO_LINGER` 0 on `fd`: closing it then resets the connection and frees its send buffer at
/// once, instead of the kernel trying (for minutes, to a reader that does not read) to
/// deliver what was queued.
fn discard_unsent_on_close(fd: std::os::fd::RawFd) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: `fd` is an open socket owned by the connection the caller still holds; the call
    // only reads the struct we pass.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            std::ptr::addr_of!(linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

fn is_connection_error(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_leaves_room_for_everything_else() {
        assert_eq!(effective_max_connections(4096, 1024), 768);
        assert_eq!(effective_max_connections(4096, 1_000_000), 4096);
        assert_eq!(effective_max_connections(4096, 10), 16);
    }
}
