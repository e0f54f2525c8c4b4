//! The admin side, server half: configuration and sign-in settings, cross-site protection of
//! every state-changing request, the dashboard's live stream, and `repoll admin`.
//!
//! The pages and their server functions live in the app crate (`app::pages::admin`), the
//! session and password checks in `app::auth`; this module wires them into the process:
//!
//! - [`same_origin`]: the middleware that refuses cross-site POSTs (403) before any handler.
//! - [`events`]: `GET /admin/events`, Server-Sent Events that tell open pages to re-read.
//! - [`password`]: `repoll admin hash-password`.
//! - [`state`]: the dashboard's settings and state (below the handlers: `crate::state` holds it).

pub mod events;
pub mod password;
pub mod same_origin;
pub mod state;

use axum::{routing::get, Router};
use clap::Subcommand;

use crate::state::WebState;

pub use same_origin::guard as same_origin_guard;
pub use state::{AdminArgs, AdminState};

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
    /// results, histories and chart counters are moved; refused while a task is live or any
    /// repoll process of the queue (web or worker) runs. Stop them all first, then start them
    /// with the new count. Resumable. Needs REDIS_URL.
    Repartition(Box<RepartitionArgs>),
}

/// `repoll admin repartition`.
#[derive(Debug, Clone, clap::Args)]
pub struct RepartitionArgs {
    #[command(flatten)]
    pub redis: crate::settings::RedisArgs,
    /// The new partition count.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=i64::from(queue::MAX_PARTITIONS)))]
    pub to: u16,
}

/// `repoll admin migrate`.
#[derive(Debug, Clone, clap::Args)]
pub struct MigrateArgs {
    #[command(flatten)]
    pub redis: crate::settings::RedisArgs,
}

/// Runs a `repoll admin` command.
pub async fn run(command: AdminCommand) -> Result<(), crate::startup::ServeError> {
    match command {
        AdminCommand::HashPassword => {
            password::hash_password_command().map_err(crate::startup::ServeError::Config)
        }
        AdminCommand::Migrate(args) => {
            let url = args.redis.redis_url.clone().unwrap_or_default();
            if url.is_empty() {
                return Err(crate::startup::ServeError::Config(
                    "repoll admin migrate needs REDIS_URL (or --redis-url)".into(),
                ));
            }
            let q = crate::startup::open_queue(&args.redis, &url).await?;
            let m = q
                .migrate()
                .await
                .map_err(|e| crate::startup::ServeError::Config(format!("migrate: {e}")))?;
            println!(
                "migrated {} task records and {} results ({} keys looked at)",
                m.records, m.results, m.scanned
            );
            Ok(())
        }
        AdminCommand::Repartition(args) => {
            let config = crate::startup::ServeError::Config;
            let url = args.redis.redis_url.clone().unwrap_or_default();
            if url.is_empty() {
                return Err(config(
                    "repoll admin repartition needs REDIS_URL (or --redis-url)".into(),
                ));
            }
            // A connection of its own: the queue handle refuses a count it was not created
            // with, and this command reads both.
            let seeds = crate::settings::RedisArgs::seed_urls(&url);
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
            Some(id) => app::auth::Sessions::of(&state.app)
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
                    format!("{}; try again shortly", model::REDIS_UNREACHABLE),
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
