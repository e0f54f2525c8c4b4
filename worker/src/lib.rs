//! repoll's workers: claim due tasks, poll the upstream API, reschedule, retry, dead-letter.
//!
//! - [`upstream`]: the configurable HTTP client and how an answer is read.
//! - [`policy`]: poll / deadline / error policies as pure functions.
//! - [`runtime`]: the [`Worker`] claim loop, leases and graceful shutdown.
//! - [`control`]: the quiet / stop switch an admin works through Redis.
//! - [`telemetry`]: metric names and the Prometheus recorder.
//!
//! Wiring, as a binary does it:
//! ```no_run
//! # async fn demo(queue: queue::Queue) -> Result<(), Box<dyn std::error::Error>> {
//! use worker::{PolicyArgs, Upstream, UpstreamArgs, Worker, WorkerArgs};
//! let upstream = Upstream::new(&UpstreamArgs::default())?;
//! let pubsub = redis::Client::open("redis://127.0.0.1:6379")?;
//! let w = Worker::new(queue, pubsub, upstream, PolicyArgs::default(), WorkerArgs::default());
//! let report = w.run(async { let _ = tokio::signal::ctrl_c().await; }).await?;
//! # let _ = report; Ok(()) }
//! ```

pub mod callback;
mod cancels;
pub mod control;
mod ctx;
pub mod policy;
pub mod runtime;
mod task;
pub mod telemetry;
pub mod trace_spans;
mod upkeep;
pub mod upstream;
mod wake;

pub use callback::{CallbackArgs, CallbackToken, Callbacks};
pub use control::Control;
pub use policy::{Next, PolicyArgs};
pub use runtime::{default_worker_id, host_name, Worker, WorkerArgs, WorkerError, WorkerReport};
pub use telemetry::install_prometheus;
pub use upstream::{
    simulator_url, Answer, ConfigError, JobApi, JobArgs, RateLimit, Secret, StatusFallback,
    Upstream, UpstreamArgs, UpstreamError, WebhookMode, Webhooks, WEBHOOK_REPLAY_MEMORY_MS,
};

/// A settings struct with every field at its flag's default, the environment ignored: what
/// `Default` returns, so a default is written once, in the `#[arg]` attribute. Public for the
/// server's settings structs (one helper for every crate).
pub fn clap_defaults<T: clap::Args + clap::FromArgMatches>() -> T {
    let cmd = T::augment_args(clap::Command::new("defaults")).mut_args(|a| a.env(None::<&str>));
    T::from_arg_matches(&cmd.get_matches_from(["defaults"])).expect("every flag has a default")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    /// Everything `repoll serve --sim --workers C` flattens into one command.
    #[derive(Parser, Debug)]
    struct All {
        #[command(flatten)]
        upstream: UpstreamArgs,
        #[command(flatten)]
        policy: PolicyArgs,
        #[command(flatten)]
        worker: WorkerArgs,
        #[command(flatten)]
        sim: sim::SimArgs,
    }

    #[test]
    fn flags_do_not_clash_and_every_one_has_a_default() {
        All::command().debug_assert();
        // `Default` of each part is built from the flags alone (`clap_defaults`), which needs
        // every flag to have a default or be optional: this builds them all, env ignored.
        let _ = (
            PolicyArgs::default(),
            WorkerArgs::default(),
            UpstreamArgs::default(),
            sim::SimArgs::default(),
        );
    }
}
