//! The command line. Every setting has a flag and an environment variable (shown by
//! `--help`), so the same binary is configured the same way on a laptop, in CI and in a
//! container. The README's configuration table is written from these definitions.

use std::{net::SocketAddr, path::PathBuf};

use clap::{Args, Parser, Subcommand};

/// Where the simulator listens unless told otherwise (`repoll sim` and `repoll serve --sim`).
pub const DEFAULT_SIM_ADDR: &str = "127.0.0.1:9001";

/// repoll — answers slow asynchronous APIs at once and polls them for you.
#[derive(Debug, Parser)]
#[command(name = "repoll", version, about, long_about = None)]
pub struct Cli {
    /// Read settings from this TOML file. Keys are the settings' environment variable names
    /// (any case, `REPOLL_` optional, tables join with `_`); flags and environment variables
    /// win over the file.
    #[arg(long, env = crate::config_file::CONFIG_ENV, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the web app: query page, JSON API, admin dashboard (and embedded workers).
    Serve(Box<ServeArgs>),
    /// Run a worker process only: claim due tasks and poll the upstream API.
    Worker(Box<WorkerCmdArgs>),
    /// Run the simulated upstream API (for demos and tests).
    Sim(SimCmdArgs),
    /// Admin tools (e.g. `repoll admin hash-password`).
    Admin {
        #[command(subcommand)]
        command: crate::admin::AdminCommand,
    },
}

/// Where Redis is and which queue to use.
#[derive(Clone, Args)]
pub struct RedisArgs {
    /// Redis to use, e.g. redis://127.0.0.1:6379/0. When unset, `repoll serve` starts and
    /// manages its own local redis-server (see --managed-redis-*). May carry a password, so
    /// `--help` never shows its value.
    #[arg(long, env = "REDIS_URL", hide_env_values = true)]
    pub redis_url: Option<String>,

    /// REDIS_URL names a Redis Cluster: one or more seed nodes, comma-separated (e.g.
    /// redis://10.0.0.1:7000,redis://10.0.0.2:7000). Commands follow the queue's slot; Pub/Sub
    /// goes through the first seed (a cluster forwards every publish to every node).
    #[arg(long, env = "REDIS_CLUSTER")]
    pub redis_cluster: bool,

    /// Queue name. All of the queue's keys share the Redis hash tag `{<queue>}`.
    #[arg(long, env = "REPOLL_QUEUE", default_value_t = queue::QueueConfig::default().name)]
    pub queue: String,

    /// Port of the managed local Redis (only without REDIS_URL); 0 picks a free port.
    #[arg(long, env = "REPOLL_MANAGED_REDIS_PORT", default_value_t = 0)]
    pub managed_redis_port: u16,

    /// Data directory of the managed local Redis (append-only file lives here).
    #[arg(long, env = "REPOLL_MANAGED_REDIS_DIR", default_value = "data/redis")]
    pub managed_redis_dir: PathBuf,

    /// Password of the managed local Redis (only without REDIS_URL); a random one when unset.
    /// Prefer the environment variable or the config file: a command line is visible to
    /// every local user.
    #[arg(long, env = "REPOLL_MANAGED_REDIS_PASSWORD", hide_env_values = true)]
    pub managed_redis_password: Option<worker::Secret>,

    /// The redis-server executable used for the managed local Redis.
    #[arg(long, env = "REPOLL_REDIS_SERVER_BIN", default_value = "redis-server")]
    pub redis_server_bin: PathBuf,

    /// How long a final result is kept and served without asking the upstream again (ms).
    #[arg(long, env = "REPOLL_RESULT_TTL_MS", default_value_t = queue::QueueConfig::default().result_ttl_ms)]
    pub result_ttl_ms: u64,

    /// Lease expiries after which a task is dead as "poison" (0 = never).
    #[arg(long, env = "REPOLL_MAX_LEASE_LOSSES", default_value_t = queue::QueueConfig::default().max_lease_losses)]
    pub max_lease_losses: u32,

    /// Partitions of each queue: its tasks spread over this many hash tags, so a Redis Cluster
    /// spreads them over its nodes (1 = one slot). Every process of a queue must use the
    /// same count; a process with another one refuses to start.
    #[arg(long, env = "REPOLL_PARTITIONS", default_value_t = 1,
          value_parser = clap::value_parser!(u16).range(1..=i64::from(queue::MAX_PARTITIONS)))]
    pub partitions: u16,

    /// What task histories keep: `transitions` (errors, lost leases, deaths, admin actions),
    /// `full` (also every claim and poll: a write per poll), or `off`. The enqueue, a live
    /// lease and the completion are always shown, read from the task itself.
    #[arg(long, env = "REPOLL_HISTORY", default_value_t = queue::QueueConfig::default().history)]
    pub history: queue::HistoryLevel,

    #[command(flatten)]
    pub breaker: BreakerArgs,

    #[command(flatten)]
    pub tenants: TenantArgs,
}

impl std::fmt::Debug for RedisArgs {
    /// Passwords (in REDIS_URL, of the managed Redis) never reach a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisArgs")
            .field(
                "redis_url",
                &self.redis_url.as_deref().map(crate::serve::redact),
            )
            .field("redis_cluster", &self.redis_cluster)
            .field("queue", &self.queue)
            .field("managed_redis_port", &self.managed_redis_port)
            .field("managed_redis_dir", &self.managed_redis_dir)
            .field("managed_redis_password", &self.managed_redis_password)
            .field("redis_server_bin", &self.redis_server_bin)
            .field("result_ttl_ms", &self.result_ttl_ms)
            .field("max_lease_losses", &self.max_lease_losses)
            .field("partitions", &self.partitions)
            .field("history", &self.history)
            .finish()
    }
}

impl RedisArgs {
    /// The URLs in REDIS_URL-style text: one, or (for a cluster) several comma-separated.
    pub fn seed_urls(url: &str) -> Vec<String> {
        url.split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(str::to_string)
            .collect()
    }

    /// The URL for Pub/Sub connections: the URL itself, or a cluster's first seed.
    pub fn pubsub_url(url: &str) -> String {
        Self::seed_urls(url).into_iter().next().unwrap_or_default()
    }

    /// The queue configuration these settings describe.
    pub fn queue_config(&self) -> queue::QueueConfig {
        queue::QueueConfig {
            name: self.queue.clone(),
            result_ttl_ms: self.result_ttl_ms,
            max_lease_losses: self.max_lease_losses,
            partitions: self.partitions,
            history: self.history,
            breaker: self.breaker.config(),
            tenants: self.tenants.config(),
            ..queue::QueueConfig::default()
        }
    }
}

/// The upstream's circuit breaker (one per upstream; see `queue::BreakerConfig`).
#[derive(Clone, Copy, Debug, Args)]
pub struct BreakerArgs {
    /// Circuit breaker of the upstream: errors of the upstream (timeouts, refused connections,
    /// 5xx, 429, bad bodies) within a minute that open it, if they are also at least
    /// --breaker-error-percent of the calls; 0 = it never opens by itself. While open, claims
    /// wait and errors of calls still out cost no attempt; after the cool-down one probe goes.
    #[arg(long = "breaker-failures", env = "REPOLL_BREAKER_FAILURES",
          default_value_t = queue::BreakerConfig::default().failures,
          value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    pub failures: u32,

    /// Least share of the last minute's calls, in percent, that must have failed to open it.
    #[arg(long = "breaker-error-percent", env = "REPOLL_BREAKER_ERROR_PERCENT",
          default_value_t = queue::BreakerConfig::default().error_percent,
          value_parser = clap::value_parser!(u32).range(0..=100))]
    pub error_percent: u32,

    /// How long the breaker stays open before one probe call, in ms.
    #[arg(long = "breaker-cooldown-ms", env = "REPOLL_BREAKER_COOLDOWN_MS",
          default_value_t = queue::BreakerConfig::default().cooldown_ms,
          value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    pub cooldown_ms: u64,
}

impl BreakerArgs {
    pub fn config(&self) -> queue::BreakerConfig {
        queue::BreakerConfig {
            failures: self.failures,
            error_percent: self.error_percent,
            cooldown_ms: self.cooldown_ms,
        }
    }
}

/// Per-tenant limits of one upstream (see `queue::TenantLimits`). Claims go round the tenants
/// with ready work whatever these are; these cap one tenant further.
#[derive(Clone, Copy, Debug, Args)]
pub struct TenantArgs {
    /// Leases (calls in flight) one tenant may hold at once on this upstream; 0 = no cap.
    #[arg(long = "tenant-concurrency", env = "REPOLL_TENANT_CONCURRENCY", default_value_t = 0,
          value_parser = clap::value_parser!(u32).range(0..=100_000))]
    pub tenant_concurrency: u32,

    /// Upstream calls (polls included) one tenant may start a second on this upstream;
    /// 0 = no limit.
    #[arg(long = "tenant-rate-per-sec", env = "REPOLL_TENANT_RATE_PER_SEC", default_value_t = 0.0,
          value_parser = parse_rate)]
    pub tenant_rate_per_sec: f64,

    /// Calls one tenant may start at once above its rate.
    #[arg(long = "tenant-burst", env = "REPOLL_TENANT_BURST", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub tenant_burst: u32,
}

/// A rate: a number from 0 to 1,000,000 a second (fractions allowed: 0.5 = one call every 2 s).
fn parse_rate(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number"))?;
    if v.is_finite() && (0.0..=1_000_000.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{s} is out of range 0..=1000000"))
    }
}

impl TenantArgs {
    pub fn config(&self) -> queue::TenantLimits {
        queue::TenantLimits {
            concurrency: self.tenant_concurrency,
            rate_per_sec: self.tenant_rate_per_sec,
            burst: self.tenant_burst,
        }
    }
}

/// `repoll worker`.
#[derive(Debug, Clone, Args)]
pub struct WorkerCmdArgs {
    #[command(flatten)]
    pub redis: RedisArgs,
    #[command(flatten)]
    pub upstream: worker::UpstreamArgs,
    #[command(flatten)]
    pub policy: worker::PolicyArgs,
    #[command(flatten)]
    pub worker: worker::WorkerArgs,
    #[command(flatten)]
    pub callback: worker::CallbackArgs,
    /// Serve only these upstreams (names from the config file's `[upstreams.<name>]`
    /// sections, and `default`), comma-separated; unset: every upstream.
    #[arg(
        long = "upstream",
        env = "REPOLL_WORKER_UPSTREAMS",
        value_delimiter = ','
    )]
    pub only_upstreams: Vec<String>,
    /// The named upstreams of the config file (`[upstreams.<name>]`), filled by
    /// `config_file::parse_cli`; empty without a file or sections.
    #[arg(skip)]
    pub upstreams: Vec<crate::upstreams::UpstreamSection>,
    /// Serve Prometheus metrics at http://<addr>/metrics (off when unset).
    #[arg(long, env = "REPOLL_METRICS_ADDR")]
    pub metrics_addr: Option<SocketAddr>,
}

/// `repoll sim`.
#[derive(Debug, Clone, Args)]
pub struct SimCmdArgs {
    /// Address the simulator listens on.
    #[arg(long, env = "REPOLL_SIM_ADDR", default_value = DEFAULT_SIM_ADDR)]
    pub addr: SocketAddr,
    #[command(flatten)]
    pub sim: sim::SimArgs,
}

/// `repoll serve`. (`Debug` leaves secrets out: see its impl.)
#[derive(Clone, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub redis: RedisArgs,

    /// Address the web app listens on.
    #[arg(long, env = "REPOLL_ADDR", default_value = "127.0.0.1:3000")]
    pub addr: SocketAddr,

    /// Directory of the built site (wasm, js, css); cargo-leptos writes it to target/site.
    #[arg(long, env = "LEPTOS_SITE_ROOT", default_value = "target/site")]
    pub site_root: String,

    /// Largest accepted request body, in bytes (larger gets 413).
    #[arg(long, env = "REPOLL_BODY_LIMIT", default_value_t = 64 * 1024)]
    pub body_limit: usize,

    /// Time limit for producing a response, in milliseconds (streams are not cut by it).
    #[arg(long, env = "REPOLL_REQUEST_TIMEOUT_MS", default_value_t = 15_000)]
    pub request_timeout_ms: u64,

    /// Open HTTP connections at most (never more than the process's descriptor limit allows,
    /// less 256 kept for Redis and files). Over it a connection gets a JSON 503 and is closed.
    #[arg(long, env = "REPOLL_MAX_CONNECTIONS", default_value_t = 4096,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1_000_000))]
    pub max_connections: usize,

    /// Time a connection has to send a request's headers, from its start and again after
    /// each response (so also the idle keep-alive timeout), in milliseconds.
    #[arg(long, env = "REPOLL_HEADER_TIMEOUT_MS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub header_timeout_ms: u64,

    /// Live (SSE) streams open at once, in all; more get 503.
    #[arg(long, env = "REPOLL_MAX_STREAMS", default_value_t = crate::live_hub::StreamCaps::default().total,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1_000_000))]
    pub max_streams: usize,

    /// Live (SSE) streams one client address may hold open at once; more get 429.
    #[arg(long, env = "REPOLL_MAX_STREAMS_PER_CLIENT", default_value_t = crate::live_hub::StreamCaps::default().per_client,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=100_000))]
    pub max_streams_per_client: usize,

    /// Redis response timeout for the work of a web request, in milliseconds: past it the
    /// request answers 503 instead of hanging while Redis stalls (workers keep their own,
    /// longer timeout).
    #[arg(long, env = "REPOLL_REDIS_REQUEST_TIMEOUT_MS", default_value_t = 2_000,
          value_parser = clap::value_parser!(u64).range(50..=60_000))]
    pub redis_request_timeout_ms: u64,

    /// Bearer token for `GET /metrics` from other hosts (`Authorization: Bearer <token>`).
    /// Without it, /metrics answers only to loopback clients.
    #[arg(long, env = "REPOLL_METRICS_TOKEN", hide_env_values = true)]
    pub metrics_token: Option<String>,

    /// After SIGTERM/SIGINT, how long open connections may take to finish, in milliseconds.
    #[arg(long, env = "REPOLL_SHUTDOWN_GRACE_MS", default_value_t = 1_500)]
    pub shutdown_grace_ms: u64,

    /// Embedded worker slots (concurrent upstream calls) in the web process; 0 = web only.
    /// Overrides --concurrency for `serve`.
    #[arg(long, env = "REPOLL_WORKERS")]
    pub workers: Option<usize>,

    /// Also run the simulated upstream inside this process, on --sim-addr.
    #[arg(long, env = "REPOLL_SIM")]
    pub sim: bool,

    /// Where the embedded simulator listens (with --sim).
    #[arg(long, env = "REPOLL_SIM_ADDR", default_value = DEFAULT_SIM_ADDR)]
    pub sim_addr: SocketAddr,

    #[command(flatten)]
    pub api: crate::api::ApiArgs,
    #[command(flatten)]
    pub admin: crate::admin::AdminArgs,
    #[command(flatten)]
    pub sim_args: sim::SimArgs,
    #[command(flatten)]
    pub upstream: worker::UpstreamArgs,
    #[command(flatten)]
    pub policy: worker::PolicyArgs,
    #[command(flatten)]
    pub worker: worker::WorkerArgs,
    #[command(flatten)]
    pub callback: worker::CallbackArgs,
    /// The named upstreams of the config file (`[upstreams.<name>]`), filled by
    /// `config_file::parse_cli`; empty without a file or sections.
    #[arg(skip)]
    pub upstreams: Vec<crate::upstreams::UpstreamSection>,
}

impl std::fmt::Debug for ServeArgs {
    /// Only what is safe in a log line: the Redis URL and the metrics token are left out
    /// (the nested settings redact their own secrets).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeArgs")
            .field("addr", &self.addr)
            .field("queue", &self.redis.queue)
            .field("max_connections", &self.max_connections)
            .field("header_timeout_ms", &self.header_timeout_ms)
            .field("max_streams", &self.max_streams)
            .field("max_streams_per_client", &self.max_streams_per_client)
            .field("metrics_token", &self.metrics_token.as_ref().map(|_| "***"))
            .field("api", &self.api)
            .field("admin", &self.admin)
            .field("upstream", &self.upstream)
            .field("policy", &self.policy)
            .field("worker", &self.worker)
            .field("callback", &self.callback)
            .finish_non_exhaustive()
    }
}
