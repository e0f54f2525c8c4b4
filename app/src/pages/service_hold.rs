//! What holds the service of a query's upstream (a pause, an open breaker, no worker), and the server
//! function that reads it. Its own module, below the query page and its browser-only follower
//! (`query_live`): the page reads it for its first render, the follower re-asks every few
//! seconds, and neither then names the other for it.

use leptos::prelude::*;

/// What holds the service of a query's upstream, for its page: a pause (an operator stopped
/// its workers) or an open circuit breaker (the upstream failed too often; claims wait until
/// the cool-down ends and a probe goes). A query then waits, and its page says why instead of
/// "next poll due now" for minutes. Only these facts, nothing of the breaker's cause, nothing
/// of the workers but whether one runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ServiceState {
    pub paused: bool,
    /// The breaker is open: when its cool-down ends (ms since the epoch) and a probe may go.
    pub breaker_until: Option<i64>,
    /// No worker of the upstream is running (none reports in, or every one is quiet or
    /// stopping): nothing is polling right now (`model::attention`, the dashboard's rule).
    #[serde(default)]
    pub unpolled: bool,
}

/// The [`ServiceState`] of query `id`'s upstream (an EXISTS, an HGETALL, the workers' entries
/// and Redis's clock).
#[server]
pub async fn service_hold(id: String) -> Result<ServiceState, ServerFnError> {
    let ctx = crate::context::app_context()?;
    let unavailable = |e: queue::QueueError| {
        tracing::warn!(error = %e, "pause and breaker check failed");
        ServerFnError::new("the queue is unavailable")
    };
    // Not an id: the default upstream's answer (nothing else to go by).
    let q = match id.parse::<crate::query_view::TaskId>() {
        Ok(id) => ctx.queue_of_task(&id).await.map_err(unavailable)?,
        Err(_) => &ctx.queue,
    };
    let (paused, breaker, workers, now) =
        tokio::join!(q.is_paused(), q.breaker(), q.workers(), q.now_ms());
    let (paused, breaker) = (paused.map_err(unavailable)?, breaker.map_err(unavailable)?);
    let (workers, now) = (workers.map_err(unavailable)?, now.map_err(unavailable)?);
    let gone_after = ctx.admin.settings().gone_after_ms;
    Ok(ServiceState {
        paused,
        breaker_until: breaker.map(|b| b.until_ms),
        unpolled: !model::attention::any_running(&workers, now, gone_after),
    })
}
