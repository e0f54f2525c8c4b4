//! `/admin/bulk`: bulk actions by filter. The operator picks an upstream (when there are
//! several: each is a queue of its own) and a state and narrows it by error text, query text,
//! tenant and a time window (a GET form, so the filter is in the URL); the page
//! shows how many tasks match before anything is done, and offers the actions that apply,
//! each naming that count. A run goes on in the background on the server (chunks of
//! `queue::bulk::BULK_CHUNK` through the per-task admin scripts, see `queue/src/bulk.rs`),
//! one at a time per queue; the page shows its progress bar (re-read every half second while
//! it runs, and on every live event), and a Stop button. The finished (or stopped) run is one
//! entry in the audit log with its filter and the number of tasks it changed.
//!
//! Above the per-action limit (`REPOLL_BULK_LIMIT`, default 10,000) nothing starts and the
//! page says how many match and what the limit is. The start re-counts on the server and
//! refuses when more tasks match than the count the button showed.

use leptos::prelude::*;
use leptos_router::hooks::use_query_map;
use serde::{Deserialize, Serialize};

use super::bulk_act::destructive;
pub use super::bulk_act::{bulk_act, BulkAct};
use super::frame::{session, signed_in, signed_out, AdminFrame};
use super::live::provide_live;
use super::ui::{can_act, duration, error_text, plural, PausedBanner};
use crate::pages::widgets::ProgressBar;
use model::PauseInfo;

// Named from here too: they are the arguments and answers of this page's public server
// functions (`BulkPreview`, `BulkAct`).
pub use super::bulk_data::FilterForm;
pub use model::BulkProgress;

/// States a bulk action selects from, with their labels.
const STATES: [(&str, &str); 4] = [
    ("dead", "Dead"),
    ("waiting", "Waiting / retrying"),
    ("ready", "Ready"),
    ("leased", "Leased"),
];

/// What the page shows for a filter.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BulkView {
    /// The filter in words.
    pub filter: String,
    pub state: String,
    pub matched: u64,
    pub scanned: u64,
    /// Every member of the state was looked at.
    pub complete: bool,
    pub limit: u64,
    /// Actions that apply to the state.
    pub actions: Vec<String>,
    /// The current or last run.
    pub run: Option<BulkProgress>,
    pub paused: Option<PauseInfo>,
    pub now_ms: i64,
    /// Every upstream's name (more than one: the page offers the choice).
    pub upstreams: Vec<String>,
}

/// How many tasks `filter` selects now, which actions apply, and the current or last run.
#[server(prefix = "/admin/fn")]
pub async fn bulk_preview(filter: FilterForm) -> Result<BulkView, ServerFnError> {
    use super::call::{admin_call, AdminCall};
    let AdminCall { ctx, .. } = admin_call(crate::auth::Role::Viewer).await?;
    let q = super::bulk_filter::queue_of(&ctx, &filter)?;
    let f = super::bulk_filter::filter(&filter)?;
    let failed = |e: queue::QueueError| crate::auth::unreachable("bulk preview", e);
    let (sel, run, paused, now_ms) = tokio::join!(
        q.bulk_select(&f, 0),
        q.bulk_progress(),
        q.pause_info(),
        q.now_ms()
    );
    let sel = sel.map_err(failed)?;
    Ok(BulkView {
        filter: f.describe_with(sel.sample.as_ref()),
        state: f.state.as_str().into(),
        matched: sel.matched,
        scanned: sel.scanned,
        complete: sel.complete,
        limit: ctx.admin.settings().bulk_limit,
        actions: queue::BulkAction::ALL
            .into_iter()
            .filter(|a| a.applies_to(f.state))
            .map(|a| a.as_str().to_string())
            .collect(),
        run: run.map_err(failed)?,
        paused: paused.map_err(failed)?,
        now_ms: now_ms.map_err(failed)?,
        upstreams: ctx.upstream_names(),
    })
}

/// `/admin/bulk?state=..&error=..&query=..&hours=..&field=..`.
#[component]
pub fn BulkPage() -> impl IntoView {
    // Resources before the frame (hydration matches them by order).
    let live = provide_live();
    let me = session();
    let query = use_query_map();
    let action = ServerAction::<BulkAct>::new();
    // Re-read every half second while a run is going (browser only).
    let poll = RwSignal::new(0u64);
    let running = RwSignal::new(false);
    let data = Resource::new(
        move || {
            (
                query.with(FilterForm::from_query),
                live.tick.get(),
                action.version().get(),
                poll.get(),
            )
        },
        move |(filter, _, _, _)| async move {
            if !signed_in(me).await {
                return signed_out();
            }
            bulk_preview(filter).await
        },
    );
    Effect::new(move |_| {
        let r = data
            .get()
            .and_then(|r| r.ok())
            .and_then(|d| d.run)
            .is_some_and(|r| r.state == "running");
        running.set(r);
    });
    #[cfg(feature = "hydrate")]
    {
        let handle = set_interval_with_handle(
            move || {
                if running.get_untracked() {
                    poll.update(|n| *n += 1);
                }
            },
            std::time::Duration::from_millis(500),
        );
        on_cleanup(move || {
            if let Ok(h) = handle {
                h.clear();
            }
        });
    }
    view! {
        <AdminFrame me>
            <BulkBody data action />
        </AdminFrame>
    }
}

#[component]
fn BulkBody(
    data: Resource<Result<BulkView, ServerFnError>>,
    action: ServerAction<BulkAct>,
) -> impl IntoView {
    let query = use_query_map();
    let form = move || query.with(FilterForm::from_query);
    let result = move || crate::pages::form_error::outcome(action).map(|r| r.unwrap_or_else(|e| e));
    view! {
        <section class="panel">
            <h1>"Bulk actions"</h1>
            <p class="muted">
                "Select tasks of one state by their last error, query text and age; the count shows before anything is done. "
                "A run works through the tasks in chunks on the server and can be stopped; it is recorded in the audit log."
            </p>
            <form method="get" action="/admin/bulk" class="bulk-filter" data-testid="bulk-filter">
                <label>
                    "State "
                    <select name="state" data-testid="bulk-state">
                        {move || {
                            let current = form().state;
                            STATES
                                .iter()
                                .map(|(name, label)| {
                                    let selected = current == *name || (current.is_empty() && *name == "dead");
                                    view! { <option value=*name selected=selected>{*label}</option> }
                                })
                                .collect_view()
                        }}
                    </select>
                </label>
                <label>
                    "Error contains "
                    <input type="text" name="error" data-testid="bulk-error" prop:value=move || form().error />
                </label>
                <label>
                    "Query contains "
                    <input type="text" name="query" data-testid="bulk-query" prop:value=move || form().query />
                </label>
                <label>
                    "Tenant "
                    <input type="text" name="tenant" class="narrow" placeholder="any" data-testid="bulk-tenant"
                        prop:value=move || form().tenant />
                </label>
                {move || {
                    // Several upstreams: which one's queue (each is a queue of its own).
                    let names = data
                        .get()
                        .and_then(|r| r.ok())
                        .map(|v| v.upstreams)
                        .unwrap_or_default();
                    let current = form().upstream;
                    (names.len() > 1).then(|| {
                        let options = names
                            .into_iter()
                            .map(|n| {
                                let selected = current == n || (current.is_empty() && n == "default");
                                view! { <option value=n.clone() selected=selected>{n.clone()}</option> }
                            })
                            .collect_view();
                        view! {
                            <label>"Upstream " <select name="upstream" data-testid="bulk-upstream">{options}</select></label>
                        }
                    })
                }}
                <label>
                    "In the last "
                    <input type="number" name="hours" min="0" step="any" class="narrow" data-testid="bulk-hours"
                        prop:value=move || form().hours />
                    " hours, by "
                    <select name="field" data-testid="bulk-field">
                        {move || {
                            let created = form().field == "created";
                            view! {
                                <option value="updated" selected=!created>"last change"</option>
                                <option value="created" selected=created>"creation"</option>
                            }
                        }}
                    </select>
                </label>
                // A class or group (from a facet or the dead work view) stays with the count.
                {move || {
                    let f = form();
                    let class = (!f.class.is_empty())
                        .then(|| view! { <input type="hidden" name="class" value=f.class /> });
                    let group = (!f.group.is_empty())
                        .then(|| view! { <input type="hidden" name="group" value=f.group /> });
                    view! { <span>{class}</span><span>{group}</span> }
                }}
                <button type="submit" data-testid="bulk-count-submit">"Count"</button>
            </form>
            <p class="action-result" data-testid="bulk-result" aria-live="polite">{result}</p>
            <div class="data">
                <Transition fallback=|| view! { <p>"Counting…"</p> }>
                    {move || data.get().map(|r| match r {
                        Ok(v) => view! { <BulkSummary data=v action form=form() /> }.into_any(),
                        Err(e) => view! { <p class="err" data-testid="bulk-error-text">{error_text(&e)}</p> }.into_any(),
                    })}
                </Transition>
            </div>
        </section>
    }
}

/// The hidden fields carrying the filter in an action form.
#[component]
fn FilterFields(form: FilterForm) -> impl IntoView {
    view! {
        <input type="hidden" name="filter[state]" value=form.state />
        <input type="hidden" name="filter[error]" value=form.error />
        <input type="hidden" name="filter[query]" value=form.query />
        <input type="hidden" name="filter[hours]" value=form.hours />
        <input type="hidden" name="filter[field]" value=form.field />
        <input type="hidden" name="filter[tenant]" value=form.tenant />
        <input type="hidden" name="filter[upstream]" value=form.upstream />
        <input type="hidden" name="filter[class]" value=form.class />
        <input type="hidden" name="filter[group]" value=form.group />
    }
}

#[component]
fn BulkSummary(data: BulkView, action: ServerAction<BulkAct>, form: FilterForm) -> impl IntoView {
    let over = data.matched > data.limit;
    let running = data.run.as_ref().is_some_and(|r| r.state == "running");
    let count_text = format!(
        "{} match{}",
        plural(data.matched, "task", "tasks"),
        if data.matched == 1 { "es" } else { "" }
    );
    let scope = if data.complete {
        format!("({})", data.filter)
    } else {
        format!(
            "({}; among the first {} looked at)",
            data.filter, data.scanned
        )
    };
    let over_text = over.then(|| {
        format!(
            "More than one bulk action may touch: the limit is {} (REPOLL_BULK_LIMIT). Narrow the filter, e.g. by error text or a shorter time window.",
            plural(data.limit, "task", "tasks")
        )
    });
    let matched = data.matched;
    let actions = data.actions.clone();
    let run_upstream = form.upstream.clone();
    // Only an admin can start or stop a run; a viewer sees the count and the progress.
    let buttons = (!over && matched > 0 && !running && can_act()).then(move || {
        actions
            .into_iter()
            .map(|op| {
                let label = match op.as_str() {
                    "retry" => "Retry",
                    "cancel" => "Cancel",
                    _ => "Purge",
                };
                let text = format!("{label} {}", plural(matched, "task", "tasks"));
                let class = if op == "retry" { "primary" } else { "danger" };
                let form = form.clone();
                let testid = format!("bulk-{op}");
                // A destructive run asks for the count typed: the browser holds the form until
                // it matches (with or without scripts), and the server checks it again.
                let typed = destructive(&op).then(|| {
                    let count = matched.to_string();
                    view! {
                        <label class="typed-count">
                            {format!("Type {count} to {}:", label.to_lowercase())}
                            " "
                            <input
                                type="text"
                                name="typed"
                                inputmode="numeric"
                                autocomplete="off"
                                required
                                pattern=format!("^{count}$")
                                title=format!("the number of tasks, {count}")
                                size="8"
                                data-testid=format!("bulk-{op}-typed")
                            />
                        </label>
                    }
                });
                view! {
                    <ActionForm action=action attr:class="inline">
                        <input type="hidden" name="op" value=op.clone() />
                        <FilterFields form=form />
                        <input type="hidden" name="confirmed" value=matched.to_string() />
                        {typed}
                        <button type="submit" class=class data-testid=testid>{text}</button>
                    </ActionForm>
                }
            })
            .collect_view()
    });
    let now = data.now_ms;
    view! {
        <div class="view">
            <PausedBanner paused=data.paused now />
            <p>
                <strong data-testid="bulk-count" data-count=data.matched.to_string()>{count_text}</strong>
                " "
                <span class="muted">{scope}</span>
            </p>
            <div>{over_text.map(|t| view! { <p class="err" data-testid="bulk-over-limit">{t}</p> })}</div>
            <div class="row">{buttons}</div>
            <div>{data.run.map(|r| view! { <RunProgress run=r action now upstream=run_upstream.clone() /> })}</div>
        </div>
    }
}

#[component]
fn RunProgress(
    run: BulkProgress,
    action: ServerAction<BulkAct>,
    now: i64,
    upstream: String,
) -> impl IntoView {
    let running = run.state == "running";
    let took = run.ended_ms.unwrap_or(now) - run.started_ms;
    let rate =
        (run.done > 0 && took > 0).then(|| format!(", {} tasks/s", run.done as i64 * 1000 / took));
    let status = match run.state.as_str() {
        "running" if run.stop_requested => "stopping".to_string(),
        "running" => "running".to_string(),
        "stopped" => format!("stopped after {}", duration(took)),
        "finished" => format!("finished in {}", duration(took)),
        other => other.to_string(),
    };
    let summary = format!(
        "bulk {} by {}: {} of {} gone through, {} changed — {}{}",
        run.action,
        run.who,
        run.done,
        run.total,
        run.changed,
        status,
        rate.unwrap_or_default()
    );
    let stop = (running && can_act()).then(|| {
        view! {
            <ActionForm action=action attr:class="inline">
                <input type="hidden" name="op" value="stop" />
                <FilterFields form=FilterForm { upstream, ..FilterForm::default() } />
                <button type="submit" class="danger" data-testid="bulk-stop">"Stop"</button>
            </ActionForm>
        }
    });
    // Without JavaScript a running page refreshes itself (a constant, never upstream data).
    let refresh = running
        .then(|| view! { <noscript inner_html=r#"<meta http-equiv="refresh" content="2">"# /> });
    view! {
        <div class="bulk-run" data-testid="bulk-progress" data-state=run.state.clone()
            data-done=run.done.to_string() data-total=run.total.to_string()>
            <h2>{if running { "Running" } else { "Last run" }}</h2>
            <ProgressBar percent=run.percent() />
            <p data-testid="bulk-summary">{summary}</p>
            <p class="muted">{run.filter}</p>
            {stop}
            {refresh}
        </div>
    }
}
