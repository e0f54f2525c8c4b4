//! What every command starts with — opening the queue (waiting for a Redis that is still
//! starting), Pub/Sub clients, the listener — and the error that ends a command. Below the
//! routes and the commands in the module layers, so `serve`, `worker`, `sim` and `admin` share
//! it without importing each other.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};

use crate::{
    managed_redis::ManagedRedisError,
    settings::{redact, RedisArgs},
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
    #[error("a background part of the server panicked: {0}")]
    Panicked(String),
    #[error("server error: {0}")]
    Io(#[from] std::io::Error),
}

/// A worker that cannot start, as the user reads it: a setting it refuses
/// (`WorkerError::Config`) in its own words, the same from `repoll serve` and `repoll worker`.
pub fn worker_refusal(e: worker::WorkerError) -> ServeError {
    match e {
        worker::WorkerError::Config(message) => ServeError::Config(message),
        other => ServeError::Worker(other),
    }
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
        let connect = async {
            if redis.redis_cluster {
                queue::Queue::connect_cluster_with_timeout(
                    &RedisArgs::seed_urls(url),
                    cfg,
                    response_timeout,
                )
                .await
            } else {
                queue::Queue::connect_with_timeout(url, cfg, response_timeout).await
            }
        };
        // An attempt may itself hang for the response timeout (a stalled Redis accepts and
        // never answers): it gets only what is left of START_WAIT, so the whole wait is
        // START_WAIT, as the README says, not START_WAIT plus one last attempt.
        let left = START_WAIT.saturating_sub(started.elapsed());
        let attempt = match tokio::time::timeout(left, connect).await {
            Ok(attempt) => attempt,
            Err(_) => Err(queue::QueueError::Redis(redis::RedisError::from(
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no answer within {} s", START_WAIT.as_secs()),
                ),
            ))),
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
    opened.map_err(|source| {
        let url = RedisArgs::seed_urls(url)
            .iter()
            .map(|u| redact(u))
            .collect::<Vec<_>>()
            .join(",");
        queue_refusal(url, source)
    })
}

/// A queue that did not open, as the user reads it: a refusal of the settings
/// (`QueueError::Config`: another partition count, a Redis too old, ...) is said in the
/// settings' own words, since Redis was reached and nothing is wrong with the connection;
/// anything else is a Redis that could not be reached or used at `url` (passwords hidden).
fn queue_refusal(url: String, source: queue::QueueError) -> ServeError {
    match source {
        queue::QueueError::Config(message) => ServeError::Config(message),
        source => ServeError::Redis { url, source },
    }
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
        .map_err(|source| queue_refusal(redact(url), source))
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

/// Binds a listener with the address in the error.
pub async fn bind(addr: std::net::SocketAddr) -> Result<tokio::net::TcpListener, ServeError> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })
}
