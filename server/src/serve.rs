//! `repoll serve`: start (or connect to) Redis, build the router, run the embedded workers
//! and (with `--sim`) the simulated upstream, serve until a signal, then drain in order —
//! stop accepting, let workers release unfinished leases and open requests finish within the
//! grace period, and only then stop the managed Redis so nothing in flight loses its
//! connection.

use std::time::Duration;

use app::context::AppContext;
use tokio_util::sync::CancellationToken;

// Opening Redis and the listener is shared with the other commands (`startup`); the paths
// `serve::open_queue` & co. stay for callers.
pub use crate::settings::redact;
pub use crate::startup::{
    bind, open_queue, open_queue_with_timeout, pubsub_client, pubsub_clients, upstream_queue,
    ServeError, START_WAIT,
};

use crate::{
    cli::ServeArgs,
    http_server::{self, ConnLimits},
    live_hub::{Live, StreamCaps},
    managed_redis::ManagedRedis,
    shutdown, simulate,
    upstreams::UpstreamPlan,
    web::{self, Limits, WebParts, WebState},
};

/// Runs the web app until SIGINT/SIGTERM.
pub async fn run(args: ServeArgs) -> Result<(), ServeError> {
    let shutdown = shutdown::on_signal();
    let managed = match &args.redis.redis_url {
        Some(url) if !url.is_empty() => None,
        _ if args.redis.redis_cluster => {
            return Err(ServeError::Config(
                "--redis-cluster needs REDIS_URL with the cluster's seed nodes (the managed \
                 local Redis is a single server)"
                    .into(),
            ))
        }
        _ => Some(
            ManagedRedis::start_with_password(
                &args.managed.redis_server_bin,
                &args.managed.managed_redis_dir,
                args.managed.managed_redis_port,
                args.managed
                    .managed_redis_password
                    .as_ref()
                    .map(worker::Secret::expose),
            )
            .await?,
        ),
    };
    let url = match &managed {
        Some(m) => m.url().to_string(),
        None => args.redis.redis_url.clone().unwrap_or_default(),
    };
    let outcome = serve_with(&args, &url, shutdown).await;
    if let Some(m) = managed {
        m.stop().await;
    }
    outcome
}

/// The background parts of `serve` (simulator, embedded workers); the first error ends it.
type Background = tokio::task::JoinSet<Result<(), ServeError>>;

/// One upstream as `serve` runs it: its plan, its caller, its queue for the workers and for
/// requests (see [`serve_with`]), and its callback signer.
struct Served<'a> {
    plan: &'a UpstreamPlan,
    upstream: worker::Upstream,
    worker_queue: queue::Queue,
    web_queue: queue::Queue,
    callbacks: Option<worker::Callbacks>,
}

/// `serve` on Redis at `url`, in named steps: open the queues; build and check everything
/// the workers need (a setting they cannot work with stops the start here, before anything
/// serves); build the web state and router; listen; start the simulator and the embedded
/// workers; serve until `shutdown` (or until a background part fails), then drain.
async fn serve_with(
    args: &ServeArgs,
    url: &str,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    let queue = open_queue(&args.redis, url).await?;
    // The requests' own connection, with a short response timeout (see
    // `Queue::connect_with_timeout`): a Redis stall makes a page or API call answer 503 in
    // ~2 s instead of hanging; the workers keep `queue` and its longer timeout.
    let web_queue = open_queue_with_timeout(
        &args.redis,
        url,
        Duration::from_millis(args.redis_request_timeout_ms),
    )
    .await?;
    let metrics = worker::install_prometheus();
    // The web side's own series, 0 until something happens (see install_prometheus).
    crate::metrics::describe_web_metrics();
    metrics::counter!(crate::http_server::CONNECTIONS_REFUSED_METRIC).increment(0);
    crate::refusals::register_counters();
    crate::traces::register_counters();
    metrics::gauge!(crate::live_hub::LIVE_STREAMS_METRIC).increment(0.0);
    let fd_limit = http_server::raise_fd_limit();

    // The simulator's listener first: its address is the default upstream's when no URL was
    // given (`--sim-addr` alone moves both; port 0 included).
    let sim = match args.sim {
        true => Some(bind(args.sim_addr).await?),
        false => None,
    };
    let upstream = default_upstream(args, sim.as_ref().and_then(|l| l.local_addr().ok()));
    // Checked before anything serves: a bad upstream, callback or worker setting stops the
    // start.
    let plans = crate::upstreams::plans(&args.redis, &upstream, &args.policy, &args.upstreams);
    let callbacks = worker::Callbacks::new(&args.callback)?;
    let served = open_upstreams(&plans, callbacks.as_ref(), &queue, &web_queue, url).await?;
    let hold = queue::HoldSettings {
        max_bytes: args.hold_bytes,
        bound: Duration::from_millis(args.hold_bound_ms),
    };
    for s in &served {
        s.web_queue
            .hold_hot_results(&crate::settings::RedisArgs::pubsub_url(url), hold)
            .map_err(|source| ServeError::Redis {
                url: redact(url),
                source,
            })?;
    }
    let workers = embedded_workers(args, &served, url)?;

    let caps = StreamCaps {
        per_client: args.max_streams_per_client,
        total: args.max_streams,
    };
    let live = Live::start_seeds(
        pubsub_clients(url)?,
        served
            .iter()
            .map(|s| s.worker_queue.channels().dashboard)
            .collect(),
        caps,
        shutdown.clone(),
    );
    let state = web_state(args, &served, callbacks, live, web_queue)?;
    let router = web::router(
        state.clone(),
        Limits {
            body_bytes: args.body_limit,
            timeout: Duration::from_millis(args.request_timeout_ms),
        },
        web::guarded_metrics(crate::metrics::metrics_router(metrics), state),
    );
    // In every served queue's process registry before anything is accepted, so a
    // repartition refuses while this process runs (even with no worker of its own).
    let registration = crate::registry::WebRegistration::start(
        served.iter().map(|s| s.web_queue.clone()).collect(),
        args.worker.heartbeat_ms,
    )
    .await
    .map_err(|source| ServeError::Redis {
        url: redact(url),
        source,
    })?;
    let listener = bind(args.addr).await?;
    let conn_limits = connection_limits(args, fd_limit);

    let mut background = Background::new();
    if let Some(sim) = sim {
        start_simulator(sim, args, &shutdown, &mut background);
    }
    for w in workers {
        let stop = shutdown.clone();
        background.spawn(async move {
            w.run(stop.cancelled_owned()).await?;
            Ok(())
        });
    }
    // Watched while the server runs: a part that fails stops the server now, rather than it
    // serving on without its workers or simulator until someone sends a signal.
    let background = tokio::spawn(supervise(background, shutdown.clone()));
    tracing::info!(
        max_connections = conn_limits.max_connections,
        max_streams = caps.total,
        "listening on http://{}",
        args.addr
    );

    let grace = Duration::from_millis(args.shutdown_grace_ms);
    let served_http = http_server::serve(
        listener,
        router,
        conn_limits,
        Default::default(),
        shutdown.clone(),
        grace,
    )
    .await;
    // Nothing more is accepted: out of the registries (the workers leave theirs as they stop).
    registration.stop().await;
    // The answers counted since the last second's write (queue's answer_counts), written now
    // (bounded by the web side's Redis timeout).
    for s in &served {
        if let Err(e) = s.web_queue.flush_answer_counts().await {
            tracing::warn!(error = %e, "the last second's answer counts were not written");
        }
    }
    shutdown.cancel();
    let background = background
        .await
        .unwrap_or_else(|e| Err(ServeError::Panicked(e.to_string())));
    served_http?;
    background
}

/// The default upstream's settings as served: with `--sim` running on `sim` and no URL given
/// (flag, variable or config file), its URL is the simulator's, wherever it listens — unless
/// it is a job API (a submit URL says where it is).
fn default_upstream(args: &ServeArgs, sim: Option<std::net::SocketAddr>) -> worker::UpstreamArgs {
    let mut upstream = args.upstream.clone();
    let job_api = upstream.job.submit_url.is_some();
    if let (Some(addr), false, false) = (sim, args.upstream_url_given, job_api) {
        upstream.url = worker::simulator_url(addr);
    }
    upstream
}

/// `--sim`: the simulated upstream on its listener, stopped with the server.
fn start_simulator(
    listener: tokio::net::TcpListener,
    args: &ServeArgs,
    shutdown: &CancellationToken,
    background: &mut Background,
) {
    let addr = listener.local_addr().map_or(args.sim_addr, |a| a);
    tracing::info!("simulated upstream on http://{addr}");
    let stop = shutdown.clone();
    let sim_args = args.sim_args.clone();
    background.spawn(async move {
        simulate::serve(listener, sim_args, stop)
            .await
            .map_err(ServeError::from)
    });
}

/// Per upstream: its caller, its queue for workers and for requests, its callback signer.
async fn open_upstreams<'a>(
    plans: &'a [UpstreamPlan],
    callbacks: Option<&worker::Callbacks>,
    queue: &queue::Queue,
    web_queue: &queue::Queue,
    url: &str,
) -> Result<Vec<Served<'a>>, ServeError> {
    let mut served = Vec::with_capacity(plans.len());
    for plan in plans {
        served.push(Served {
            plan,
            upstream: worker::Upstream::new(&plan.upstream)?,
            worker_queue: upstream_queue(queue, plan, url).await?,
            web_queue: upstream_queue(web_queue, plan, url).await?,
            callbacks: callbacks.map(|c| c.for_upstream(&plan.name)),
        });
    }
    Ok(served)
}

/// The embedded workers, built and checked ([`worker::Worker::check`]), not started: per
/// upstream its slots (`--workers`, or the upstream's own concurrency), none where that is 0.
/// The first setting a worker refuses is the error, as `repoll worker` gives it. They share
/// one quiet / stop switch: an admin's stop ends the embedded workers (each leaves the
/// registry; `supervise` counts a clean end as no failure), not the web server.
fn embedded_workers(
    args: &ServeArgs,
    served: &[Served<'_>],
    url: &str,
) -> Result<Vec<worker::Worker>, ServeError> {
    let default_slots = args.workers.unwrap_or(args.worker.concurrency);
    let control = worker::Control::new();
    let mut workers = Vec::new();
    for s in served {
        let slots = s.plan.concurrency.unwrap_or(default_slots);
        if slots == 0 {
            continue;
        }
        let mut wargs = args.worker.clone();
        wargs.concurrency = slots;
        // The web process promises a quick stop (SIGTERM to exit within ~2 s), so its embedded
        // workers get at most the web drain period; unfinished leases are released to due at
        // once and another worker picks them up.
        wargs.grace_ms = wargs.grace_ms.min(args.shutdown_grace_ms);
        let w = worker::Worker::new(
            s.worker_queue.clone(),
            pubsub_client(url)?,
            s.upstream.clone(),
            s.plan.policy.clone(),
            wargs,
        )
        .with_callbacks(s.callbacks.clone())
        .with_control(control.clone());
        w.check().map_err(crate::startup::worker_refusal)?;
        tracing::info!(worker = w.id(), slots, upstream = %s.plan.name, "embedded worker ready");
        workers.push(w);
    }
    Ok(workers)
}

/// What every request handler shares: the API's and the dashboard's settings (one trust
/// setting for both), the callback receiver, the named upstreams the pages may submit to.
fn web_state(
    args: &ServeArgs,
    served: &[Served<'_>],
    callbacks: Option<worker::Callbacks>,
    live: Live,
    web_queue: queue::Queue,
) -> Result<WebState, ServeError> {
    if args.api.trust_forwarded_for {
        tracing::warn!(
            "REPOLL_TRUST_FORWARDED_FOR is replaced by REPOLL_TRUST_FORWARDED; please rename it"
        );
    }
    // One trust setting for every per-client limit and the cookie's Secure flag.
    let trust_forwarded = args.admin.trust_forwarded || args.api.trust_forwarded_for;
    let mut admin_args = args.admin.clone();
    admin_args.trust_forwarded = trust_forwarded;
    let admin = crate::admin::AdminState::new(&admin_args, args.worker.heartbeat_ms)
        .map_err(ServeError::Config)?;
    let mut api = crate::api::ApiState::new(&args.api, trust_forwarded);
    api.max_wait = crate::api::wait_cap(
        args.api.max_wait_ms,
        Duration::from_millis(args.request_timeout_ms),
    );
    api.metrics_token = args.metrics_token.clone().map(Into::into);
    api.callbacks = callbacks.map(|callbacks| crate::api::CallbackReceiver {
        callbacks,
        upstreams: served
            .iter()
            .map(|s| crate::api::CallbackUpstream {
                name: if s.plan.is_default() {
                    String::new()
                } else {
                    s.plan.name.clone()
                },
                queue: s.web_queue.clone(),
                reader: s.upstream.reader().clone(),
                max_body: s.upstream.max_body(),
                max_result: s.upstream.max_result(),
            })
            .collect(),
    });
    // Each upstream with a webhook secret takes its provider's webhooks at
    // /api/v1/webhooks/<name>, whether or not per-task callbacks are on.
    api.webhooks = served
        .iter()
        .filter_map(|s| {
            Some(crate::api::WebhookUpstream {
                name: s.plan.name.clone(),
                queue: s.web_queue.clone(),
                reader: s.upstream.reader().clone(),
                webhooks: s.upstream.webhooks()?.clone(),
                max_body: s.upstream.max_body(),
                max_result: s.upstream.max_result(),
            })
        })
        .collect();
    Ok(WebState::new(WebParts {
        live,
        api,
        admin: admin.clone(),
        leptos_options: web::leptos_options(&args.site_root),
        app: AppContext {
            queue: web_queue,
            named: named_upstreams(args, served),
            enqueue_policy: args.policy.enqueue_policy(),
            admin: admin.auth.clone(),
            first_answer: Duration::from_millis(args.api.first_answer_ms),
            trace_url: args.trace_url.as_deref().map(Into::into),
        },
    }))
}

/// The named upstreams a page or API call may choose, with the rate each one's form shows.
fn named_upstreams(args: &ServeArgs, served: &[Served<'_>]) -> app::context::NamedUpstreams {
    let rate = |u: &worker::UpstreamArgs| app::context::RateLimit {
        per_sec: u.upstream_rate_per_sec,
        burst: u.upstream_rate_burst,
    };
    app::context::NamedUpstreams {
        list: std::sync::Arc::new(
            served
                .iter()
                .filter(|s| !s.plan.is_default())
                .map(|s| app::context::NamedUpstream {
                    name: s.plan.name.clone(),
                    queue: s.web_queue.clone(),
                    enqueue_policy: s.plan.policy.enqueue_policy(),
                    rate: rate(&s.plan.upstream),
                })
                .collect(),
        ),
        default_rate: rate(&args.upstream),
    }
}

/// The connection cap (lowered to fit the descriptor limit, with a warning) and header timeout.
fn connection_limits(args: &ServeArgs, fd_limit: u64) -> ConnLimits {
    let conn_limits = ConnLimits {
        max_connections: http_server::effective_max_connections(args.max_connections, fd_limit),
        header_timeout: Duration::from_millis(args.header_timeout_ms),
    };
    if conn_limits.max_connections < args.max_connections {
        tracing::warn!(
            fd_limit,
            max_connections = conn_limits.max_connections,
            "the descriptor limit lowers the connection cap"
        );
    }
    conn_limits
}

/// Waits for every background part to stop; the first error (or none) is the outcome. A part
/// that fails or panics cancels `shutdown` at once, so the server stops and drains instead
/// of serving on without it (an embedded worker gone: queries accepted and never polled).
async fn supervise(
    mut background: Background,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    let mut first_error = None;
    while let Some(joined) = background.join_next().await {
        let error = match joined {
            Ok(Ok(())) => continue,
            Ok(Err(e)) => e,
            Err(e) => ServeError::Panicked(e.to_string()),
        };
        if !shutdown.is_cancelled() {
            tracing::error!(error = %error, "a background part of the server failed; stopping");
            shutdown.cancel();
        } else {
            tracing::error!(error = %error, "background task failed");
        }
        first_error.get_or_insert(error);
    }
    first_error.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hang guard: the point of each test is that it ends well before.
    const LIMIT: Duration = Duration::from_secs(10);

    /// A part that runs until the server stops, as a worker or the simulator does.
    fn until_stopped(background: &mut Background, shutdown: &CancellationToken) {
        let stop = shutdown.clone();
        background.spawn(async move {
            stop.cancelled().await;
            Ok(())
        });
    }

    #[tokio::test]
    async fn a_background_part_that_fails_while_serving_stops_the_server() {
        let shutdown = CancellationToken::new();
        let mut background = Background::new();
        until_stopped(&mut background, &shutdown);
        background.spawn(async { Err(ServeError::Config("the worker gave up".into())) });
        let supervised = tokio::spawn(supervise(background, shutdown.clone()));
        tokio::time::timeout(LIMIT, shutdown.cancelled())
            .await
            .expect("the failure cancels the server's shutdown token");
        let outcome = tokio::time::timeout(LIMIT, supervised)
            .await
            .unwrap()
            .unwrap();
        assert!(
            matches!(&outcome, Err(ServeError::Config(m)) if m == "the worker gave up"),
            "{outcome:?}"
        );
    }

    #[tokio::test]
    async fn a_background_part_that_panics_stops_the_server() {
        let shutdown = CancellationToken::new();
        let mut background = Background::new();
        until_stopped(&mut background, &shutdown);
        background.spawn(async { panic!("a bug") });
        let supervised = tokio::spawn(supervise(background, shutdown.clone()));
        tokio::time::timeout(LIMIT, shutdown.cancelled())
            .await
            .expect("the panic cancels the server's shutdown token");
        let outcome = tokio::time::timeout(LIMIT, supervised)
            .await
            .unwrap()
            .unwrap();
        assert!(
            matches!(outcome, Err(ServeError::Panicked(_))),
            "{outcome:?}"
        );
    }

    /// `repoll serve …` as `parse_cli` reads it, with `file` as the config file.
    fn serve_args(file: &str, argv: &[&str]) -> ServeArgs {
        use clap::CommandFactory;
        let cmd = crate::cli::Cli::command();
        let settings =
            crate::config_file::settings_from_str(&cmd, std::path::Path::new("t.toml"), file)
                .unwrap();
        let m = crate::config_file::apply(cmd, &settings)
            .try_get_matches_from(std::iter::once("repoll").chain(argv.iter().copied()))
            .unwrap();
        match crate::cli::cli_from_matches(&m, &settings).unwrap().command {
            crate::cli::Command::Serve(a) => *a,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn with_the_simulator_a_url_not_given_is_the_simulators_and_a_given_one_stays() {
        let sim: std::net::SocketAddr = "127.0.0.1:9002".parse().unwrap();
        let a = serve_args("", &["serve", "--sim"]);
        assert!(!a.upstream_url_given);
        assert_eq!(
            default_upstream(&a, Some(sim)).url,
            "http://127.0.0.1:9002/api/query?q={key}"
        );
        // Without the simulator the default stays what it is.
        assert_eq!(
            default_upstream(&a, None).url,
            worker::upstream::DEFAULT_URL
        );
        // Given by a flag (even the built-in default's very text) or by the config file: kept.
        for (file, argv, url) in [
            (
                "",
                &[
                    "serve",
                    "--sim",
                    "--upstream-url",
                    worker::upstream::DEFAULT_URL,
                ][..],
                worker::upstream::DEFAULT_URL,
            ),
            (
                "",
                &[
                    "serve",
                    "--sim=1",
                    "--upstream-url=https://api.example.com/r/{key}",
                ][..],
                "https://api.example.com/r/{key}",
            ),
            (
                "[upstream]\nurl = \"https://file.example.com/r/{key}\"\n",
                &["serve", "--sim"][..],
                "https://file.example.com/r/{key}",
            ),
        ] {
            let a = serve_args(file, argv);
            assert!(a.upstream_url_given, "{argv:?}");
            assert_eq!(default_upstream(&a, Some(sim)).url, url, "{argv:?}");
        }
    }

    #[tokio::test]
    async fn parts_that_end_with_the_server_are_no_error() {
        let shutdown = CancellationToken::new();
        let mut background = Background::new();
        until_stopped(&mut background, &shutdown);
        let supervised = tokio::spawn(supervise(background, shutdown.clone()));
        shutdown.cancel();
        let outcome = tokio::time::timeout(LIMIT, supervised)
            .await
            .unwrap()
            .unwrap();
        assert!(outcome.is_ok(), "{outcome:?}");
    }
}
