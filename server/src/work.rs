//! `repoll worker`: a worker process only — no web app. Runs on any host that reaches the
//! same Redis; several of them (and the web process's embedded workers) share the queue
//! safely because every claim is a lease with a fencing token.

use crate::{
    cli::WorkerCmdArgs,
    serve::{open_queue, pubsub_client, ServeError},
    shutdown,
};

/// Runs the worker until SIGINT/SIGTERM, then releases unfinished leases and exits.
pub async fn run(args: WorkerCmdArgs) -> Result<(), ServeError> {
    let stop = shutdown::on_signal();
    let url =
        match &args.redis.redis_url {
            Some(url) if !url.is_empty() => url.clone(),
            _ => return Err(ServeError::Config(
                "repoll worker needs REDIS_URL (or --redis-url): the Redis that `repoll serve` \
                 uses; a worker never starts a Redis of its own"
                    .into(),
            )),
        };
    let queue = open_queue(&args.redis, &url).await?;
    if let Some(addr) = args.metrics_addr {
        worker::install_prometheus();
        tokio::spawn(async move {
            if let Err(e) = crate::metrics::serve_metrics(addr).await {
                tracing::error!(error = %e, %addr, "metrics endpoint failed");
            }
        });
    }
    let upstream = worker::Upstream::new(&args.upstream)?;
    let pubsub = pubsub_client(&url)?;
    let callbacks = worker::Callbacks::new(&args.callback)?;
    let w = worker::Worker::new(queue, pubsub, upstream, args.policy, args.worker)
        .with_callbacks(callbacks);
    tracing::info!(worker = w.id(), "worker started");
    let report = w.run(stop.cancelled_owned()).await?;
    tracing::info!(?report, "worker stopped");
    Ok(())
}
