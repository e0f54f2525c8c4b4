//! `repoll worker`: a worker process only — no web app. Runs on any host that reaches the
//! same Redis; several of them (and the web process's embedded workers) share the queue
//! safely because every claim is a lease with a fencing token.

use crate::{
    cli::WorkerCmdArgs,
    shutdown,
    startup::{open_queue, pubsub_client, upstream_queue, worker_refusal, ServeError},
};

/// Runs the worker until SIGINT/SIGTERM or an admin's stop, then releases unfinished leases
/// and exits.
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
    let callbacks = worker::Callbacks::new(&args.callback)?;
    let plans = crate::upstreams::plans(&args.redis, &args.upstream, &args.policy, &args.upstreams);
    let plans =
        crate::upstreams::select(plans, &args.only_upstreams).map_err(ServeError::Config)?;
    // Every upstream's settings are checked before Redis is reached: a start that cannot work
    // stops at once, naming the setting, even with Redis down.
    let upstreams = plans
        .iter()
        .map(|plan| worker::Upstream::new(&plan.upstream))
        .collect::<Result<Vec<_>, _>>()?;
    let queue = open_queue(&args.redis, &url).await?;
    if let Some(addr) = args.metrics_addr {
        worker::install_prometheus();
        tokio::spawn(async move {
            if let Err(e) = crate::metrics::serve_metrics(addr).await {
                tracing::error!(error = %e, %addr, "metrics endpoint failed");
            }
        });
    }
    // One worker per upstream served, each with its own slots, sharing the stop signal and
    // the admin's quiet / stop switch (a stop read by any of them ends the process, exit 0).
    // Every setting is checked before the first one starts.
    let control = worker::Control::new();
    let mut workers = Vec::with_capacity(plans.len());
    for (plan, upstream) in plans.iter().zip(upstreams) {
        let q = upstream_queue(&queue, plan, &url).await?;
        let mut wargs = args.worker.clone();
        wargs.concurrency = plan.concurrency.unwrap_or(wargs.concurrency);
        let w = worker::Worker::new(
            q,
            pubsub_client(&url)?,
            upstream,
            plan.policy.clone(),
            wargs,
        )
        .with_callbacks(callbacks.as_ref().map(|c| c.for_upstream(&plan.name)))
        .with_control(control.clone());
        w.check().map_err(worker_refusal)?;
        tracing::info!(worker = w.id(), upstream = %plan.name, "worker ready");
        workers.push(w);
    }
    let mut running = tokio::task::JoinSet::new();
    for w in workers {
        let stop = stop.clone();
        running.spawn(async move { w.run(stop.cancelled_owned()).await });
    }
    let mut first_error = None;
    while let Some(joined) = running.join_next().await {
        match joined {
            Ok(Ok(report)) => tracing::info!(?report, "worker stopped"),
            Ok(Err(e)) => {
                tracing::error!(error = %e, "worker failed");
                // One upstream's worker failing stops the process: a supervisor restarts it
                // whole, rather than it running on with some upstreams unserved.
                stop.cancel();
                first_error.get_or_insert(e);
            }
            Err(e) => tracing::error!(error = %e, "worker task panicked"),
        }
    }
    first_error.map_or(Ok(()), |e| Err(e.into()))
}
