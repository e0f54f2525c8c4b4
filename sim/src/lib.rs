//! A simulated asynchronous third-party API ("upstream") for repoll's demo and tests.
//!
//! `GET /api/query?q=<key>` answers `{"status": "processing" | "done", "data": ...}`: partial
//! data that grows with every poll while the key is processing, the full data once it is done.
//! A key is done after a number of polls or milliseconds (flags, or per-key overrides, see
//! [`overrides`]); fault knobs inject the failures a real API shows (5xx, 429 + `Retry-After`,
//! malformed JSON, wrong shapes, latency, hangs, connection resets).
//!
//! Callbacks: a request with `callback=<url>` in its query string (a repoll URL template's
//! `&callback={callback_url}`) is answered as usual, and a key done by time (`ms`) also gets
//! its final answer `POST`ed to that URL when it is done: once per key, loopback URLs only,
//! one try of at most 5 s. `/_sim/key` counts the callbacks that reached their URL.
//!
//! Job-shaped APIs (predictions, operations, long-running operations, transcripts: [`jobs`])
//! send webhooks as their providers do ([`webhooks`]), signed with `--sim-webhook-secret`.
//!
//! `GET /_sim/stats` is the witness the tests read: `{"calls": n, "keys": {"<key>": {"calls": n,
//! "done": d}}}` — how often each key was called and how often it answered `done`.
//! `GET /_sim/key?q=<key>` adds the call times of one key (to measure gaps between polls) and
//! `POST /_sim/reset` forgets everything.
//!
//! The simulator cannot hurt its host: every knob is bounded ([`limits`]; a flag out of range
//! stops the start, an override out of range is a 400), it remembers at most `--sim-max-keys`
//! keys, handles at most `--sim-max-concurrency` requests at once (503 beyond), answers 504
//! after [`limits::REQUEST_TIMEOUT`], and a panicking handler becomes a 500 for its request.

pub mod fault_answer;
pub mod faults;
pub mod handlers;
pub mod job_book;
pub mod jobs;
pub mod limits;
pub mod overrides;
pub mod state;
pub mod webhooks;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Json;
use serde_json::json;
use tokio::sync::Semaphore;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::timeout::TimeoutLayer;

use limits::*;

/// Settings of the simulator: every flag also reads a `REPOLL_SIM_*` environment variable.
///
/// Flags are prefixed `--sim-` so the struct can be flattened into `repoll serve --sim` next to
/// the web server's own flags without clashing.
#[derive(clap::Args, Clone, Debug)]
pub struct SimArgs {
    /// Polls a key answers `processing` before it answers `done` on the next one
    /// (`polls=3`: calls 1 and 2 are processing, call 3 is done). Per-key override: `polls=`.
    #[arg(long = "sim-polls", env = "REPOLL_SIM_POLLS", default_value_t = 3,
          value_parser = clap::value_parser!(u32).range(0..=i64::from(MAX_POLLS)))]
    pub polls: u32,
    /// If not 0, a key is done this many milliseconds after its first call instead of after a
    /// number of polls. Per-key override: `ms=`.
    #[arg(long = "sim-ms", env = "REPOLL_SIM_MS", default_value_t = 0,
          value_parser = clap::value_parser!(u64).range(0..=MAX_MS))]
    pub ms: u64,
    /// Items in a key's full data (partial data carries a growing prefix of them).
    #[arg(long = "sim-items", env = "REPOLL_SIM_ITEMS", default_value_t = 5,
          value_parser = clap::value_parser!(u32).range(0..=i64::from(MAX_ITEMS)))]
    pub items: u32,
    /// Probability (0..1) of an HTTP 500 or 503 (half each).
    #[arg(
        long = "sim-error-rate",
        env = "REPOLL_SIM_ERROR_RATE",
        default_value_t = 0.0,
        value_parser = parse_rate
    )]
    pub error_rate: f64,
    /// Probability of an HTTP 429 with a `Retry-After` header.
    #[arg(
        long = "sim-429-rate",
        env = "REPOLL_SIM_429_RATE",
        default_value_t = 0.0,
        value_parser = parse_rate
    )]
    pub rate_limit_rate: f64,
    /// Seconds sent in `Retry-After` with a 429. Per-key override: `retry_after=`.
    #[arg(
        long = "sim-retry-after",
        env = "REPOLL_SIM_RETRY_AFTER",
        default_value_t = 1,
        value_parser = clap::value_parser!(u64).range(0..=MAX_RETRY_AFTER_S)
    )]
    pub retry_after_s: u64,
    /// Probability of a 200 whose body is not JSON.
    #[arg(
        long = "sim-malformed-rate",
        env = "REPOLL_SIM_MALFORMED_RATE",
        default_value_t = 0.0,
        value_parser = parse_rate
    )]
    pub malformed_rate: f64,
    /// Probability of a 200 with valid JSON of the wrong shape (no `status`).
    #[arg(
        long = "sim-wrong-shape-rate",
        env = "REPOLL_SIM_WRONG_SHAPE_RATE",
        default_value_t = 0.0,
        value_parser = parse_rate
    )]
    pub wrong_shape_rate: f64,
    /// Fixed latency added to every answer, in milliseconds.
    #[arg(
        long = "sim-latency-ms",
        env = "REPOLL_SIM_LATENCY_MS",
        default_value_t = 0,
        value_parser = clap::value_parser!(u64).range(0..=MAX_LATENCY_MS)
    )]
    pub latency_ms: u64,
    /// Random latency added on top, uniform in 0..=this many milliseconds.
    #[arg(
        long = "sim-latency-jitter-ms",
        env = "REPOLL_SIM_LATENCY_JITTER_MS",
        default_value_t = 0,
        value_parser = clap::value_parser!(u64).range(0..=MAX_LATENCY_MS)
    )]
    pub latency_jitter_ms: u64,
    /// Probability that a request hangs for `--sim-hang-ms` (longer than any client timeout).
    #[arg(
        long = "sim-hang-rate",
        env = "REPOLL_SIM_HANG_RATE",
        default_value_t = 0.0,
        value_parser = parse_rate
    )]
    pub hang_rate: f64,
    /// How long a hang lasts before the simulator answers 504.
    #[arg(
        long = "sim-hang-ms",
        env = "REPOLL_SIM_HANG_MS",
        default_value_t = 60_000,
        value_parser = clap::value_parser!(u64).range(0..=MAX_HANG_MS)
    )]
    pub hang_ms: u64,
    /// Probability that the connection is cut in the middle of the answer.
    #[arg(
        long = "sim-reset-rate",
        env = "REPOLL_SIM_RESET_RATE",
        default_value_t = 0.0,
        value_parser = parse_rate
    )]
    pub reset_rate: f64,
    /// Seed of the fault dice; unset = a random seed. Data is always deterministic per key.
    #[arg(long = "sim-seed", env = "REPOLL_SIM_SEED")]
    pub seed: Option<u64>,
    /// Keys remembered for `/_sim/stats`; past this the oldest key is forgotten (so endless
    /// distinct queries cannot grow the simulator's memory).
    #[arg(
        long = "sim-max-keys",
        env = "REPOLL_SIM_MAX_KEYS",
        default_value_t = DEFAULT_MAX_KEYS,
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=MAX_MAX_KEYS as u64)
    )]
    pub max_keys: usize,
    /// Requests handled at once; more are answered 503 with `Retry-After: 1`.
    #[arg(
        long = "sim-max-concurrency",
        env = "REPOLL_SIM_MAX_CONCURRENCY",
        default_value_t = DEFAULT_MAX_CONCURRENCY,
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=MAX_MAX_CONCURRENCY as u64)
    )]
    pub max_concurrency: usize,
    /// Signs the job APIs' webhooks the Standard Webhooks way with this secret
    /// (`whsec_<base64>`); unset, they go unsigned.
    #[arg(
        long = "sim-webhook-secret",
        env = "REPOLL_SIM_WEBHOOK_SECRET",
        hide_env_values = true
    )]
    pub webhook_secret: Option<String>,
    /// More simulated upstreams in the same process, each under its own path prefix with its
    /// own state and the same settings: `search` serves `/search/api/query`,
    /// `/search/_sim/stats`, ... (comma-separated; at most 16; names of `a-z 0-9 _ -`).
    #[arg(
        long = "sim-upstreams",
        env = "REPOLL_SIM_UPSTREAMS",
        value_delimiter = ',',
        value_parser = parse_prefix
    )]
    pub upstreams: Vec<String>,
}

/// Most extra simulated upstreams.
pub const MAX_SIM_UPSTREAMS: usize = 16;

/// A path prefix for `--sim-upstreams`: 1 to 32 of `a-z 0-9 _ -`, not `api` or `_sim` (the
/// main upstream's own paths).
fn parse_prefix(s: &str) -> Result<String, String> {
    let s = s.trim();
    let ok = !s.is_empty()
        && s.len() <= 32
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
        && !matches!(s, "api" | "_sim");
    if ok {
        Ok(s.to_string())
    } else {
        Err(format!(
            "{s:?}: 1 to 32 of a-z, 0-9, _ and - (not api or _sim)"
        ))
    }
}

impl Default for SimArgs {
    /// The flags' defaults (their `#[arg]` attributes are the one place a default is written): done after 3 polls, no faults; the environment is not read.
    fn default() -> Self {
        crate::clap_defaults()
    }
}

impl SimArgs {
    /// These settings with every knob brought within its bounds ([`limits`]). Flags are checked
    /// by clap already; this covers a `SimArgs` built in code, so no path skips the limits.
    pub fn clamped(self) -> SimArgs {
        let rate = |r: f64| {
            if r.is_finite() {
                r.clamp(0.0, 1.0)
            } else {
                0.0
            }
        };
        SimArgs {
            polls: self.polls.min(MAX_POLLS),
            ms: self.ms.min(MAX_MS),
            items: self.items.min(MAX_ITEMS),
            error_rate: rate(self.error_rate),
            rate_limit_rate: rate(self.rate_limit_rate),
            retry_after_s: self.retry_after_s.min(MAX_RETRY_AFTER_S),
            malformed_rate: rate(self.malformed_rate),
            wrong_shape_rate: rate(self.wrong_shape_rate),
            latency_ms: self.latency_ms.min(MAX_LATENCY_MS),
            latency_jitter_ms: self.latency_jitter_ms.min(MAX_LATENCY_MS),
            hang_rate: rate(self.hang_rate),
            hang_ms: self.hang_ms.min(MAX_HANG_MS),
            reset_rate: rate(self.reset_rate),
            seed: self.seed,
            max_keys: self.max_keys.clamp(1, MAX_MAX_KEYS),
            max_concurrency: self.max_concurrency.clamp(1, MAX_MAX_CONCURRENCY),
            webhook_secret: self.webhook_secret,
            upstreams: self
                .upstreams
                .into_iter()
                .filter_map(|u| parse_prefix(&u).ok())
                .take(MAX_SIM_UPSTREAMS)
                .collect(),
        }
    }
}

/// The simulator's routes, with fresh in-memory state. Mount it anywhere (it uses absolute paths
/// `/api/query`, `/_sim/stats`, `/_sim/key`, `/_sim/reset`, `/_sim/outage`), and the same under
/// `/<name>` for each of `--sim-upstreams` (each with its own state: several APIs at once).
///
/// Its guards, outermost first: a panic in a handler becomes a 500 for that request; at most
/// `max_concurrency` requests run at once (503 + `Retry-After: 1` beyond, at once); a request
/// running longer than [`REQUEST_TIMEOUT`] is answered 504.
pub fn router(args: SimArgs) -> axum::Router {
    let args = args.clamped();
    // Each extra upstream is the same simulator with its own state, under its prefix.
    let mut app = one_router(SimArgs {
        upstreams: Vec::new(),
        ..args.clone()
    });
    let mut seen = std::collections::HashSet::new();
    for name in &args.upstreams {
        if seen.insert(name.clone()) {
            app = app.nest(
                &format!("/{name}"),
                one_router(SimArgs {
                    upstreams: Vec::new(),
                    ..args.clone()
                }),
            );
        }
    }
    app
}

/// One simulated upstream: its routes, fresh state and guards.
fn one_router(args: SimArgs) -> axum::Router {
    let slots = Arc::new(Semaphore::new(args.max_concurrency));
    let state = Arc::new(state::SimState::new(args));
    axum::Router::new()
        .route("/api/query", get(handlers::query))
        .route("/v1/predictions", post(jobs::predictions_submit))
        .route("/v1/predictions/{id}", get(jobs::predictions_get))
        .route(
            "/v1/predictions/{id}/cancel",
            post(jobs::predictions_cancel),
        )
        .route("/v1/operations", post(jobs::operations_submit))
        .route(
            "/v1/operations/{id}",
            get(jobs::operations_get).post(jobs::operations_post),
        )
        .route("/v1/results/{id}", get(jobs::results_get))
        .route(
            "/v1/models/sim:predictLongRunning",
            post(jobs::long_running_submit),
        )
        .route("/v2/transcript", post(jobs::transcripts_submit))
        .route("/v2/transcript/{id}", get(jobs::transcripts_get))
        // The real APIs' own submit paths, for the recipes (docs/recipes.md): Azure Document
        // Intelligence's `…/documentModels/<model>:analyze`, Vertex AI's
        // `…/models/<model>:predictLongRunning`.
        .route(
            "/documentintelligence/documentModels/{model_action}",
            post(jobs::operations_submit),
        )
        .route(
            "/v1/projects/{project}/locations/{location}/publishers/google/models/{model_action}",
            post(jobs::long_running_submit),
        )
        .route("/_sim/jobs", get(jobs::stats))
        .route("/_sim/jobs/{id}/webhook", post(jobs::resend_webhook))
        .route("/_sim/stats", get(handlers::stats))
        .route("/_sim/key", get(handlers::key_detail))
        .route("/_sim/reset", post(handlers::reset))
        .route("/_sim/outage", post(handlers::outage))
        .with_state(state)
        .layer(TimeoutLayer::with_status_code(
            StatusCode::GATEWAY_TIMEOUT,
            REQUEST_TIMEOUT,
        ))
        .layer(axum::middleware::from_fn(
            move |req: axum::extract::Request, next: axum::middleware::Next| {
                let slots = slots.clone();
                async move {
                    // Held until the answer is produced (or the request is dropped).
                    let Ok(_slot) = slots.try_acquire_owned() else {
                        return busy();
                    };
                    next.run(req).await
                }
            },
        ))
        .layer(CatchPanicLayer::custom(panicked))
}

/// The answer when every request slot is taken.
fn busy() -> Response {
    let mut r = (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(json!({"error": "simulator busy: too many requests at once"})),
    )
        .into_response();
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

/// The answer for a request whose handler panicked; the simulator itself carries on.
fn panicked(err: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let msg = err
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| err.downcast_ref::<&str>().copied())
        .unwrap_or("unknown panic");
    tracing::error!(panic = %msg, "simulator handler panicked; answered 500");
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        Json(json!({"error": format!("simulator panicked: {}", shown(msg))})),
    )
        .into_response()
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

/// A settings struct with every field at its flag's default, the environment ignored: what
/// `Default` returns, so a default is written once, in the `#[arg]` attribute.
pub(crate) fn clap_defaults<T: clap::Args + clap::FromArgMatches>() -> T {
    let cmd = T::augment_args(clap::Command::new("defaults")).mut_args(|a| a.env(None::<&str>));
    T::from_arg_matches(&cmd.get_matches_from(["defaults"])).expect("every flag has a default")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        sim: SimArgs,
    }

    fn parse(args: &[&str]) -> Result<SimArgs, String> {
        Cli::try_parse_from(std::iter::once("sim").chain(args.iter().copied()))
            .map(|c| c.sim)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn flags_out_of_range_stop_the_start() {
        for (flag, value) in [
            ("--sim-items", "4294967295"),
            ("--sim-items", "1001"),
            ("--sim-polls", "10001"),
            ("--sim-ms", "3600001"),
            ("--sim-retry-after", "3601"),
            ("--sim-latency-ms", "30001"),
            ("--sim-latency-jitter-ms", "30001"),
            ("--sim-hang-ms", "120001"),
            ("--sim-error-rate", "1.5"),
            ("--sim-429-rate", "-0.1"),
            ("--sim-hang-rate", "NaN"),
            ("--sim-max-keys", "0"),
            ("--sim-max-keys", "100001"),
            ("--sim-max-concurrency", "0"),
        ] {
            let err = parse(&[&format!("{flag}={value}")]).expect_err(flag);
            assert!(err.contains(flag) && err.contains(value), "{flag}: {err}");
        }
        let ok = parse(&["--sim-items", "1000", "--sim-hang-ms", "120000"]).expect("maxima");
        assert_eq!((ok.items, ok.hang_ms), (1000, 120_000));
    }

    #[test]
    fn args_built_in_code_are_clamped() {
        let a = SimArgs {
            items: u32::MAX,
            polls: u32::MAX,
            ms: u64::MAX,
            hang_ms: u64::MAX,
            latency_ms: u64::MAX,
            error_rate: f64::NAN,
            rate_limit_rate: 7.0,
            max_keys: 0,
            max_concurrency: usize::MAX,
            ..SimArgs::default()
        }
        .clamped();
        assert_eq!((a.items, a.polls, a.ms), (MAX_ITEMS, MAX_POLLS, MAX_MS));
        assert_eq!((a.hang_ms, a.latency_ms), (MAX_HANG_MS, MAX_LATENCY_MS));
        assert_eq!((a.error_rate, a.rate_limit_rate), (0.0, 1.0));
        assert_eq!((a.max_keys, a.max_concurrency), (1, MAX_MAX_CONCURRENCY));
        assert_eq!(
            format!("{:?}", SimArgs::default().clamped()),
            format!("{:?}", SimArgs::default())
        );
    }
}
