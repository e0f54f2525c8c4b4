//! The overview page: counts per state, charts of the last hour, workers, the audit log, and
//! the queue-wide actions (pause / resume, retry all dead, purge with typed confirmation).
//!
//! Everything that changes is re-read on each live tick; the forms sit outside the re-read
//! parts so a live update never wipes what the admin is typing.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

use super::actions::{Act, ActButton, ActionResult};
use super::chart::{ThroughputChart, TimeToResultChart};
use super::frame::{session, signed_in, signed_out, AdminFrame};
use super::live::provide_live;
use super::model::{AuditEntry, StatsView, WorkerRow};
use super::ui::{duration, error_text, or_dash, relative};
use crate::status::RedisStatusPanel;

/// Audit entries shown.
#[cfg_attr(not(feature = "ssr"), allow(dead_code))]
const AUDIT_SHOWN: isize = 20;

/// What the overview shows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverviewData {
    pub stats: StatsView,
    pub workers: Vec<WorkerRow>,
    pub audit: Vec<AuditEntry>,
}

/// Reads counts, workers and the audit log (three reads in parallel).
#[server(prefix = "/admin/fn")]
pub async fn overview() -> Result<OverviewData, ServerFnError> {
    use crate::auth::{refuse, require, Role};
    require(Role::Viewer).await?;
    let ctx = crate::context::app_context()?;
    let q = &ctx.queue;
    let unavailable = |what: &str, e: String| {
        tracing::warn!(error = %e, what, "overview read failed");
        refuse(
            http::StatusCode::SERVICE_UNAVAILABLE,
            "Redis is unreachable",
        )
    };
    let (stats, workers, audit) = futures_join(q).await;
    let stats = stats.map_err(|e| unavailable("stats", e.to_string()))?;
    let workers = workers.map_err(|e| unavailable("workers", e.to_string()))?;
    let audit = audit.map_err(|e| unavailable("audit", e.to_string()))?;
    let gone_after = ctx.admin.settings().gone_after_ms;
    let now = stats.now_ms;
    Ok(OverviewData {
        workers: workers
            .into_iter()
            .map(|w| WorkerRow::from_info(w, now, gone_after))
            .collect(),
        stats: stats.into(),
        audit,
    })
}

#[cfg(feature = "ssr")]
async fn futures_join(
    q: &queue::Queue,
) -> (
    queue::Result<queue::Stats>,
    queue::Result<Vec<queue::WorkerInfo>>,
    queue::redis::RedisResult<Vec<AuditEntry>>,
) {
    tokio::join!(q.stats(), q.workers(), super::audit::latest(q, AUDIT_SHOWN))
}

/// `/admin`.
#[component]
pub fn OverviewPage() -> impl IntoView {
    // Resources are created here, before the frame, so their order (which hydration
    // matches by) never depends on when the session check resolves.
    let live = provide_live();
    let me = session();
    let action = ServerAction::<Act>::new();
    let data = Resource::new(
        move || (live.tick.get(), action.version().get()),
        move |_| async move {
            if !signed_in(me).await {
                return signed_out();
            }
            overview().await
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
    // One number of the current data, as text that refreshes on its own.
    let count = move |f: fn(&StatsView) -> u64| {
        view! {
            <Transition fallback=|| "…">
                {move || data.get().map(|r| r.map(|d| f(&d.stats).to_string()).unwrap_or_else(|_| "?".into()))}
            </Transition>
        }
    };
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
        <section class="panel" data-testid="queue-actions">
            <h2>"Actions"</h2>
            <ActionResult action />
            <div class="row">
                <ActButton action op="pause" label="Pause queue" testid="pause" />
                <ActButton action op="resume" label="Resume queue" testid="resume" />
                <ActButton action op="retry_all_dead" label="Retry all dead" testid="retry-all-dead" />
            </div>
            <h3>"Purge"</h3>
            <table class="purge">
                <tbody>
                    <PurgeRow action target="dead" what="dead tasks" count=count(|s| s.dead).into_any() />
                    <PurgeRow action target="results" what="stored results" count=count(|s| s.results).into_any() />
                    <PurgeRow
                        action
                        target="queued"
                        what="queued tasks (ready, waiting, retrying)"
                        count=count(|s| s.ready + s.waiting + s.retrying).into_any()
                    />
                    <PurgeRow action target="history" what="task histories" count="every".into_any() />
                </tbody>
            </table>
        </section>
    }
}

/// One purge target: names the count and asks for the target's name to be typed.
#[component]
fn PurgeRow(
    action: ServerAction<Act>,
    target: &'static str,
    what: &'static str,
    count: AnyView,
) -> impl IntoView {
    view! {
        <tr>
            <td>
                "Removes " <strong data-testid=format!("purge-count-{target}")>{count}</strong>
                {format!(" {what}.")}
            </td>
            <td>
                <ActionForm action=action attr:class="inline">
                    <input type="hidden" name="op" value="purge" />
                    <input type="hidden" name="id" value=target />
                    <input
                        type="text"
                        name="confirm"
                        autocomplete="off"
                        placeholder=format!("type {target} to confirm")
                        data-testid=format!("purge-confirm-{target}")
                    />
                    <button type="submit" data-testid=format!("purge-{target}")>
                        {format!("Purge {target}")}
                    </button>
                </ActionForm>
            </td>
        </tr>
    }
}

#[component]
fn OverviewView(data: OverviewData) -> impl IntoView {
    let s = data.stats;
    let paused_class = if s.paused { "err" } else { "ok" };
    let now = s.now_ms;
    let card = |name: &'static str, label: &'static str, n: u64| {
        view! {
            <div class="count">
                <span class="n" data-testid=format!("count-{name}")>{n}</span>
                <span class="label">{label}</span>
            </div>
        }
    };
    view! {
        <div class="view">
        <div class="counts" data-testid="counts">
            {card("ready", "ready now", s.ready)}
            {card("waiting", "waiting for next poll", s.waiting)}
            {card("retrying", "retrying", s.retrying)}
            {card("leased", "leased", s.leased)}
            {card("stuck", "stuck leases", s.stuck)}
            {card("dead", "dead", s.dead)}
            {card("results", "results stored", s.results)}
        </div>
        <p>
            "Oldest ready task waits " <span data-testid="oldest-ready">{duration(s.oldest_ready_age_ms)}</span>
            ". Queue is "
            <strong data-testid="paused" class=paused_class>
                {if s.paused { "paused" } else { "running" }}
            </strong> "."
        </p>
        <div class="charts">
            <ThroughputChart buckets=s.throughput.clone() />
            <TimeToResultChart buckets=s.throughput />
        </div>
        <h2>"Workers"</h2>
        <table data-testid="workers">
            <thead>
                <tr>
                    <th>"id"</th><th>"host"</th><th>"pid"</th><th>"up since"</th>
                    <th>"in flight"</th><th>"processed"</th><th>"failed"</th><th>"last heartbeat"</th>
                </tr>
            </thead>
            <tbody>
                {data
                    .workers
                    .into_iter()
                    .map(|w| {
                        let class = if w.gone { "gone" } else { "" };
                        let wid = w.id.clone();
                        view! {
                            <tr class=class data-worker=wid>
                                <td>
                                    <code>{or_dash(w.id)}</code>
                                    {w.gone.then(|| view! { <span class="badge err">"gone"</span> })}
                                </td>
                                <td>{or_dash(w.host)}</td>
                                <td>{w.pid}</td>
                                <td>{relative(now, w.started_ms)}</td>
                                <td>{w.in_flight}</td>
                                <td>{w.processed}</td>
                                <td>{w.failed}</td>
                                <td>{relative(now, w.last_seen_ms)}</td>
                            </tr>
                        }
                    })
                    .collect_view()}
            </tbody>
        </table>
        <h2>"Audit log"</h2>
        <table data-testid="audit">
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
                                <td>{relative(now, a.at_ms)}</td>
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
    }
}
