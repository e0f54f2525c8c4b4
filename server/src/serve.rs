//! `repoll serve`: start (or connect to) Redis, build the router, run the embedded workers
//! and (with `--sim`) the simulated upstream, serve until a signal, then drain in order —
//! stop accepting, let workers release unfinished leases and open requests finish within the
//! grace period, and only then stop the managed Redis so nothing in flight loses its
//! connection.

use std::time::Duration;

use app::context::AppContext;
use tokio_util::sync::CancellationToken;

use crate::{
    cli::{RedisArgs, ServeArgs},
    managed_redis::{ManagedRedis, ManagedRedisError},
    shutdown, simulate,
    web::{self, Limits, WebState},
};

/// Errors that end a `repoll` command.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    ManagedRedis(#[from] ManagedRedisError),
    #[error("cannot connect to Redis at {url}: {source}")]
    Redis {
        url: String,
        source: queue::QueueError,
    },
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("invalid upstream configuration: {0}")]
    Upstream(#[from] worker::ConfigError),
    #[error("worker failed: {0}")]
    Worker(#[from] worker::WorkerError),
    #[error("{0}")]
    Config(String),
    #[error("server error: {0}")]
    Io(#[from] std::io::Error),
}

/// Runs the web app until SIGINT/SIGTERM.
pub async fn run(args: ServeArgs) -> Result<(), ServeError> {
    let shutdown = shutdown::on_signal();
    let managed = match &args.redis.redis_url {
        Some(url) if !url.is_empty() => None,
        _ if args.redis.redis_cluster => {
            return Err(ServeError::Config(
                "--redis-cluster needs REDIS_URL with the cluster's seed nodes (the managed \
                 local Redis is a single server)"
                    .into(),
            ))
        }
        _ => Some(
            ManagedRedis::start_with_password(
                &args.redis.redis_server_bin,
                &args.redis.managed_redis_dir,
                args.redis.managed_redis_port,
                args.redis.managed_redis_password.as_deref(),
            )
            .await?,
        ),
    };
    let url = match &managed {
        Some(m) => m.url().to_string(),
        None => args.redis.redis_url.clone().unwrap_or_default(),
    };
    let outcome = serve_with(&args, &url, shutdown).await;
    if let Some(m) = managed {
        m.stop().await;
    }
    outcome
}

/// Opens the queue on `url` (a cluster's seeds with --redis-cluster), with passwords hidden
/// in any error.
pub async fn open_queue(redis: &RedisArgs, url: &str) -> Result<queue::Queue, ServeError> {
    let opened = if redis.redis_cluster {
        queue::Queue::connect_cluster(&RedisArgs::seed_urls(url), redis.queue_config()).await
    } else {
        queue::Queue::connect(url, redis.queue_config()).await
    };
    opened.map_err(|source| ServeError::Redis {
        url: RedisArgs::seed_urls(url)
            .iter()
            .map(|u| redact(u))
            .collect::<Vec<_>>()
            .join(","),
        source,
    })
}

/// A Pub/Sub client for `url` (a cluster's first seed).
pub fn pubsub_client(url: &str) -> Result<queue::redis::Client, ServeError> {
    let url = RedisArgs::pubsub_url(url);
    queue::redis::Client::open(url.as_str()).map_err(|e| ServeError::Redis {
        url: redact(&url),
        source: e.into(),
    })
}

async fn serve_with(
    args: &ServeArgs,
    url: &str,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    let queue = open_queue(&args.redis, url).await?;
    let metrics = worker::install_prometheus();

    let mut background = tokio::task::JoinSet::new();
    if args.sim {
        let listener = bind(args.sim_addr).await?;
        tracing::info!("simulated upstream on http://{}", args.sim_addr);
        let stop = shutdown.clone();
        let sim_args = args.sim_args.clone();
        background.spawn(async move {
            simulate::serve(listener, sim_args, stop)
                .await
                .map_err(ServeError::from)
        });
    }
    let slots = args.workers.unwrap_or(args.worker.concurrency);
    if slots > 0 {
        let upstream = worker::Upstream::new(&args.upstream)?;
        let pubsub = pubsub_client(url)?;
        let mut wargs = args.worker.clone();
        wargs.concurrency = slots;
        // The web process promises a quick stop (SIGTERM to exit within ~2 s), so its embedded
        // workers get at most the web drain period; unfinished leases are released to due at
        // once and another worker picks them up.
        wargs.grace_ms = wargs.grace_ms.min(args.shutdown_grace_ms);
        let w = worker::Worker::new(queue.clone(), pubsub, upstream, args.policy.clone(), wargs);
        tracing::info!(worker = w.id(), slots, "embedded worker started");
        let stop = shutdown.clone();
        background.spawn(async move {
            w.run(stop.cancelled_owned()).await?;
            Ok(())
        });
    }

    let live_client = pubsub_client(url)?;
    let live = crate::live::Live::start(live_client, queue.channels().dashboard, shutdown.clone());
    let admin = crate::admin::AdminState::new(&args.admin, args.worker.heartbeat_ms)
        .map_err(ServeError::Config)?;
    let state = WebState {
        live,
        api: crate::api::ApiState::new(&args.api),
        admin: admin.clone(),
        leptos_options: web::leptos_options(&args.site_root),
        app: AppContext {
            queue,
            enqueue_policy: args.policy.enqueue_policy(),
            admin: admin.auth.clone(),
            first_answer: Duration::from_millis(args.api.first_answer_ms),
        },
    };
    let router = web::router(
        state,
        Limits {
            body_bytes: args.body_limit,
            timeout: Duration::from_millis(args.request_timeout_ms),
        },
        worker::metrics_router(metrics),
    );
    let listener = bind(args.addr).await?;
    tracing::info!("listening on http://{}", args.addr);

    let graceful = shutdown.clone();
    // Connection info lets the API rate-limit per client address.
    let router = router.into_make_service_with_connect_info::<std::net::SocketAddr>();
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
    // A background part that ended before the signal (e.g. a bind error) ends the server.
    shutdown.cancel();
    let mut first_error = None;
    while let Some(joined) = background.join_next().await {
        match joined {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::error!(error = %e, "background task failed");
                first_error.get_or_insert(e);
            }
            Err(e) => tracing::error!(error = %e, "background task panicked"),
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Binds a listener with the address in the error.
pub async fn bind(addr: std::net::SocketAddr) -> Result<tokio::net::TcpListener, ServeError> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })
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
