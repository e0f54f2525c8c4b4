//! `repoll serve`: start (or connect to) Redis, build the router, run the embedded workers
//! and (with `--sim`) the simulated upstream, serve until a signal, then drain in order —
//! stop accepting, let workers release unfinished leases and open requests finish within the
//! grace period, and only then stop the managed Redis so nothing in flight loses its
//! connection.

use std::time::Duration;

use app::context::AppContext;
use backon::{BackoffBuilder, ExponentialBuilder};
use tokio_util::sync::CancellationToken;

use crate::{
    cli::{RedisArgs, ServeArgs},
    http_server::{self, ConnLimits},
    live_hub::{Live, StreamCaps},
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
                args.redis
                    .managed_redis_password
                    .as_ref()
                    .map(worker::Secret::expose),
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

/// How long a starting process waits for Redis to answer before it gives up.
pub const START_WAIT: Duration = Duration::from_secs(30);

/// Whether a connection error can pass by itself (Redis down, restarting, loading its data,
/// a cluster electing), as opposed to a wrong URL or password, which waiting cannot fix.
fn worth_waiting(e: &redis::RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind};
    e.is_connection_refusal()
        || e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || matches!(
            e.kind(),
            ErrorKind::Server(
                ServerErrorKind::BusyLoading
                    | ServerErrorKind::ClusterDown
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::MasterDown
            )
        )
}

/// Opens the queue on `url` (a cluster's seeds with --redis-cluster), with passwords hidden
/// in any error.
pub async fn open_queue(redis: &RedisArgs, url: &str) -> Result<queue::Queue, ServeError> {
    open_queue_with_timeout(redis, url, queue::RESPONSE_TIMEOUT).await
}

/// [`open_queue`] with another Redis response timeout.
pub async fn open_queue_with_timeout(
    redis: &RedisArgs,
    url: &str,
    response_timeout: Duration,
) -> Result<queue::Queue, ServeError> {
    // A Redis that is restarting (refusing connections, or answering LOADING while it replays
    // its append-only file) is waited for, up to START_WAIT: a worker process started at that
    // moment (by a supervisor, after a crash) should not exit and need another restart.
    let started = std::time::Instant::now();
    let mut delays = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_secs(2))
        .with_total_delay(Some(START_WAIT))
        .without_max_times()
        .build();
    let opened = loop {
        let cfg = redis.queue_config();
        let attempt = if redis.redis_cluster {
            queue::Queue::connect_cluster_with_timeout(
                &RedisArgs::seed_urls(url),
                cfg,
                response_timeout,
            )
            .await
        } else {
            queue::Queue::connect_with_timeout(url, cfg, response_timeout).await
        };
        let delay = delays
            .next()
            .filter(|d| started.elapsed() + *d < START_WAIT);
        match (attempt, delay) {
            (Err(queue::QueueError::Redis(e)), Some(delay)) if worth_waiting(&e) => {
                tracing::warn!(error = %e, ?delay, "Redis not available yet; retrying");
                tokio::time::sleep(delay).await;
            }
            (other, _) => break other,
        }
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

/// The queue of one named upstream on `base`'s connection (one Redis connection serves every
/// upstream's queue: they differ in hash tag, not in server).
pub async fn upstream_queue(
    base: &queue::Queue,
    plan: &crate::upstreams::UpstreamPlan,
    url: &str,
) -> Result<queue::Queue, ServeError> {
    if plan.is_default() {
        return Ok(base.clone());
    }
    queue::Queue::with_connection(base.connection(), plan.queue.clone())
        .await
        .map_err(|source| ServeError::Redis {
            url: redact(url),
            source,
        })
}

/// Pub/Sub clients for every node `url` names (one, or a cluster's seeds), for the live hub
/// to rotate through when one stops answering.
pub fn pubsub_clients(url: &str) -> Result<Vec<redis::Client>, ServeError> {
    RedisArgs::seed_urls(url)
        .iter()
        .map(|u| {
            redis::Client::open(u.as_str()).map_err(|e| ServeError::Redis {
                url: redact(u),
                source: e.into(),
            })
        })
        .collect()
}

/// A Pub/Sub client for `url` (a cluster's first seed).
pub fn pubsub_client(url: &str) -> Result<redis::Client, ServeError> {
    let url = RedisArgs::pubsub_url(url);
    redis::Client::open(url.as_str()).map_err(|e| ServeError::Redis {
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
    // The requests' own connection, with a short response timeout (see
    // `Queue::connect_with_timeout`): a Redis stall makes a page or API call answer 503 in
    // ~2 s instead of hanging; the workers keep `queue` and its longer timeout.
    let web_queue = open_queue_with_timeout(
        &args.redis,
        url,
        Duration::from_millis(args.redis_request_timeout_ms),
    )
    .await?;
    let metrics = worker::install_prometheus();
    // The web side's own series, 0 until something happens (see install_prometheus).
    metrics::counter!("repoll_connections_refused_total").increment(0);
    metrics::gauge!("repoll_live_streams").increment(0.0);
    let fd_limit = http_server::raise_fd_limit();

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
    // Checked before anything listens: a bad upstream or callback setting stops the start.
    let plans = crate::upstreams::plans(&args.redis, &args.upstream, &args.policy, &args.upstreams);
    let callbacks = worker::Callbacks::new(&args.callback)?;
    let slots = args.workers.unwrap_or(args.worker.concurrency);
    // Per upstream: its queue for workers and for requests, its caller, its callback signer.
    let mut served = Vec::with_capacity(plans.len());
    for plan in &plans {
        let upstream = worker::Upstream::new(&plan.upstream)?;
        let wq = upstream_queue(&queue, plan, url).await?;
        let webq = upstream_queue(&web_queue, plan, url).await?;
        let cb = callbacks.as_ref().map(|c| c.for_upstream(&plan.name));
        served.push((plan, upstream, wq, webq, cb));
    }
    for (plan, upstream, wq, _, cb) in &served {
        let slots = plan.concurrency.unwrap_or(slots);
        if slots == 0 {
            continue;
        }
        let pubsub = pubsub_client(url)?;
        let mut wargs = args.worker.clone();
        wargs.concurrency = slots;
        // The web process promises a quick stop (SIGTERM to exit within ~2 s), so its embedded
        // workers get at most the web drain period; unfinished leases are released to due at
        // once and another worker picks them up.
        wargs.grace_ms = wargs.grace_ms.min(args.shutdown_grace_ms);
        let w = worker::Worker::new(
            wq.clone(),
            pubsub,
            upstream.clone(),
            plan.policy.clone(),
            wargs,
        )
        .with_callbacks(cb.clone());
        tracing::info!(worker = w.id(), slots, upstream = %plan.name, "embedded worker started");
        let stop = shutdown.clone();
        background.spawn(async move {
            w.run(stop.cancelled_owned()).await?;
            Ok(())
        });
    }

    let live_clients = pubsub_clients(url)?;
    let caps = StreamCaps {
        per_client: args.max_streams_per_client,
        total: args.max_streams,
    };
    let live = Live::start_seeds(
        live_clients,
        served
            .iter()
            .map(|(_, _, q, _, _)| q.channels().dashboard)
            .collect(),
        caps,
        shutdown.clone(),
    );
    if args.api.trust_forwarded_for {
        tracing::warn!(
            "REPOLL_TRUST_FORWARDED_FOR is replaced by REPOLL_TRUST_FORWARDED; please rename it"
        );
    }
    // One trust setting for every per-client limit and the cookie's Secure flag.
    let trust_forwarded = args.admin.trust_forwarded || args.api.trust_forwarded_for;
    let mut admin_args = args.admin.clone();
    admin_args.trust_forwarded = trust_forwarded;
    let admin = crate::admin::AdminState::new(&admin_args, args.worker.heartbeat_ms)
        .map_err(ServeError::Config)?;
    let mut api = crate::api::ApiState::new(&args.api, trust_forwarded);
    api.metrics_token = args.metrics_token.clone().map(Into::into);
    api.callbacks = callbacks.map(|callbacks| crate::api::CallbackReceiver {
        callbacks,
        upstreams: served
            .iter()
            .map(
                |(plan, upstream, _, webq, _)| crate::api::CallbackUpstream {
                    name: if plan.is_default() {
                        String::new()
                    } else {
                        plan.name.clone()
                    },
                    queue: webq.clone(),
                    reader: upstream.reader().clone(),
                    max_body: upstream.max_body(),
                },
            )
            .collect(),
    });
    let rate = |u: &worker::UpstreamArgs| app::context::RateLimit {
        per_sec: u.upstream_rate_per_sec,
        burst: u.upstream_rate_burst,
    };
    let named = app::context::NamedUpstreams {
        list: std::sync::Arc::new(
            served
                .iter()
                .filter(|(plan, ..)| !plan.is_default())
                .map(|(plan, _, _, webq, _)| app::context::NamedUpstream {
                    name: plan.name.clone(),
                    queue: webq.clone(),
                    enqueue_policy: plan.policy.enqueue_policy(),
                    rate: rate(&plan.upstream),
                })
                .collect(),
        ),
        default_rate: rate(&args.upstream),
    };
    let state = WebState {
        live,
        api,
        admin: admin.clone(),
        leptos_options: web::leptos_options(&args.site_root),
        app: AppContext {
            queue: web_queue,
            named,
            enqueue_policy: args.policy.enqueue_policy(),
            admin: admin.auth.clone(),
            first_answer: Duration::from_millis(args.api.first_answer_ms),
        },
    };
    let router = web::router(
        state.clone(),
        Limits {
            body_bytes: args.body_limit,
            timeout: Duration::from_millis(args.request_timeout_ms),
        },
        web::guarded_metrics(crate::metrics::metrics_router(metrics), state),
    );
    let listener = bind(args.addr).await?;
    let conn_limits = ConnLimits {
        max_connections: http_server::effective_max_connections(args.max_connections, fd_limit),
        header_timeout: Duration::from_millis(args.header_timeout_ms),
    };
    if conn_limits.max_connections < args.max_connections {
        tracing::warn!(
            fd_limit,
            max_connections = conn_limits.max_connections,
            "the descriptor limit lowers the connection cap"
        );
    }
    tracing::info!(
        max_connections = conn_limits.max_connections,
        max_streams = caps.total,
        "listening on http://{}",
        args.addr
    );

    let grace = Duration::from_millis(args.shutdown_grace_ms);
    http_server::serve(
        listener,
        router,
        conn_limits,
        Default::default(),
        shutdown.clone(),
        grace,
    )
    .await?;
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

/// Hides the passwords in a Redis URL (or a comma-separated list of them) before it reaches a
/// log or an error message.
pub fn redact(url: &str) -> String {
    if url.contains(',') {
        return url.split(',').map(redact).collect::<Vec<_>>().join(",");
    }
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            format!("{}://***{}", &url[..scheme_end], &url[at..])
        }
        _ => url.to_string(),
    }
}
