//! `repoll serve`: start (or connect to) Redis, build the router, serve until a signal, then
//! drain in order — stop accepting, let open requests finish within the grace period, and
//! only then stop the managed Redis so nothing in flight loses its connection.

use std::time::Duration;

use app::context::AppContext;

use crate::{
    cli::ServeArgs,
    managed_redis::ManagedRedis,
    shutdown,
    web::{self, Limits, WebState},
};

/// Errors that end `repoll serve`.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    ManagedRedis(#[from] crate::managed_redis::ManagedRedisError),
    #[error("cannot connect to Redis at {url}: {source}")]
    Redis {
        url: String,
        source: queue::redis::RedisError,
    },
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("server error: {0}")]
    Io(#[from] std::io::Error),
}

/// Runs the web app until SIGINT/SIGTERM.
pub async fn run(args: ServeArgs) -> Result<(), ServeError> {
    let shutdown = shutdown::on_signal();
    let managed = match &args.redis.redis_url {
        Some(_) => None,
        None => Some(
            ManagedRedis::start(
                &args.redis.redis_server_bin,
                &args.redis.managed_redis_dir,
                args.redis.managed_redis_port,
            )
            .await?,
        ),
    };
    let url = match (&args.redis.redis_url, &managed) {
        (Some(url), _) => url.clone(),
        (None, Some(m)) => m.url().to_string(),
        (None, None) => unreachable!("managed redis is started when no URL is given"),
    };
    let outcome = serve_with(&args, &url, shutdown).await;
    if let Some(m) = managed {
        m.stop().await;
    }
    outcome
}

async fn serve_with(
    args: &ServeArgs,
    url: &str,
    shutdown: tokio_util::sync::CancellationToken,
) -> Result<(), ServeError> {
    let redis_err = |source| ServeError::Redis {
        url: redact(url),
        source,
    };
    let redis = queue::connect(url).await.map_err(redis_err)?;
    let state = WebState {
        leptos_options: web::leptos_options(&args.site_root),
        app: AppContext {
            redis,
            queue_name: args.redis.queue.clone(),
        },
    };
    let router = web::router(
        state,
        Limits {
            body_bytes: args.body_limit,
            timeout: Duration::from_millis(args.request_timeout_ms),
        },
    );
    let listener = tokio::net::TcpListener::bind(args.addr)
        .await
        .map_err(|source| ServeError::Bind {
            addr: args.addr,
            source,
        })?;
    tracing::info!("listening on http://{}", args.addr);

    let graceful = shutdown.clone();
    let server = axum::serve(listener, router).with_graceful_shutdown(async move {
        graceful.cancelled().await;
    });
    // Long-lived responses (live streams) would hold a graceful shutdown open forever, so the
    // drain is bounded by the grace period.
    let grace = Duration::from_millis(args.shutdown_grace_ms);
    tokio::select! {
        r = server => r?,
        _ = async { shutdown.cancelled().await; tokio::time::sleep(grace).await } => {
            tracing::warn!(?grace, "connections still open after the grace period; closing them");
        }
    }
    Ok(())
}

/// Hides a password in a Redis URL before it reaches a log or an error message.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            format!("{}://***{}", &url[..scheme_end], &url[at..])
        }
        _ => url.to_string(),
    }
}
