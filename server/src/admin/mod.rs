//! The admin side, server half: configuration and sign-in settings, cross-site protection of
//! every state-changing request, the dashboard's live stream, and `repoll admin`.
//!
//! The pages and their server functions live in the app crate (`app::pages::admin`), the
//! session and password checks in `app::auth`; this module wires them into the process:
//!
//! - [`same_origin`]: the middleware that refuses cross-site POSTs (403) before any handler.
//! - [`events`]: `GET /admin/events`, Server-Sent Events that tell open pages to re-read.
//! - [`password`]: `repoll admin hash-password`.

pub mod events;
pub mod password;
pub mod same_origin;

use app::auth::{AuthConfig, AuthSettings, Credential};
use axum::{routing::get, Router};
use clap::{Args, Subcommand};

use crate::web::WebState;

pub use same_origin::guard as same_origin_guard;

/// Settings of the admin dashboard. Without any admin password configured, `repoll serve`
/// makes up a one-time password and prints it at start: the dashboard is never open.
#[derive(Clone, Args, Default)]
pub struct AdminArgs {
    /// Admin password as an argon2 PHC string (make one with `repoll admin hash-password`).
    #[arg(long, env = "REPOLL_ADMIN_PASSWORD_HASH", hide_env_values = true)]
    pub admin_password_hash: Option<String>,

    /// Admin password in plain text (development; prefer the hash).
    #[arg(long, env = "REPOLL_ADMIN_PASSWORD", hide_env_values = true)]
    pub admin_password: Option<String>,

    /// Optional read-only ("viewer") password as an argon2 PHC string.
    #[arg(long, env = "REPOLL_VIEWER_PASSWORD_HASH", hide_env_values = true)]
    pub viewer_password_hash: Option<String>,

    /// Optional read-only ("viewer") password in plain text (development).
    #[arg(long, env = "REPOLL_VIEWER_PASSWORD", hide_env_values = true)]
    pub viewer_password: Option<String>,

    /// How long a sign-in lasts, in seconds.
    #[arg(long, env = "REPOLL_SESSION_TTL_SECS", default_value_t = app::auth::AuthSettings::default().session_ttl_s)]
    pub session_ttl_secs: u64,

    /// Failed sign-ins per client address per minute before further tries are refused.
    #[arg(long, env = "REPOLL_LOGIN_MAX_FAILURES", default_value_t = app::auth::AuthSettings::default().max_failures)]
    pub login_max_failures: u32,

    /// Always mark the session cookie Secure (set it when TLS ends at a proxy).
    #[arg(long, env = "REPOLL_COOKIE_SECURE")]
    pub cookie_secure: bool,

    /// repoll runs behind one reverse proxy that appends the client's address to
    /// X-Forwarded-For and sets X-Forwarded-Proto: every per-client limit (API rate, sign-in
    /// attempts, live streams) then keys on the last X-Forwarded-For entry, and the session
    /// cookie follows X-Forwarded-Proto. Off: the TCP peer, headers ignored.
    #[arg(long, env = "REPOLL_TRUST_FORWARDED")]
    pub trust_forwarded: bool,

    /// Password checks (argon2, ~19 MiB and tens of ms of a core each) allowed at once; more
    /// sign-ins wait up to 5 s for a slot, then get 503.
    #[arg(long, env = "REPOLL_MAX_PASSWORD_CHECKS", default_value_t = app::auth::DEFAULT_PASSWORD_CHECKS,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=64))]
    pub max_password_checks: usize,

    /// Tasks one bulk action by filter (retry / cancel / purge on /admin/bulk) may touch; a
    /// filter matching more is refused with its count.
    #[arg(long, env = "REPOLL_BULK_LIMIT", default_value_t = queue::DEFAULT_BULK_LIMIT,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub bulk_limit: u64,

    /// The dashboard's live stream sends `changed` after this many milliseconds without any
    /// event, so what changes with time alone (due times, lease deadlines, ages) is re-read.
    #[arg(long, env = "REPOLL_ADMIN_QUIET_REFRESH_MS",
          default_value_t = events::QUIET_REFRESH.as_millis() as u64,
          value_parser = clap::value_parser!(u64).range(100..=86_400_000))]
    pub admin_quiet_refresh_ms: u64,
}

impl std::fmt::Debug for AdminArgs {
    /// Passwords never reach a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let set = |o: &Option<String>| o.as_deref().is_some_and(|s| !s.is_empty());
        f.debug_struct("AdminArgs")
            .field("admin_password_hash", &set(&self.admin_password_hash))
            .field("admin_password", &set(&self.admin_password))
            .field("viewer_password_hash", &set(&self.viewer_password_hash))
            .field("viewer_password", &set(&self.viewer_password))
            .field("session_ttl_secs", &self.session_ttl_secs)
            .field("login_max_failures", &self.login_max_failures)
            .field("cookie_secure", &self.cookie_secure)
            .field("trust_forwarded", &self.trust_forwarded)
            .field("max_password_checks", &self.max_password_checks)
            .field("bulk_limit", &self.bulk_limit)
            .field("admin_quiet_refresh_ms", &self.admin_quiet_refresh_ms)
            .finish()
    }
}

/// `repoll admin ...`.
#[derive(Debug, Clone, Subcommand)]
pub enum AdminCommand {
    /// Read a password from stdin (or a prompt) and print its argon2 hash for
    /// REPOLL_ADMIN_PASSWORD_HASH / REPOLL_VIEWER_PASSWORD_HASH.
    HashPassword,
    /// Rewrite a queue written by an earlier repoll (long record fields, results as hashes)
    /// into the current compact layout, task by task, while everything keeps running. Safe
    /// to run twice. Needs REDIS_URL.
    Migrate(Box<MigrateArgs>),
    /// Move a drained queue to another partition count (REPOLL_PARTITIONS): its stored
    /// results, histories and chart counters are moved; refused while a task is live or a
    /// worker runs. Stop every repoll process of the queue first, then start them all with
    /// the new count. Resumable. Needs REDIS_URL.
    Repartition(Box<RepartitionArgs>),
}

/// `repoll admin repartition`.
#[derive(Debug, Clone, clap::Args)]
pub struct RepartitionArgs {
    #[command(flatten)]
    pub redis: crate::cli::RedisArgs,
    /// The new partition count.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=i64::from(queue::MAX_PARTITIONS)))]
    pub to: u16,
}

/// `repoll admin migrate`.
#[derive(Debug, Clone, clap::Args)]
pub struct MigrateArgs {
    #[command(flatten)]
    pub redis: crate::cli::RedisArgs,
}

/// State the admin handlers need beyond [`WebState`]'s shared parts. `Default` has no
/// passwords, so nobody can sign in (tests configure their own).
#[derive(Clone, Default)]
pub struct AdminState {
    /// Shared with the server functions through `AppContext::admin`.
    pub auth: AuthConfig,
    /// The live stream's quiet refresh (REPOLL_ADMIN_QUIET_REFRESH_MS, default
    /// [`events::QUIET_REFRESH`]); a setting so a test can tell a change-driven event from a
    /// time-driven one without racing the clock.
    pub quiet_refresh: std::time::Duration,
}

impl AdminState {
    /// Builds the settings; `heartbeat_ms` is the workers' heartbeat period (a worker silent
    /// for two periods is shown as gone). Prints a generated one-time admin password when
    /// none is configured.
    pub fn new(args: &AdminArgs, heartbeat_ms: u64) -> Result<Self, String> {
        let mut admin = Credential::from_settings(
            args.admin_password_hash.as_deref(),
            args.admin_password.as_deref(),
        )
        .map_err(|e| format!("REPOLL_ADMIN_PASSWORD_HASH: {e}"))?;
        let viewer = Credential::from_settings(
            args.viewer_password_hash.as_deref(),
            args.viewer_password.as_deref(),
        )
        .map_err(|e| format!("REPOLL_VIEWER_PASSWORD_HASH: {e}"))?;
        if admin.is_none() {
            let generated = password::generate();
            eprintln!(
                "repoll: no REPOLL_ADMIN_PASSWORD_HASH or REPOLL_ADMIN_PASSWORD set; \
                 admin password for this run: {generated}"
            );
            admin =
                Some(Credential::from_settings(None, Some(&generated))?.ok_or("empty password")?);
        }
        Ok(AdminState {
            auth: AuthConfig::new(AuthSettings {
                admin,
                viewer,
                session_ttl_s: args.session_ttl_secs,
                max_failures: args.login_max_failures,
                cookie_secure: args.cookie_secure,
                trust_forwarded: args.trust_forwarded,
                max_password_checks: args.max_password_checks,
                // 0 only from `AdminArgs::default()` (the flag's range starts at 1).
                bulk_limit: match args.bulk_limit {
                    0 => queue::DEFAULT_BULK_LIMIT,
                    n => n,
                },
                gone_after_ms: i64::try_from(heartbeat_ms.saturating_mul(2)).unwrap_or(i64::MAX),
            }),
            // 0 only from `AdminArgs::default()` (the flag's range starts at 100).
            quiet_refresh: match args.admin_quiet_refresh_ms {
                0 => events::QUIET_REFRESH,
                ms => std::time::Duration::from_millis(ms),
            },
        })
    }
}

/// Runs a `repoll admin` command.
pub async fn run(command: AdminCommand) -> Result<(), crate::serve::ServeError> {
    match command {
        AdminCommand::HashPassword => {
            password::hash_password_command().map_err(crate::serve::ServeError::Config)
        }
        AdminCommand::Migrate(args) => {
            let url = args.redis.redis_url.clone().unwrap_or_default();
            if url.is_empty() {
                return Err(crate::serve::ServeError::Config(
                    "repoll admin migrate needs REDIS_URL (or --redis-url)".into(),
                ));
            }
            let q = crate::serve::open_queue(&args.redis, &url).await?;
            let m = q
                .migrate()
                .await
                .map_err(|e| crate::serve::ServeError::Config(format!("migrate: {e}")))?;
            println!(
                "migrated {} task records and {} results ({} keys looked at)",
                m.records, m.results, m.scanned
            );
            Ok(())
        }
        AdminCommand::Repartition(args) => {
            let config = crate::serve::ServeError::Config;
            let url = args.redis.redis_url.clone().unwrap_or_default();
            if url.is_empty() {
                return Err(config(
                    "repoll admin repartition needs REDIS_URL (or --redis-url)".into(),
                ));
            }
            // A connection of its own: the queue handle refuses a count it was not created
            // with, and this command reads both.
            let seeds = crate::cli::RedisArgs::seed_urls(&url);
            let conn: queue::RedisConn = if args.redis.redis_cluster {
                redis::cluster::ClusterClient::new(seeds)
                    .map_err(|e| config(format!("repartition: {e}")))?
                    .get_async_connection()
                    .await
                    .map_err(|e| config(format!("repartition: {e}")))?
                    .into()
            } else {
                redis::Client::open(url.as_str())
                    .map_err(|e| config(format!("repartition: {e}")))?
                    .get_connection_manager()
                    .await
                    .map_err(|e| config(format!("repartition: {e}")))?
                    .into()
            };
            let r = queue::Queue::repartition(conn, args.redis.queue_config(), args.to)
                .await
                .map_err(|e| config(format!("{e}")))?;
            println!(
                "queue {:?}: {} -> {} partitions; moved {} stored results and {} histories",
                args.redis.queue, r.from, r.to, r.results, r.histories
            );
            Ok(())
        }
    }
}

/// Anonymous visitors of an admin page get a real redirect (303 to the sign-in page) at the
/// HTTP level, before anything is rendered: the page itself would refuse its data, but a
/// client without JavaScript, a crawler or a script should not get a 200 page at all.
/// Server functions (`/admin/fn/*`, which answer 401 themselves), the live stream (401) and
/// the sign-in page pass through.
pub async fn page_guard(
    axum::extract::State(state): axum::extract::State<WebState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let path = req.uri().path();
    let page = (path == "/admin" || path.starts_with("/admin/"))
        && path != "/admin/login"
        && !path.starts_with("/admin/fn/")
        && path != "/admin/events"
        && matches!(
            *req.method(),
            axum::http::Method::GET | axum::http::Method::HEAD
        );
    if page {
        let signed_in = match app::auth::cookie_id(req.headers()) {
            None => Ok(false),
            Some(id) => app::auth::Sessions::of(&state.app.queue)
                .get(&id)
                .await
                .map(|s| s.is_some()),
        };
        match signed_in {
            Ok(true) => {}
            Ok(false) => {
                return axum::response::Redirect::to("/admin/login").into_response();
            }
            Err(e) => {
                tracing::warn!(error = %e, "admin page: session lookup failed");
                return (
                    axum::http::StatusCode::SERVICE_UNAVAILABLE,
                    "Redis is unreachable; try again shortly",
                )
                    .into_response();
            }
        }
    }
    next.run(req).await
}

/// Routes of the admin side (the pages themselves are Leptos routes).
pub fn router() -> Router<WebState> {
    Router::new().route("/admin/events", get(events::stream))
}
