//! The `repoll` binary's library: everything `main.rs` wires together, kept in a library so
//! integration tests can build the same router and start the same pieces.
//!
//! A tour of the modules:
//! - [`api`]: the public JSON API `/api/v1` and the per-query live stream.
//! - [`admin`]: sign-in, sessions, cross-site protection, the dashboard's live stream.
//! - [`body_limit`]: `REPOLL_BODY_LIMIT` for every route without a limit of its own; each
//!   413 names the limit that fired.
//! - [`cli`]: the command line (clap) — every setting is a flag and an environment variable.
//! - [`config_file`]: `--config <file>` — the same settings from a TOML file.
//! - [`upstreams`]: named upstreams (`[upstreams.<name>]` sections), a queue each.
//! - [`managed_redis`]: with no `REDIS_URL`, `repoll serve` runs its own `redis-server` child
//!   (append-only file under `./data/redis`) and stops it on exit.
//! - [`metrics`]: `GET /metrics` from the worker's Prometheus recorder.
//! - [`live_hub`]: one Redis Pub/Sub subscription fanned out to the live (SSE) streams, per task,
//!   and the caps on open streams.
//! - [`web`]: the axum router — Leptos pages and server functions, health endpoints, and the
//!   tower-http layers (trace, body limit, timeout, panic to 500).
//! - [`refusals`]: what a refused request may write — counted always, logged a few a
//!   second, its text clipped (a log flood needs neither).
//! - [`security`]: response headers (CSP with per-response nonces, framing, sniffing,
//!   referrer), JSON errors for every API 4xx, redirects kept on our own paths.
//! - [`theme`]: `POST /theme`, the colour theme toggle without JavaScript (cookie, redirect
//!   back to a path of this site only).
//! - [`http_server`]: the accept loop — connection cap, header-read/idle timeout,
//!   `TCP_NODELAY`, drain; [`conn`]: the handle a request gets to close its own connection.
//! - [`shutdown`]: one cancellation token fed by SIGINT/SIGTERM, shared by every task.
//! - [`serve`]: the `repoll serve` command — Redis, router, embedded workers and simulator,
//!   listener, graceful drain.
//! - [`registry`]: the web process's heartbeat into its queues' process registries.
//! - [`work`]: the `repoll worker` command — a worker process without the web app.
//! - [`simulate`]: the `repoll sim` command — the simulated upstream API.
//! - [`traces`]: logging (text or JSON lines) and OpenTelemetry trace export, per process.
//! - [`settings`]: the settings every command shares (Redis, breaker, tenants).
//! - [`startup`]: opening the queue, Pub/Sub clients and the listener; the commands' error.
//! - [`state`]: the process state every handler shares (`WebState`).
//!
//! The modules form layers with no import circle (checked by `server/tests/import_layers.rs`):
//! `settings` at the bottom; then `config_file`, `upstreams`, `live_hub`, `managed_redis`,
//! `startup`; then the state (`state`, `api::state`, `admin::state`) and `api::error`; the
//! routes and handlers (`api`, `admin`, `theme`, `web`, `security`, `http_server`) above them; and the
//! commands (`cli`, `serve`, `work`, `simulate`, with `registry`) at the top.

pub mod admin;
pub mod api;
pub mod body_limit;
pub mod cli;
pub mod config_file;
pub mod conn;
pub mod http_server;
pub mod live_hub;
pub mod managed_redis;
pub mod metrics;
pub mod refusals;
pub mod registry;
pub mod security;
pub mod serve;
pub mod settings;
pub mod shutdown;
pub mod simulate;
pub mod startup;
pub mod state;
pub mod theme;
pub mod traces;
pub mod upstreams;
pub mod web;
pub mod work;
