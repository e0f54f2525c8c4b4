//! The admin dashboard's settings and state, kept apart from its handlers so the process
//! state (`crate::state::WebState`) can hold them without importing any route.

use std::time::Duration;

use app::auth::{AuthConfig, AuthSettings, Credential};
use clap::Args;

use super::password;

/// After this long without any event the stream sends `changed` anyway. Some state changes
/// with time alone and publishes nothing: a waiting task becomes ready when its due time
/// passes, a lease becomes stuck when its deadline passes, a worker killed without a goodbye
/// becomes "gone" when its heartbeat ages; relative times ("3 s ago") move too. One re-read
/// per open page every few seconds while nothing else happens keeps all of them current.
pub const QUIET_REFRESH: Duration = Duration::from_secs(5);

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
    #[arg(long, env = "REPOLL_COOKIE_SECURE", value_parser = crate::settings::OnOff,
          action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true,
          default_value = "false", default_missing_value = "true")]
    pub cookie_secure: bool,

    /// repoll runs behind one reverse proxy that appends the client's address to
    /// X-Forwarded-For and sets X-Forwarded-Proto: every per-client limit (API rate, sign-in
    /// attempts, live streams) then keys on the last X-Forwarded-For entry, and the session
    /// cookie follows X-Forwarded-Proto. Off: the TCP peer, headers ignored.
    #[arg(long, env = "REPOLL_TRUST_FORWARDED", value_parser = crate::settings::OnOff,
          action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true,
          default_value = "false", default_missing_value = "true")]
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
          default_value_t = QUIET_REFRESH.as_millis() as u64,
          value_parser = clap::value_parser!(u64).range(100..=86_400_000))]
    pub admin_quiet_refresh_ms: u64,

    /// Every admin page's attention strip names an upstream whose oldest ready task has
    /// waited longer than this many seconds (while workers poll and nothing else explains it).
    #[arg(long, env = "REPOLL_ADMIN_ATTENTION_READY_SECS",
          default_value_t = (model::attention::DEFAULT_READY_AGE_MS / 1000) as u64,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub admin_attention_ready_secs: u64,
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
            .field(
                "admin_attention_ready_secs",
                &self.admin_attention_ready_secs,
            )
            .finish()
    }
}

/// State the admin handlers need beyond [`WebState`]'s shared parts. `Default` has no
/// passwords, so nobody can sign in (tests configure their own).
#[derive(Clone, Default)]
pub struct AdminState {
    /// Shared with the server functions through `AppContext::admin`.
    pub auth: AuthConfig,
    /// The live stream's quiet refresh (REPOLL_ADMIN_QUIET_REFRESH_MS, default
    /// [`QUIET_REFRESH`]); a setting so a test can tell a change-driven event from a
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
                // 0 only from `AdminArgs::default()` (the flag's range starts at 1).
                attention_ready_age_ms: match args.admin_attention_ready_secs {
                    0 => model::attention::DEFAULT_READY_AGE_MS,
                    s => i64::try_from(s.saturating_mul(1000)).unwrap_or(i64::MAX),
                },
            }),
            // 0 only from `AdminArgs::default()` (the flag's range starts at 100).
            quiet_refresh: match args.admin_quiet_refresh_ms {
                0 => QUIET_REFRESH,
                ms => std::time::Duration::from_millis(ms),
            },
        })
    }
}
