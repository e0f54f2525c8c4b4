//! Stuck leases: leases past their deadline (the holder stopped renewing — crashed, hung or
//! cut off) and leases close to it, with their holder and how long; release one or all. Every
//! upstream's queue is read: a stuck worker of any API shows here, named by its upstream.
//!
//! "Release all" takes only leases already past their deadline: one that is merely close may
//! belong to a healthy worker about to renew it. A single release names the lease's token,
//! so a task reclaimed meanwhile stays with its new holder.

use leptos::prelude::*;
use leptos_router::{components::A, hooks::use_query_map};
use serde::{Deserialize, Serialize};

use super::actions::{Act, ActButton, ActionResult};
use super::admin_op::AdminOp;
use super::confirm::{provide_confirm, ConfirmAction};
use super::frame::{session, signed_in, signed_out, AdminFrame};
use super::live::provide_live;
use super::task_rows::whole_on_task_page;
use super::ui::{can_act, duration, error_text, or_dash, plural, short, PausedBanner};
#[cfg(feature = "ssr")]
use crate::pages::format::{cut, ROW_TEXT_CHARS};
use crate::pages::format::{iso, utc};
use model::{LeaseInfo, PauseInfo};

/// Default "close to the deadline" window.
const DEFAULT_WITHIN_MS: u64 = 20_000;

/// One lease with the upstream whose queue holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRow {
    pub upstream: String,
    pub lease: LeaseInfo,
}

/// What the page shows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeasesData {
    pub rows: Vec<LeaseRow>,
    /// More than one upstream: the table names each row's.
    pub several_upstreams: bool,
    pub within_ms: u64,
    /// The queue's pause, if paused.
    pub paused: Option<PauseInfo>,
    pub now_ms: i64,
}

/// Leases past their deadline or within `within_ms` of it, soonest deadline first.
#[server(prefix = "/admin/fn")]
pub async fn leases(within_ms: u64) -> Result<LeasesData, ServerFnError> {
    use super::call::{admin_call, AdminCall};
    let AdminCall { ctx, .. } = admin_call(crate::auth::Role::Viewer).await?;
    let within_ms = within_ms.min(3_600_000);
    let failed = |e: queue::QueueError| crate::auth::unreachable("lease read", e);
    let q = &ctx.queue;
    let (paused, now_ms) = tokio::join!(q.pause_info(), q.now_ms());
    // One upstream after another (at most 17); soonest deadline first over all of them.
    let mut rows = Vec::new();
    for (name, uq) in ctx.queues() {
        for lease in uq.stuck_leases(within_ms, 500).await.map_err(failed)? {
            rows.push(LeaseRow {
                upstream: name.to_string(),
                lease,
            });
        }
    }
    rows.sort_by_key(|r| r.lease.deadline_ms);
    rows.truncate(500);
    // A row shows the start of a long query; its task page, linked, shows it whole.
    for r in &mut rows {
        r.lease.query = cut(&r.lease.query, ROW_TEXT_CHARS);
    }
    Ok(LeasesData {
        rows,
        several_upstreams: ctx.upstream_names().len() > 1,
        within_ms,
        paused: paused.map_err(failed)?,
        now_ms: now_ms.map_err(failed)?,
    })
}

/// `/admin/leases?within=<ms>`.
#[component]
pub fn LeasesPage() -> impl IntoView {
    // Resources are created here, before the frame, so their order (which hydration
    // matches by) never depends on when the session check resolves.
    let live = provide_live();
    let me = session();
    let query = use_query_map();
    let action = ServerAction::<Act>::new();
    provide_confirm(action);
    let data = Resource::new(
        move || {
            let within = query
                .get()
                .get("within")
                .and_then(|w| w.parse::<u64>().ok())
                .unwrap_or(DEFAULT_WITHIN_MS);
            (within, live.tick.get(), action.version().get())
        },
        move |(within, _, _)| async move {
            if !signed_in(me).await {
                return signed_out();
            }
            leases(within).await
        },
    );
    view! {
        <AdminFrame me>
            <LeasesBody data action />
        </AdminFrame>
    }
}

#[component]
fn LeasesBody(
    data: Resource<Result<LeasesData, ServerFnError>>,
    action: ServerAction<Act>,
) -> impl IntoView {
    view! {
        <section class="panel">
            <h1>"Stuck leases"</h1>
            <p class="muted">
                "Leases past their deadline (the worker stopped renewing) and leases close to it. "
                "Released tasks are due again at once."
            </p>
            <p class="row">
                "Show leases ending within "
                <A href="/admin/leases">"20 s"</A>
                <A href="/admin/leases?within=60000">"1 min"</A>
                <A href="/admin/leases?within=300000">"5 min"</A>
            </p>
            <ActionResult action />
            <div class="data">
                <Transition fallback=|| view! { <p>"Reading…"</p> }>
                {move || data.get().map(|r| match r {
                        Ok(d) => view! { <LeaseTable data=d action /> }.into_any(),
                        Err(e) => view! { <p class="err" data-testid="leases-error">{error_text(&e)}</p> }.into_any(),
                    })}
            </Transition>
            </div>
        </section>
    }
}

#[component]
fn LeaseTable(data: LeasesData, action: ServerAction<Act>) -> impl IntoView {
    let now = data.now_ms;
    let past = data.rows.iter().filter(|r| r.lease.overdue_ms >= 0).count() as u64;
    let several = data.several_upstreams;
    let near = data.rows.len() as u64 - past;
    let summary = format!(
        "{} past the deadline, {} within {} of it",
        plural(past, "lease", "leases"),
        near,
        duration(data.within_ms as i64),
    );
    let empty = data.rows.is_empty();
    // A viewer gets the table without its Release column.
    let may_act = can_act();
    let summary_class = if past > 0 { "alarm-text" } else { "" };
    view! {
        <div class="view">
        <PausedBanner paused=data.paused now />
        <p data-testid="lease-summary" class=summary_class>{summary}</p>
        <div>
            <ConfirmAction
                action
                op=AdminOp::ReleaseStuck
                label="Release all past the deadline"
                question=format!("Release {} past the deadline?", plural(past, "lease", "leases"))
                yes=format!("Release {}", plural(past, "lease", "leases"))
                count=past
                here="/admin/leases"
                testid="release-all"
            />
        </div>
        {empty.then(|| view! { <p class="empty" data-testid="leases-empty">"No lease is past or near its deadline."</p> })}
        <div class="table-scroll">
        <table data-testid="lease-table" class:hidden=empty>
            <thead>
                <tr>
                    {several.then(|| view! { <th>"upstream"</th> })}
                    <th>"task"</th><th>"query"</th><th>"holder"</th><th>"token"</th><th>"deadline"</th>
                    {may_act.then(|| view! { <th></th> })}
                </tr>
            </thead>
            <tbody>
                {data
                    .rows
                    .into_iter()
                    .map(|r| {
                        let upstream = several.then(|| view! { <td>{r.upstream.clone()}</td> });
                        let l = r.lease;
                        let deadline = l.deadline_ms;
                        let status = if l.overdue_ms >= 0 {
                            format!("past by {}", duration(l.overdue_ms))
                        } else {
                            format!("in {}", duration(-l.overdue_ms))
                        };
                        let class = if l.overdue_ms >= 0 { "stuck" } else { "" };
                        let (id, worker) = (l.id.clone(), l.worker.clone());
                        let href = format!("/admin/tasks/{}", l.id);
                        let more_query = whole_on_task_page(&l.query, &href, "query");
                        let short_id = short(&l.id);
                        view! {
                            <tr data-testid="lease-row" data-id=l.id.to_string() data-worker=worker class=class>
                                {upstream}
                                <td><A href=href><code>{short_id}</code></A></td>
                                <td class="query">
                                    <crate::pages::reveal::QueryText text=l.query />
                                    <span>{more_query}</span>
                                </td>
                                <td>{or_dash(l.worker)}</td>
                                <td>{l.token}</td>
                                <td>
                                    <time datetime=iso(deadline) title=utc(deadline)>{status}</time>
                                </td>
                                {may_act.then(|| view! {
                                    <td>
                                        <ActButton action op=AdminOp::Release id=id token=l.token label="Release" testid="lease-release" />
                                    </td>
                                })}
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
