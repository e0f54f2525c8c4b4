//! A simulated asynchronous third-party API ("upstream") for repoll's demo and tests.
//!
//! `GET /api/query?q=<key>` answers `{"status": "processing" | "done", "data": ...}`: partial
//! data that grows with every poll while the key is processing, the full data once it is done.
//! A key is done after a number of polls or milliseconds (flags, or per-key overrides, see
//! [`overrides`]); fault knobs inject the failures a real API shows (5xx, 429 + `Retry-After`,
//! malformed JSON, wrong shapes, latency, hangs, connection resets).
//!
//! `GET /_sim/stats` is the witness the tests read: `{"calls": n, "keys": {"<key>": {"calls": n,
//! "done": d}}}` — how often each key was called and how often it answered `done`.
//! `GET /_sim/key?q=<key>` adds the call times of one key (to measure gaps between polls) and
//! `POST /_sim/reset` forgets everything.

pub mod faults;
pub mod handlers;
pub mod overrides;
pub mod state;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::routing::{get, post};

/// Settings of the simulator: every flag also reads a `REPOLL_SIM_*` environment variable.
///
/// Flags are prefixed `--sim-` so the struct can be flattened into `repoll serve --sim` next to
/// the web server's own flags without clashing.
#[derive(clap::Args, Clone, Debug)]
pub struct SimArgs {
    /// Polls a key answers `processing` before it answers `done` on the next one
    /// (`polls=3`: calls 1 and 2 are processing, call 3 is done). Per-key override: `polls=`.
    #[arg(long = "sim-polls", env = "REPOLL_SIM_POLLS", default_value_t = 3)]
    pub polls: u32,
    /// If not 0, a key is done this many milliseconds after its first call instead of after a
    /// number of polls. Per-key override: `ms=`.
    #[arg(long = "sim-ms", env = "REPOLL_SIM_MS", default_value_t = 0)]
    pub ms: u64,
    /// Items in a key's full data (partial data carries a growing prefix of them).
    #[arg(long = "sim-items", env = "REPOLL_SIM_ITEMS", default_value_t = 5)]
    pub items: u32,
    /// Probability (0..1) of an HTTP 500 or 503 (half each).
    #[arg(
        long = "sim-error-rate",
        env = "REPOLL_SIM_ERROR_RATE",
        default_value_t = 0.0
    )]
    pub error_rate: f64,
    /// Probability of an HTTP 429 with a `Retry-After` header.
    #[arg(
        long = "sim-429-rate",
        env = "REPOLL_SIM_429_RATE",
        default_value_t = 0.0
    )]
    pub rate_limit_rate: f64,
    /// Seconds sent in `Retry-After` with a 429. Per-key override: `retry_after=`.
    #[arg(
        long = "sim-retry-after",
        env = "REPOLL_SIM_RETRY_AFTER",
        default_value_t = 1
    )]
    pub retry_after_s: u64,
    /// Probability of a 200 whose body is not JSON.
    #[arg(
        long = "sim-malformed-rate",
        env = "REPOLL_SIM_MALFORMED_RATE",
        default_value_t = 0.0
    )]
    pub malformed_rate: f64,
    /// Probability of a 200 with valid JSON of the wrong shape (no `status`).
    #[arg(
        long = "sim-wrong-shape-rate",
        env = "REPOLL_SIM_WRONG_SHAPE_RATE",
        default_value_t = 0.0
    )]
    pub wrong_shape_rate: f64,
    /// Fixed latency added to every answer, in milliseconds.
    #[arg(
        long = "sim-latency-ms",
        env = "REPOLL_SIM_LATENCY_MS",
        default_value_t = 0
    )]
    pub latency_ms: u64,
    /// Random latency added on top, uniform in 0..=this many milliseconds.
    #[arg(
        long = "sim-latency-jitter-ms",
        env = "REPOLL_SIM_LATENCY_JITTER_MS",
        default_value_t = 0
    )]
    pub latency_jitter_ms: u64,
    /// Probability that a request hangs for `--sim-hang-ms` (longer than any client timeout).
    #[arg(
        long = "sim-hang-rate",
        env = "REPOLL_SIM_HANG_RATE",
        default_value_t = 0.0
    )]
    pub hang_rate: f64,
    /// How long a hang lasts before the simulator answers 504.
    #[arg(
        long = "sim-hang-ms",
        env = "REPOLL_SIM_HANG_MS",
        default_value_t = 60_000
    )]
    pub hang_ms: u64,
    /// Probability that the connection is cut in the middle of the answer.
    #[arg(
        long = "sim-reset-rate",
        env = "REPOLL_SIM_RESET_RATE",
        default_value_t = 0.0
    )]
    pub reset_rate: f64,
    /// Seed of the fault dice; unset = a random seed. Data is always deterministic per key.
    #[arg(long = "sim-seed", env = "REPOLL_SIM_SEED")]
    pub seed: Option<u64>,
}

impl Default for SimArgs {
    /// The same values as the flags' defaults: done after 3 polls, no faults.
    fn default() -> Self {
        SimArgs {
            polls: 3,
            ms: 0,
            items: 5,
            error_rate: 0.0,
            rate_limit_rate: 0.0,
            retry_after_s: 1,
            malformed_rate: 0.0,
            wrong_shape_rate: 0.0,
            latency_ms: 0,
            latency_jitter_ms: 0,
            hang_rate: 0.0,
            hang_ms: 60_000,
            reset_rate: 0.0,
            seed: None,
        }
    }
}

/// The simulator's routes, with fresh in-memory state. Mount it anywhere (it uses absolute paths
/// `/api/query`, `/_sim/stats`, `/_sim/key`, `/_sim/reset`).
pub fn router(args: SimArgs) -> axum::Router {
    let state = Arc::new(state::SimState::new(args));
    axum::Router::new()
        .route("/api/query", get(handlers::query))
        .route("/_sim/stats", get(handlers::stats))
        .route("/_sim/key", get(handlers::key_detail))
        .route("/_sim/reset", post(handlers::reset))
        .with_state(state)
}

/// How long [`serve`] lets in-flight requests finish after `shutdown` before it returns anyway:
/// a simulated hang lasts a minute, and a stopping simulator must not wait for it.
const SHUTDOWN_DRAIN: Duration = Duration::from_secs(1);

/// Serves [`router`] on `listener` until `shutdown` completes, then gives in-flight requests up
/// to one second (hangs are cut short) and returns.
pub async fn serve(
    listener: tokio::net::TcpListener,
    args: SimArgs,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let stop = Arc::new(tokio::sync::Notify::new());
    let graceful = {
        let stop = stop.clone();
        async move {
            shutdown.await;
            stop.notify_waiters();
        }
    };
    // `notified()` is created before the server can call `notify_waiters`, so no wake is lost.
    let stopped = stop.notified();
    let server = axum::serve(listener, router(args)).with_graceful_shutdown(graceful);
    tokio::select! {
        res = server => res,
        _ = async { stopped.await; tokio::time::sleep(SHUTDOWN_DRAIN).await } => Ok(()),
    }
}
