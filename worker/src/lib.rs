//! repoll's workers: claim due tasks, poll the upstream API, reschedule, retry, dead-letter.
//!
//! - [`upstream`]: the configurable HTTP client and how an answer is read.
//! - [`policy`]: poll / deadline / error policies as pure functions.
//! - [`runtime`]: the [`Worker`] claim loop, leases and graceful shutdown.
//! - [`telemetry`]: metric names and the Prometheus endpoint.
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

pub mod policy;
pub mod runtime;
mod task;
pub mod telemetry;
mod upkeep;
pub mod upstream;
mod wake;

pub use policy::{Next, PolicyArgs};
pub use runtime::{default_worker_id, Worker, WorkerArgs, WorkerError, WorkerReport};
pub use telemetry::{install_prometheus, metrics_router, serve_metrics};
pub use upstream::{Answer, ConfigError, RateLimit, Upstream, UpstreamArgs, UpstreamError};

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, FromArgMatches, Parser};

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
    fn flags_do_not_clash_and_defaults_match() {
        All::command().debug_assert();
        // Defaults from clap equal the `Default` impls. The command is parsed with every
        // `env = "REPOLL_*"` link removed, so variables set where the test runs cannot
        // change what is compared (nor skip the comparison).
        let cmd = All::command().mut_args(|a| a.env(None::<&'static str>));
        assert!(
            cmd.get_arguments().all(|a| a.get_env().is_none()),
            "environment links removed"
        );
        let matches = cmd.try_get_matches_from(["repoll"]).expect("parse");
        let all = All::from_arg_matches(&matches).expect("from matches");
        assert_eq!(all.policy, PolicyArgs::default());
        assert_eq!(all.worker, WorkerArgs::default());
        assert_eq!(
            format!("{:?}", all.upstream),
            format!("{:?}", UpstreamArgs::default())
        );
        assert_eq!(
            format!("{:?}", all.sim),
            format!("{:?}", sim::SimArgs::default())
        );
    }
}
