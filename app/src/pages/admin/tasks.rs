//! The task list: one state at a time with cursor pages, and search.
//!
//! Order is the queue's own: by due time (ready, waiting), lease deadline (leased), time of
//! death (dead) or completion (results), oldest first by default or newest first
//! (`order=newest`). Cursors are the queue's "score:id" cursors, stable while tasks come and
//! go; a cursor is only meaningful with the order it came from, so every link carries both.
//!
//! Search takes query text or an id. Query text is normalised and hashed exactly like the
//! queue does, so it finds the one task of that query in O(1). An id prefix (hex) is looked
//! up with a bounded `SCAN` over the task and result keys; on a big queue it may stop before
//! seeing every key and says so.

use leptos::prelude::*;
use leptos_router::{components::A, hooks::use_query_map};
use serde::{Deserialize, Serialize};

use super::actions::{Act, ActButton, ActionResult};
use super::frame::{session, signed_in, signed_out, AdminFrame};
use super::live::provide_live;
use super::model::{ResultRow, TaskRow};
use super::ui::{error_text, or_dash, relative, short};

/// Rows per page.
#[cfg_attr(not(feature = "ssr"), allow(dead_code))]
const PAGE: usize = 50;

/// The states a list can show, with their labels.
const STATES: [(&str, &str); 5] = [
    ("ready", "Ready"),
    ("waiting", "Waiting / retrying"),
    ("leased", "Leased"),
    ("dead", "Dead"),
    ("results", "Results"),
];

/// One page of a listing, or search hits.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listing {
    pub state: String,
    /// "oldest" or "newest".
    pub order: String,
    pub tasks: Vec<TaskRow>,
    pub results: Vec<ResultRow>,
    pub next_cursor: Option<String>,
    /// Members of the listed set (for a search: hits).
    pub total: u64,
    /// The search text, when this is a search.
    pub search: Option<String>,
    /// Said next to the results (e.g. a search that did not see every key).
    pub note: Option<String>,
    pub now_ms: i64,
}

/// A page of `state` in `order` ("oldest", the default, or "newest") after `cursor`, or the
/// hits of `search` when it is not empty.
#[server(prefix = "/admin/fn")]
pub async fn list_tasks(
    state: String,
    cursor: Option<String>,
    search: Option<String>,
    order: Option<String>,
) -> Result<Listing, ServerFnError> {
    use crate::auth::{refuse, require, Role};
    use http::StatusCode;
    require(Role::Viewer).await?;
    let ctx = crate::context::app_context()?;
    let q = &ctx.queue;
    let failed = |e: queue::QueueError| {
        tracing::warn!(error = %e, "task list failed");
        refuse(StatusCode::SERVICE_UNAVAILABLE, "Redis is unreachable")
    };
    let now_ms = q.now_ms().await.map_err(failed)?;
    if let Some(text) = search.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        if text.len() > 2048 {
            return Err(refuse(StatusCode::BAD_REQUEST, "search text too long"));
        }
        let mut hits = ssr::search(q, text).await.map_err(failed)?;
        hits.now_ms = now_ms;
        return Ok(hits);
    }
    let list_state = match state.as_str() {
        "" | "ready" => queue::ListState::Ready,
        "waiting" => queue::ListState::Waiting,
        "leased" => queue::ListState::Leased,
        "dead" => queue::ListState::Dead,
        "results" => queue::ListState::Results,
        _ => return Err(refuse(StatusCode::BAD_REQUEST, "unknown state")),
    };
    let (order, order_name) = match order.as_deref() {
        None | Some("") | Some("oldest") => (queue::Order::OldestFirst, "oldest"),
        Some("newest") => (queue::Order::NewestFirst, "newest"),
        _ => return Err(refuse(StatusCode::BAD_REQUEST, "unknown order")),
    };
    // A malformed cursor (edited URL) starts from the first page instead of failing.
    let cursor = cursor.filter(|c| {
        c.split_once(':')
            .is_some_and(|(s, id)| s.parse::<i64>().is_ok() && id.len() <= 64)
    });
    let page = q
        .list(list_state, order, cursor.as_deref(), PAGE)
        .await
        .map_err(failed)?;
    Ok(Listing {
        state: if state.is_empty() {
            "ready".into()
        } else {
            state
        },
        order: order_name.into(),
        tasks: page.items.into_iter().map(Into::into).collect(),
        results: page.results.into_iter().map(Into::into).collect(),
        next_cursor: page.next_cursor,
        total: page.total,
        search: None,
        note: None,
        now_ms,
    })
}

#[cfg(feature = "ssr")]
mod ssr {
    use std::collections::BTreeSet;

    use super::Listing;

    /// `SCAN` calls (of ~1000 keys each) an id-prefix search may make.
    const SCAN_BUDGET: usize = 100;
    /// Hits returned at most.
    const MAX_HITS: usize = 50;

    pub async fn search(q: &queue::Queue, text: &str) -> queue::Result<Listing> {
        let mut ids = Vec::new();
        let mut note = None;
        if let Ok(norm) = queue::normalise_query(text) {
            ids.push(queue::task_id(&norm));
        }
        let lower = text.to_ascii_lowercase();
        if lower.len() <= 32 && lower.bytes().all(|b| b.is_ascii_hexdigit()) {
            if lower.len() == 32 {
                ids.push(lower);
            } else {
                let (found, complete) = scan_prefix(q, &lower).await?;
                if !complete {
                    note = Some(format!(
                        "id prefix search looked at about {}k keys and stopped; type more of the id",
                        SCAN_BUDGET
                    ));
                }
                ids.extend(found);
            }
        }
        let mut seen = BTreeSet::new();
        ids.retain(|id| seen.insert(id.clone()));
        let mut out = Listing {
            state: "search".into(),
            search: Some(text.to_string()),
            note,
            ..Listing::default()
        };
        for id in ids.iter().take(MAX_HITS) {
            if let Some(d) = q.get(id).await? {
                if let Some(t) = d.task {
                    out.tasks.push(t.into());
                } else if let Some(r) = d.result {
                    out.results.push(r.into());
                }
            }
        }
        out.total = (out.tasks.len() + out.results.len()) as u64;
        Ok(out)
    }

    /// Ids of task and result keys starting with `prefix` (hex only, so no glob characters);
    /// `false` when the budget ran out before the whole keyspace was seen.
    async fn scan_prefix(
        q: &queue::Queue,
        prefix: &str,
    ) -> queue::Result<(BTreeSet<String>, bool)> {
        let name: String = q
            .config()
            .name
            .chars()
            .flat_map(|c| match c {
                '*' | '?' | '[' | ']' | '\\' => vec!['\\', c],
                c => vec![c],
            })
            .collect();
        // Same layout as the queue's keys: `{name}:t:<id>` (live task), `{name}:r:<id>` (result).
        let pattern = format!("{{{name}}}:[tr]:{prefix}*");
        let mut c = q.connection();
        let mut cursor: u64 = 0;
        let mut found = BTreeSet::new();
        for _ in 0..SCAN_BUDGET {
            let (next, keys): (u64, Vec<String>) = queue::redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut c)
                .await?;
            found.extend(
                keys.iter()
                    .filter_map(|k| k.rsplit(':').next().map(String::from)),
            );
            if next == 0 || found.len() >= MAX_HITS {
                return Ok((found, true));
            }
            cursor = next;
        }
        Ok((found, false))
    }
}

/// `/admin/tasks?state=..&cursor=..&q=..`.
#[component]
pub fn TasksPage() -> impl IntoView {
    // Resources are created here, before the frame, so their order (which hydration
    // matches by) never depends on when the session check resolves.
    let live = provide_live();
    let me = session();
    let query = use_query_map();
    let action = ServerAction::<Act>::new();
    let data = Resource::new(
        move || {
            let m = query.get();
            (
                m.get("state").unwrap_or_default(),
                m.get("cursor"),
                m.get("q"),
                m.get("order"),
                live.tick.get(),
                action.version().get(),
            )
        },
        move |(state, cursor, search, order, _, _)| async move {
            if !signed_in(me).await {
                return signed_out();
            }
            list_tasks(state, cursor, search, order).await
        },
    );
    view! {
        <AdminFrame me>
            <TasksBody data action />
        </AdminFrame>
    }
}

#[component]
fn TasksBody(
    data: Resource<Result<Listing, ServerFnError>>,
    action: ServerAction<Act>,
) -> impl IntoView {
    let query = use_query_map();
    let current = move || query.get().get("state").unwrap_or_else(|| "ready".into());
    // Tabs keep the chosen order (no cursor: a new state starts at its first page).
    let order = move || query.get().get("order").unwrap_or_default();
    view! {
        <section class="panel">
            <h1>"Tasks"</h1>
            <form method="get" action="/admin/tasks" class="search" data-testid="search-form">
                <input
                    type="search"
                    name="q"
                    placeholder="query text or id (prefix)"
                    data-testid="search-input"
                    prop:value=move || query.get().get("q").unwrap_or_default()
                />
                <button type="submit" data-testid="search-submit">"Search"</button>
            </form>
            <nav class="tabs">
                {STATES
                    .iter()
                    .map(|(name, label)| {
                        let name = *name;
                        view! {
                            <A
                                href=move || tasks_href(name, &order(), None)
                                attr:class=move || if current() == name { "tab active" } else { "tab" }
                                attr:data-testid=format!("tab-{name}")
                            >
                                {*label}
                            </A>
                        }
                    })
                    .collect_view()}
            </nav>
            <ActionResult action />
            <div class="data">
                <Transition fallback=|| view! { <p>"Reading…"</p> }>
                {move || data.get().map(|r| match r {
                        Ok(l) => view! { <ListingView listing=l action /> }.into_any(),
                        Err(e) => view! { <p class="err" data-testid="tasks-error">{error_text(&e)}</p> }.into_any(),
                    })}
            </Transition>
            </div>
        </section>
    }
}

/// The link to a page of the task list. Oldest-first is the default and stays out of the
/// URL; a cursor only ever travels with the order it came from.
fn tasks_href(state: &str, order: &str, cursor: Option<&str>) -> String {
    let mut href = format!("/admin/tasks?state={state}");
    if order == "newest" {
        href.push_str("&order=newest");
    }
    if let Some(c) = cursor {
        href.push_str("&cursor=");
        href.push_str(c);
    }
    href
}

#[component]
fn ListingView(listing: Listing, action: ServerAction<Act>) -> impl IntoView {
    let now = listing.now_ms;
    let heading = match &listing.search {
        Some(s) => format!("{} found for \u{201c}{s}\u{201d}", listing.total),
        None => format!(
            "{} {} ({} first)",
            listing.total, listing.state, listing.order
        ),
    };
    let (state, order) = (listing.state.as_str(), listing.order.as_str());
    let next = listing.next_cursor.as_deref().map(|c| {
        let href = tasks_href(state, order, Some(c));
        view! { <A href=href attr:data-testid="next-page">"Next page →"</A> }
    });
    let first = listing.search.is_none().then(|| {
        view! { <A href=tasks_href(state, order, None)>"First page"</A> }
    });
    // The other order, from its first page.
    let flip = listing.search.is_none().then(|| {
        let (other, label) = if order == "newest" {
            ("oldest", "Oldest first")
        } else {
            ("newest", "Newest first")
        };
        view! { <A href=tasks_href(state, other, None) attr:data-testid="order-toggle">{label}</A> }
    });
    let dead = listing.state == "dead" && listing.total > 0;
    view! {
        <div class="view">
        <p class="row"><span data-testid="listing-total">{heading}</span><span>{flip}</span></p>
        // Optional parts each sit in their own element: bare empty placeholders next to each
        // other are what hydration is most likely to mis-assign.
        <div class="muted">{listing.note}</div>
        <div>
            {dead.then(|| view! { <ActButton action op="retry_all_dead" label="Retry all dead" testid="retry-all-dead" /> })}
        </div>
        <table data-testid="task-table">
            <thead>
                <tr>
                    <th>"id"</th><th>"query"</th><th>"state"</th><th>"attempts"</th><th>"polls"</th>
                    <th>"when"</th><th>"worker"</th><th>"last error"</th>
                </tr>
            </thead>
            <tbody>
                {listing
                    .tasks
                    .into_iter()
                    .map(|t| {
                        let when = match t.state.as_str() {
                            "due" => format!("due {}", relative(now, t.due_ms.unwrap_or(0))),
                            "leased" => format!("lease ends {}", relative(now, t.lease_deadline_ms.unwrap_or(0))),
                            "dead" => format!("died {} ({})", relative(now, t.updated_ms), t.dead_reason.clone().unwrap_or_default()),
                            _ => relative(now, t.updated_ms),
                        };
                        let (href, short_id) = (format!("/admin/tasks/{}", t.id), short(&t.id));
                        view! {
                            <tr data-testid="task-row" data-id=t.id>
                                <td><A href=href><code>{short_id}</code></A></td>
                                <td class="query">{or_dash(t.query)}</td>
                                <td>{t.state}</td>
                                <td>{format!("{}/{}", t.attempts, t.max_attempts)}</td>
                                <td>{t.polls}</td>
                                <td>{when}</td>
                                <td>{or_dash(t.worker.unwrap_or_default())}</td>
                                <td class="error-text">{or_dash(t.last_error.unwrap_or_default())}</td>
                            </tr>
                        }
                    })
                    .collect_view()}
                {listing
                    .results
                    .into_iter()
                    .map(|r| {
                        let (href, short_id) = (format!("/admin/tasks/{}", r.id), short(&r.id));
                        view! {
                            <tr data-testid="task-row" data-id=r.id>
                                <td><A href=href><code>{short_id}</code></A></td>
                                <td class="query">{or_dash(r.query)}</td>
                                <td>"done"</td>
                                <td>"—"</td>
                                <td>{r.polls}</td>
                                <td>{format!("completed {}", relative(now, r.completed_ms))}</td>
                                <td></td>
                                <td></td>
                            </tr>
                        }
                    })
                    .collect_view()}
            </tbody>
        </table>
        <p class="pager row"><span>{first}</span><span>{next}</span></p>
        </div>
    }
}
