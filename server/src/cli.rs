//! The command line. Every setting has a flag and an environment variable (shown by
//! `--help`), so the same binary is configured the same way on a laptop, in CI and in a
//! container. The configuration tables of docs/configuration.md are written from these definitions.

use std::{ffi::OsString, net::SocketAddr, path::PathBuf};

use clap::{
    parser::ValueSource, ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand,
};

use crate::{config_file, upstreams};

// The settings shared by every command live below this module (`settings`); the paths
// `cli::RedisArgs` & co. stay for callers.
pub use crate::settings::{BreakerArgs, ManagedRedisArgs, RedisArgs, TenantArgs};

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
    #[command(flatten)]
    pub managed: ManagedRedisArgs,

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

    /// Bytes of hot results this web process holds to answer their fresh hits from memory
    /// (no Redis round trip; see "Hits from memory" in docs/operations.md); 0 = every hit goes
    /// to Redis. Not on a Redis Cluster.
    #[arg(long, env = "REPOLL_HOLD_BYTES", default_value_t = queue::HoldSettings::default().max_bytes,
          value_parser = clap::value_parser!(u64).range(0..=(1 << 40)))]
    pub hold_bytes: u64,

    /// The longest a purge, a refresh or any other write of a stored result can go unseen by
    /// the answers this process gives from memory (ms).
    #[arg(long, env = "REPOLL_HOLD_BOUND_MS", default_value_t = 50,
          value_parser = clap::value_parser!(u64).range(10..=1_000))]
    pub hold_bound_ms: u64,

    /// Bearer token for `GET /metrics` (`Authorization: Bearer <token>`): once set, every
    /// client needs it, loopback included (a proxy on the same host makes every client
    /// loopback). Without it, /metrics answers only to a loopback peer, never to a forwarded
    /// address.
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
    #[arg(long, env = "REPOLL_SIM", value_parser = crate::settings::OnOff,
          action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true,
          default_value = "false", default_missing_value = "true")]
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
    /// Whether the default upstream's URL was given (flag, variable or config file). With
    /// `--sim`, a URL left to its built-in default points at the simulator's own address
    /// (`--sim-addr`) instead. Set by [`cli_from_matches`], which knows where the value came
    /// from; true otherwise, so nobody's URL is ever replaced by mistake.
    #[arg(skip = true)]
    pub upstream_url_given: bool,
    /// `REPOLL_TRACE_URL` (environment only, like the other tracing settings): checked and
    /// set by `main` through [`crate::traces::Tracing::trace_url`].
    #[arg(skip)]
    pub trace_url: Option<String>,
}

impl std::fmt::Debug for ServeArgs {
    /// Only what is safe in a log line: the Redis URL and the metrics token are left out
    /// (the nested settings redact their own secrets).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeArgs")
            .field("addr", &self.addr)
            .field("queue", &self.redis.queue)
            .field("managed", &self.managed)
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

/// Parses the command line like `Cli::parse()`, with defaults from the config file named by
/// `--config` or `REPOLL_CONFIG` (when there is one). Exits with clap's message on bad flags.
pub fn parse_cli() -> Result<Cli, config_file::ConfigError> {
    let args: Vec<OsString> = std::env::args_os().collect();
    let path = config_file::config_path(&args)
        .or_else(|| std::env::var_os(config_file::CONFIG_ENV).map(PathBuf::from));
    let file = match &path {
        Some(p) => config_file::read_settings(&Cli::command(), p)?,
        None => config_file::FileSettings::new(),
    };
    let matches = config_file::apply(Cli::command(), &file).get_matches_from(args);
    let mut cli = cli_from_matches(&matches, &file).unwrap_or_else(|e| e.exit());
    if let Some(p) = path {
        let sections = upstreams::sections_from_table(&p, &config_file::read_table(&p)?)?;
        match &mut cli.command {
            Command::Serve(a) => a.upstreams = sections,
            Command::Worker(a) => a.upstreams = sections,
            _ => {}
        }
    }
    Ok(cli)
}

/// The environment variable of the default upstream's URL template.
const UPSTREAM_URL_ENV: &str = "REPOLL_UPSTREAM_URL";

/// `Cli` from the matches of `Cli::command()` with `file`'s settings as defaults (see
/// [`config_file::apply`]), noting what only the matches know: whether `serve`'s upstream URL
/// was given. clap reports a value from the file as a default too, so the file's keys are
/// asked as well. (An error cannot happen for such matches; it is clap's either way.)
pub fn cli_from_matches(
    m: &ArgMatches,
    file: &config_file::FileSettings,
) -> Result<Cli, clap::Error> {
    let mut cli = Cli::from_arg_matches(m)?;
    if let (Command::Serve(args), Some(("serve", serve))) = (&mut cli.command, m.subcommand()) {
        let from_flag_or_env = serve.value_source("url") != Some(ValueSource::DefaultValue);
        let from_file = file.iter().any(|(env, _)| env == UPSTREAM_URL_ENV);
        args.upstream_url_given = from_flag_or_env || from_file;
    }
    Ok(cli)
}
