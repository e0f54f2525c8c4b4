//! The settings every command shares — where Redis is, the circuit breaker, the tenant
//! limits — at the bottom of the module layers: they import nothing of this crate, so the
//! command line, the config file and the upstream sections can all build on them.

use std::{ffi::OsStr, path::PathBuf};

use clap::{builder::PossibleValue, builder::TypedValueParser, error::ErrorKind, Args};

/// The words an on/off setting takes for "on", in any case: as its flag's value (`--sim=yes`;
/// the flag alone is on too), its environment variable or its config file key (where TOML's
/// `true` and `1` also do).
pub const ON_WORDS: [&str; 4] = ["1", "true", "yes", "on"];
/// … and for "off".
pub const OFF_WORDS: [&str; 4] = ["0", "false", "no", "off"];

/// The value parser of every on/off setting: [`ON_WORDS`] and [`OFF_WORDS`] in any case. Any
/// other word stops the start with a message naming the setting and the words it takes
/// (clap's own `bool` parser takes only `true`/`false`, and says only that). Each such
/// setting is declared
/// `value_parser = OnOff, action = ArgAction::Set, num_args = 0..=1, require_equals = true,
/// default_value = "false", default_missing_value = "true"`, so the bare flag stays on;
/// `server/tests/on_off_settings.rs` checks every `bool` setting of the command line does.
#[derive(Clone, Copy, Debug, Default)]
pub struct OnOff;

impl OnOff {
    /// The setting `word` turns on (`Some(true)`) or off, `None` for another word.
    pub fn word(word: &str) -> Option<bool> {
        let word = word.trim().to_ascii_lowercase();
        if ON_WORDS.contains(&word.as_str()) {
            Some(true)
        } else if OFF_WORDS.contains(&word.as_str()) {
            Some(false)
        } else {
            None
        }
    }
}

/// `a, b, c or d`.
fn or_list(words: &[&str]) -> String {
    match words.split_last() {
        Some((last, [])) => last.to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

impl TypedValueParser for OnOff {
    type Value = bool;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<bool, clap::Error> {
        let word = value.to_string_lossy();
        if let Some(on) = OnOff::word(&word) {
            return Ok(on);
        }
        // The flag and the variable: the word may have come from either (or the file).
        let setting = arg
            .map(|a| {
                let mut names: Vec<String> =
                    a.get_long().map(|l| format!("--{l}")).into_iter().collect();
                names.extend(a.get_env().map(|e| e.to_string_lossy().into_owned()));
                names.join(" / ")
            })
            .unwrap_or_else(|| "an on/off setting".into());
        let message = format!(
            "invalid value '{word}' for {setting}: an on/off setting takes {} to turn it on, \
             {} to turn it off (any case)\n",
            or_list(&ON_WORDS),
            or_list(&OFF_WORDS)
        );
        Err(clap::Error::raw(ErrorKind::InvalidValue, message).with_cmd(cmd))
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(
            ON_WORDS
                .iter()
                .chain(OFF_WORDS.iter())
                .map(|w| PossibleValue::new(*w)),
        ))
    }
}

/// Where Redis is and which queue to use.
#[derive(Clone, Args)]
pub struct RedisArgs {
    /// Redis to use, e.g. redis://127.0.0.1:6379/0. When unset, `repoll serve` starts and
    /// manages its own local redis-server (see `ManagedRedisArgs`). May carry a password, so
    /// `--help` never shows its value.
    #[arg(long, env = "REDIS_URL", hide_env_values = true)]
    pub redis_url: Option<String>,

    /// REDIS_URL names a Redis Cluster: one or more seed nodes, comma-separated (e.g.
    /// redis://10.0.0.1:7000,redis://10.0.0.2:7000). Commands follow the queue's slot; Pub/Sub
    /// goes through the first seed (a cluster forwards every publish to every node).
    #[arg(long, env = "REDIS_CLUSTER", value_parser = OnOff, action = clap::ArgAction::Set,
          num_args = 0..=1, require_equals = true, default_value = "false",
          default_missing_value = "true")]
    pub redis_cluster: bool,

    /// Queue name. All of the queue's keys share the Redis hash tag `{<queue>}`.
    #[arg(long, env = "REPOLL_QUEUE", default_value_t = queue::QueueConfig::default().name)]
    pub queue: String,

    /// How long a stored result is fresh: answered without asking the upstream again (ms).
    /// The same as REPOLL_FRESH_FOR_MS, which wins when both are set.
    #[arg(long, env = "REPOLL_RESULT_TTL_MS", default_value_t = queue::QueueConfig::default().result_ttl_ms,
          value_parser = clap::value_parser!(u64).range(1..=MAX_WINDOW_MS))]
    pub result_ttl_ms: u64,

    #[command(flatten)]
    pub freshness: FreshnessArgs,

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

/// The Redis `repoll serve` runs itself when REDIS_URL is unset (a worker never does, so these
/// are `serve`'s alone). (`Debug` shows the password as `***`: `Secret` redacts itself.)
#[derive(Clone, Debug, Args)]
pub struct ManagedRedisArgs {
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
}

impl std::fmt::Debug for RedisArgs {
    /// Passwords (in REDIS_URL, of the managed Redis) never reach a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisArgs")
            .field("redis_url", &self.redis_url.as_deref().map(redact))
            .field("redis_cluster", &self.redis_cluster)
            .field("queue", &self.queue)
            .field("result_ttl_ms", &self.result_ttl_ms)
            .field("freshness", &self.freshness)
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
            result_ttl_ms: self.freshness.fresh_for_ms.unwrap_or(self.result_ttl_ms),
            freshness: self.freshness.config(),
            max_lease_losses: self.max_lease_losses,
            partitions: self.partitions,
            history: self.history,
            breaker: self.breaker.config(),
            tenants: self.tenants.config(),
            ..queue::QueueConfig::default()
        }
    }
}

/// Upstream errors within a minute that open the breaker by default (with at least half the
/// calls failing). On by default, unlike the queue library's `BreakerConfig` (off for an
/// embedder who has not chosen): the product promises that an outage dead-letters nothing, and
/// without a breaker an upstream refusing every connection kills each task after its five
/// attempts within seconds. Ten is past what a healthy slow API shows (an occasional timeout
/// or 503) even at a few calls a minute, and few enough that a small deployment's outage
/// trips it before its first tasks run out of attempts.
pub const DEFAULT_BREAKER_FAILURES: u32 = 10;

/// The upstream's circuit breaker (one per upstream; see `queue::BreakerConfig`).
#[derive(Clone, Copy, Debug, Args)]
pub struct BreakerArgs {
    /// Circuit breaker of the upstream: errors of the upstream (timeouts, refused connections,
    /// 5xx, 429, bad bodies) within a minute that open it, if they are also at least
    /// --breaker-error-percent of the calls; 0 = it never opens by itself. While open, claims
    /// wait and errors of calls still out cost no attempt; after the cool-down one probe goes.
    #[arg(long = "breaker-failures", env = "REPOLL_BREAKER_FAILURES",
          default_value_t = DEFAULT_BREAKER_FAILURES,
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

/// The longest window of a stored result a setting may name: ten years, in ms.
pub const MAX_WINDOW_MS: u64 = 10 * 365 * 24 * 3_600_000;

/// What a stored result is worth after its fresh window, per upstream (see
/// `queue::FreshnessWindows` and docs/freshness.md).
#[derive(Clone, Copy, Debug, Args)]
pub struct FreshnessArgs {
    /// How long a stored result is fresh (ms): answered with no upstream call. Unset: the
    /// top level's REPOLL_RESULT_TTL_MS.
    #[arg(long = "fresh-for-ms", env = "REPOLL_FRESH_FOR_MS",
          value_parser = clap::value_parser!(u64).range(1..=MAX_WINDOW_MS))]
    pub fresh_for_ms: Option<u64>,

    /// After the fresh window, how long the result is still answered at once, marked stale,
    /// while one refresh runs (ms; 0 = a result past its fresh window is not served).
    #[arg(long = "stale-for-ms", env = "REPOLL_STALE_FOR_MS",
          default_value_t = queue::FreshnessWindows::default().stale_ms,
          value_parser = clap::value_parser!(u64).range(0..=MAX_WINDOW_MS))]
    pub stale_for_ms: u64,

    /// After the stale window, how long the result is still answered while its refresh
    /// cannot bring a new one: it failed, the breaker is open, the upstream is paused (ms).
    #[arg(long = "stale-if-error-for-ms", env = "REPOLL_STALE_IF_ERROR_FOR_MS",
          default_value_t = queue::FreshnessWindows::default().stale_if_error_ms,
          value_parser = clap::value_parser!(u64).range(0..=MAX_WINDOW_MS))]
    pub stale_if_error_for_ms: u64,

    /// Negative caching: how long a query whose task failed for good (the upstream answered
    /// "failed", a permanent 4xx) is answered with that failure before a new ask tries again;
    /// also how long after a failed refresh the next one may start (ms; 0 = none).
    #[arg(long = "failed-for-ms", env = "REPOLL_FAILED_FOR_MS",
          default_value_t = queue::FreshnessWindows::default().failed_ms,
          value_parser = clap::value_parser!(u64).range(0..=MAX_WINDOW_MS))]
    pub failed_for_ms: u64,

    /// Refresh-ahead: a result asked this many times within its fresh window is refreshed in
    /// the background shortly before it would go stale (0 = never).
    #[arg(long = "hot-asks", env = "REPOLL_HOT_ASKS",
          default_value_t = queue::FreshnessWindows::default().hot_asks,
          value_parser = clap::value_parser!(u32).range(0..=i64::from(queue::MAX_HOT_ASKS)))]
    pub hot_asks: u32,

    /// Refreshes ahead started per minute for this upstream, at most.
    #[arg(long = "refresh-ahead-per-min", env = "REPOLL_REFRESH_AHEAD_PER_MIN",
          default_value_t = queue::FreshnessWindows::default().refresh_ahead_per_min,
          value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    pub refresh_ahead_per_min: u32,
}

impl FreshnessArgs {
    pub fn config(&self) -> queue::FreshnessWindows {
        queue::FreshnessWindows {
            stale_ms: self.stale_for_ms,
            stale_if_error_ms: self.stale_if_error_for_ms,
            failed_ms: self.failed_for_ms,
            hot_asks: self.hot_asks,
            refresh_ahead_per_min: self.refresh_ahead_per_min,
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
