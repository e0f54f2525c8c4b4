//! The overview page: counts per state, charts of the last hour, day or week (pauses, resumes
//! and process starts marked on them), the answers by freshness and the hit ratio, workers,
//! the audit log, and, for an admin, the queue-wide actions (`queue_actions`: pause / resume,
//! retry all dead, purge with typed confirmation).
//!
//! Everything that changes is re-read on each live tick; the forms sit outside the re-read
//! parts so a live update never wipes what the admin is typing.

use leptos::prelude::*;

use super::actions::Act;
use super::chart::{
    answers_words, hit_ratio_words, window_total, AnswersChart, AnswersTable, ChartFocus,
    DistributionChart, HitRatioChart, Marker, Measure, Plot, ThroughputChart, Window,
};
use super::confirm::provide_confirm;
use super::frame::{session, signed_in, signed_out, AdminFrame};
use super::live::provide_live;
use super::queue_actions::QueueActions;
use super::ui::{can_act, duration, error_text, or_dash, PausedBanner, TimeAt};
pub use super::workers::WorkerRow;
use super::workers::{provide_worker_actions, WorkersTable};
use crate::status::RedisStatusPanel;
#[cfg(feature = "ssr")]
use model::PauseInfo;
use model::{AuditEntry, BreakerInfo, BreakerState, ThroughputBucket};

// Named from here too: the answer of this page's public server function (`Overview`).
pub use super::overview_data::OverviewData;

/// Audit entries shown.
#[cfg_attr(not(feature = "ssr"), allow(dead_code))]
const AUDIT_SHOWN: usize = 20;

/// The charts' markers: pauses and resumes from the audit log, the start of every worker
/// process that still reports (a deploy or a restart shows as "started"), and the points in
/// which the upstream's circuit breaker opened (counted per minute by the queue, so an
/// opening is marked however many events have come since).
#[cfg_attr(not(feature = "ssr"), allow(dead_code))]
fn markers(
    audit: &[AuditEntry],
    workers: &[WorkerRow],
    points: &[ThroughputBucket],
) -> Vec<Marker> {
    let mut out: Vec<Marker> = audit
        .iter()
        .filter(|a| matches!(a.action.as_str(), "pause" | "resume"))
        .map(|a| Marker {
            at_ms: a.at_ms,
            label: if a.action == "pause" {
                "paused"
            } else {
                "resumed"
            }
            .into(),
        })
        .collect();
    out.extend(workers.iter().map(|w| Marker {
        at_ms: w.info.started_ms,
        label: "started".into(),
    }));
    out.extend(
        points
            .iter()
            .filter(|b| b.breaker_opened > 0)
            .map(|b| Marker {
                at_ms: b.minute_ms,
                label: "breaker opened".into(),
            }),
    );
    out.sort_by_key(|m| m.at_ms);
    // Many workers started together (one deploy) are one marker.
    out.dedup_by(|b, a| a.label == b.label && (b.at_ms - a.at_ms).abs() < 60_000);
    out
}

/// Reads counts, workers and the audit log (in parallel), and the day's throughput when the
/// charts cover the last 24 hours.
#[server(prefix = "/admin/fn")]
pub async fn overview(
    window: Option<String>,
    upstream: Option<String>,
    plot: Option<String>,
) -> Result<OverviewData, ServerFnError> {
    use super::call::{admin_call, upstream_queue, AdminCall};
    use crate::auth::Role;
    let AdminCall { ctx, .. } = admin_call(Role::Viewer).await?;
    let q = upstream_queue(&ctx, upstream.as_deref())?;
    let upstream = q.config().upstream.clone();
    let upstreams = ctx.upstream_names();
    let unavailable = |what: &str, e: String| crate::auth::unreachable(what, e);
    let window = Window::parse(window.as_deref().unwrap_or_default());
    let (stats, workers, audit, paused, breaker) = futures_join(q).await;
    let mut stats = stats.map_err(|e| unavailable("stats", e.to_string()))?;
    // The counts' own last hour has no histograms: the charts read theirs, whatever the window.
    stats.throughput = q
        .throughput(window.minutes(), window.per())
        .await
        .map_err(|e| unavailable("throughput", e.to_string()))?;
    let workers = workers.map_err(|e| unavailable("workers", e.to_string()))?;
    let audit = audit.map_err(|e| unavailable("audit", e.to_string()))?;
    // The flag may go between the two reads; the counts' own flag decides whether it shows.
    let paused = paused
        .map_err(|e| unavailable("pause", e.to_string()))?
        .filter(|_| stats.paused)
        .or_else(|| stats.paused.then(PauseInfo::default));
    let breaker = breaker.map_err(|e| unavailable("breaker", e.to_string()))?;
    let gone_after = ctx.admin.settings().gone_after_ms;
    let now = stats.now_ms;
    let workers: Vec<WorkerRow> = workers
        .into_iter()
        .map(|info| WorkerRow {
            gone: info.is_gone(now, gone_after),
            info,
        })
        .collect();
    Ok(OverviewData {
        markers: markers(&audit, &workers, &stats.throughput),
        workers,
        stats,
        audit,
        paused,
        breaker,
        window,
        plot: Plot::parse(plot.as_deref().unwrap_or_default()),
        upstream,
        upstreams,
    })
}

#[cfg(feature = "ssr")]
async fn futures_join(
    q: &queue::Queue,
) -> (
    queue::Result<queue::Stats>,
    queue::Result<Vec<queue::WorkerInfo>>,
    queue::Result<Vec<AuditEntry>>,
    queue::Result<Option<PauseInfo>>,
    queue::Result<Option<BreakerInfo>>,
) {
    tokio::join!(
        q.stats(),
        q.workers(),
        q.audit_log(AUDIT_SHOWN),
        q.pause_info(),
        q.breaker()
    )
}

/// The overview of `upstream` ("" = the default one) over chart window `window`, its
/// throughput chart plotting `plot`.
fn overview_href(window: &str, upstream: &str, plot: Plot) -> String {
    let mut href = format!("/admin?window={window}");
    if !upstream.is_empty() && upstream != "default" {
        href.push_str("&upstream=");
        href.push_str(upstream);
    }
    if plot != Plot::All {
        href.push_str("&plot=");
        href.push_str(plot.param());
    }
    href
}

/// `/admin`.
#[component]
pub fn OverviewPage() -> impl IntoView {
    // Resources are created here, before the frame, so their order (which hydration
    // matches by) never depends on when the session check resolves.
    let live = provide_live();
    // The charts' readouts outlive their rebuild at each live update.
    provide_context(ChartFocus::new());
    let me = session();
    let action = ServerAction::<Act>::new();
    provide_confirm(action);
    provide_worker_actions(action);
    let query = leptos_router::hooks::use_query_map();
    let data = Resource::new(
        move || {
            (
                live.tick.get(),
                action.version().get(),
                query.get().get("window"),
                query.get().get("upstream"),
                query.get().get("plot"),
            )
        },
        move |(_, _, window, upstream, plot)| async move {
            if !signed_in(me).await {
                return signed_out();
            }
            overview(window, upstream, plot).await
        },
    );
    view! {
        <AdminFrame me>
            <OverviewBody data action />
        </AdminFrame>
        <RedisStatusPanel me />
    }
}

#[component]
fn OverviewBody(
    data: Resource<Result<OverviewData, ServerFnError>>,
    action: ServerAction<Act>,
) -> impl IntoView {
    // Queue-wide actions here are the default upstream's; a named one's are on the Upstreams
    // page (its pause and breaker), so they are not offered while it is shown.
    let query = leptos_router::hooks::use_query_map();
    let named = move || {
        query.with(|q| {
            q.get_str("upstream")
                .is_some_and(|u| !u.is_empty() && u != "default")
        })
    };
    let may_act = can_act();
    view! {
        <section class="panel">
            <h1>"Overview"</h1>
            <div class="data">
                <Transition fallback=|| view! { <p>"Reading the queue…"</p> }>
                {move || data.get().map(|r| match r {
                        Ok(d) => view! { <OverviewView data=d /> }.into_any(),
                        Err(e) => view! { <p class="err" data-testid="overview-error">{error_text(&e)}</p> }.into_any(),
                    })}
            </Transition>
            </div>
        </section>
        // Only for the default upstream (the URL decides, so live updates never rebuild the
        // forms being typed in); a named upstream's actions are on the Upstreams page. Only
        // for an admin: a viewer is offered nothing it cannot do.
        {move || (!named() && may_act).then(|| view! { <QueueActions data action /> })}
    }
}

#[component]
fn OverviewView(data: OverviewData) -> impl IntoView {
    let s = data.stats;
    // "Running" in green only while a worker polls: a queue nobody claims from is not running
    // for the people waiting on it (the attention strip says the same above).
    let polled = data
        .workers
        .iter()
        .any(|w| !w.gone && w.info.mode == model::WorkerMode::Running);
    let paused_class = if s.paused || !polled { "err" } else { "ok" };
    let now = s.now_ms;
    let card = |name: &'static str, label: &'static str, n: u64, alarm: bool| {
        let class = if alarm && n > 0 {
            "count alarm"
        } else {
            "count"
        };
        let href = match name {
            "ready" | "dead" | "leased" | "results" => Some(format!("/admin/tasks?state={name}")),
            "waiting" | "retrying" => Some("/admin/tasks?state=waiting".to_string()),
            "stuck" => Some("/admin/leases".to_string()),
            _ => None,
        };
        view! {
            <a class=class href=href>
                <span class="n" data-testid=format!("count-{name}")>{n}</span>
                <span class="label">{label}</span>
            </a>
        }
    };
    let oldest = if s.ready == 0 {
        view! { <span data-testid="oldest-ready">"Nothing is ready and unclaimed."</span> }
            .into_any()
    } else {
        view! {
            "Oldest ready task has waited "
            <span data-testid="oldest-ready">{duration(s.oldest_ready_age_ms)}</span> "."
        }
        .into_any()
    };
    // Priorities: background work (`"priority": "background"`) waits behind interactive work
    // and gets every tenth claim while both wait.
    let background = (s.ready_background > 0).then(|| {
        let n = s.ready_background;
        view! {
            " "
            <span data-testid="ready-background">
                {format!("{n} of the ready {} background work", if n == 1 { "task is" } else { "tasks are" })}
            </span>
            " (claimed after interactive work, at least every tenth claim)."
        }
    });
    let audit_empty = data.audit.is_empty();
    view! {
        <div class="view">
        {(data.upstreams.len() > 1).then(|| {
            let here = if data.upstream.is_empty() { "default".to_string() } else { data.upstream.clone() };
            let links = data
                .upstreams
                .iter()
                .map(|u| {
                    let current = (*u == here).then_some("page");
                    let href = overview_href(data.window.param(), u, data.plot);
                    let testid = format!("overview-upstream-{u}");
                    view! { " " <a href=href class="tab" aria-current=current data-testid=testid>{u.clone()}</a> }
                })
                .collect_view();
            view! { <p class="row" data-testid="overview-upstreams">"Upstream:" {links}</p> }
        })}
        <PausedBanner paused=data.paused now />
        <BreakerBanner breaker=data.breaker now />
        <div class="counts" data-testid="counts">
            {card("ready", "ready now", s.ready, false)}
            {card("waiting", "waiting for next poll", s.waiting, false)}
            {card("retrying", "retrying", s.retrying, false)}
            {card("leased", "leased", s.leased, false)}
            {card("stuck", "stuck leases", s.stuck, true)}
            {card("dead", "dead", s.dead, true)}
            {card("results", "results stored", s.results, false)}
        </div>
        <p>
            <span data-testid="oldest-ready">{oldest}</span>{background} " Queue is "
            <strong data-testid="paused" class=paused_class>
                {if s.paused { "paused" } else { "running" }}
            </strong>
            {(!s.paused && !polled).then(|| view! {
                <span class="err" data-testid="not-polled">", but nothing is polling it: no worker is running"</span>
            })}
            "."
        </p>
        <ChartChooser window=data.window plot=data.plot upstream=data.upstream.clone() />
        <div class="charts">
            <ThroughputChart buckets=s.throughput.clone() window=data.window markers=data.markers.clone() plot=data.plot />
            {Measure::ALL
                .into_iter()
                .map(|measure| view! {
                    <DistributionChart buckets=s.throughput.clone() measure window=data.window markers=data.markers.clone() />
                })
                .collect_view()}
        </div>
        <AnswersSection buckets=s.throughput.clone() window=data.window markers=data.markers.clone() />
        <WorkersTable workers=data.workers now />
        <h2>"Audit log"</h2>
        {audit_empty.then(|| view! { <p class="empty" data-testid="audit-empty">"No admin actions yet."</p> })}
        <div class="table-scroll" tabindex="0" role="region" aria-label="Audit log">
        <table data-testid="audit" class:hidden=audit_empty>
            <thead>
                <tr><th>"when"</th><th>"who"</th><th>"action"</th><th>"target"</th><th>"count"</th></tr>
            </thead>
            <tbody>
                {data
                    .audit
                    .into_iter()
                    .map(|a| {
                        view! {
                            <tr>
                                <td><TimeAt now at=a.at_ms past=true /></td>
                                <td>{or_dash(a.who)}</td>
                                <td>{or_dash(a.action)}</td>
                                <td>{or_dash(a.target)}</td>
                                <td>{a.count}</td>
                            </tr>
                        }
                    })
                    .collect_view()}
            </tbody>
        </table>
        </div>
        </div>
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::WorkerInfo;

    fn entry(at_ms: i64, action: &str) -> AuditEntry {
        AuditEntry {
            at_ms,
            who: "admin".into(),
            action: action.into(),
            target: "queue".into(),
            count: 1,
        }
    }

    fn worker(id: &str, started_ms: i64) -> WorkerRow {
        WorkerRow {
            info: WorkerInfo {
                id: id.into(),
                host: "h".into(),
                pid: 1,
                started_ms,
                in_flight: 0,
                completed: 0,
                dead: 0,
                last_seen_ms: started_ms,
                rss_bytes: None,
                mode: Default::default(),
                command: None,
            },
            gone: false,
        }
    }

    #[test]
    fn markers_are_pauses_resumes_starts_one_per_deploy_and_breaker_openings() {
        let audit = [
            entry(5_000_000, "resume"),
            entry(2_000_000, "retry"),
            entry(1_000_000, "pause"),
        ];
        let workers = [
            worker("a", 3_000_000),
            worker("b", 3_010_000),
            worker("c", 9_000_000),
        ];
        let point = |minute_ms, breaker_opened| ThroughputBucket {
            minute_ms,
            breaker_opened,
            failed: 40,
            ..Default::default()
        };
        let points = [
            point(3_960_000, 0),
            point(4_020_000, 2),
            point(4_080_000, 0),
        ];
        let m = markers(&audit, &workers, &points);
        let got: Vec<(i64, &str)> = m.iter().map(|m| (m.at_ms, m.label.as_str())).collect();
        assert_eq!(
            got,
            [
                (1_000_000, "paused"),
                (3_000_000, "started"),
                (4_020_000, "breaker opened"),
                (5_000_000, "resumed"),
                (9_000_000, "started")
            ]
        );
    }
}

/// What the charts show, as links (no JS needed; the current one marked and `aria-current`):
/// the window (hour, day, week) and the series the throughput chart plots. The upstream is
/// chosen above the counts (its links keep both).
#[component]
fn ChartChooser(window: Window, plot: Plot, upstream: String) -> impl IntoView {
    let windows = Window::ALL
        .iter()
        .map(|w| {
            let current = (*w == window).then_some("page");
            let href = overview_href(w.param(), &upstream, plot);
            view! { <a class="tab" href=href aria-current=current>{w.words()}</a> }
        })
        .collect_view();
    let plots = Plot::ALL
        .iter()
        .map(|p| {
            let current = (*p == plot).then_some("page");
            let href = overview_href(window.param(), &upstream, *p);
            let testid = format!("chart-plot-{}", if *p == Plot::All { "all" } else { p.param() });
            view! { <a class="tab" href=href aria-current=current data-testid=testid>{p.words()}</a> }
        })
        .collect_view();
    view! {
        <nav class="tabs window-tabs" aria-label="chart window" data-testid="chart-window">{windows}</nav>
        <nav class="tabs plot-tabs" aria-label="throughput series" data-testid="chart-plot">
            <span class="tabs-label">"Throughput:"</span>{plots}
        </nav>
    }
}

/// How the upstream's asks were answered over the charts' window: the hit ratio and the
/// answers by freshness in words, their charts, and the same figures as a table.
#[component]
fn AnswersSection(
    buckets: Vec<model::ThroughputBucket>,
    window: Window,
    markers: Vec<Marker>,
) -> impl IntoView {
    let total = window_total(&buckets);
    view! {
        <h2>"Answers"</h2>
        <p data-testid="answers-summary">
            {format!("Hit ratio, {}: ", window.words())}
            <strong class="num" data-testid="hit-ratio">{hit_ratio_words(&total)}</strong>
            {format!(" — {}.", answers_words(&total))}
            <br />
            <small class="muted">
                "A hit is answered from the store without waiting for the upstream: a fresh result, a stale one                  (while it is refreshed, or kept because the refresh failed) or a remembered failure (negative).                  A miss waits for a task."
            </small>
        </p>
        <div class="charts">
            <AnswersChart buckets=buckets.clone() window markers=markers.clone() />
            <HitRatioChart buckets=buckets.clone() window markers />
        </div>
        <AnswersTable buckets window />
    }
}

/// The banner of an open or half-open circuit breaker: why, since when, until when.
#[component]
fn BreakerBanner(breaker: Option<BreakerInfo>, now: i64) -> impl IntoView {
    breaker.map(|b| {
        let by = if b.by == "auto" {
            String::new()
        } else {
            format!(" by {}", b.by)
        };
        let (title, rest) = match b.state {
            BreakerState::Open => (
                "Upstream circuit breaker open",
                format!("{by}: claims wait; errors of calls still out cost no attempt. A probe call goes"),
            ),
            BreakerState::HalfOpen => (
                "Upstream circuit breaker half-open",
                format!(
                    "{by}: one probe call is out (task {}); its success closes the breaker. Its lease ends",
                    b.probe.as_deref().map(super::ui::short).unwrap_or_default()
                ),
            ),
        };
        view! {
            <div class="banner paused" role="status" data-testid="breaker-banner">
                <strong>{title}</strong>
                <span>
                    " since " <TimeAt now at=b.since_ms past=true /> {rest} " "
                    <TimeAt now at=b.until_ms past=false /> ". "
                </span>
                <span class="muted" data-testid="breaker-reason">{format!("Cause: {}", b.reason)}</span>
            </div>
        }
    })
}
