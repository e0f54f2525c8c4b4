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
//!
//! The rows themselves, and what of a task they carry, are `task_rows`'.

use leptos::prelude::*;
use leptos_router::{components::A, hooks::use_query_map};
use serde::{Deserialize, Serialize};

use super::actions::{Act, ActionResult};
use super::frame::{can_act, session, signed_in, signed_out, AdminFrame};
use super::live::provide_live;
#[cfg(feature = "ssr")]
use super::task_rows::rows_only;
use super::task_rows::TaskTable;
use super::ui::{error_text, plural, provide_confirm, ConfirmAction, PausedBanner};
use crate::pages::format::encode_component;
use model::{PauseInfo, StoredResult, Task};

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

/// Members of each list, for the tabs (one consistent snapshot of the queue's counts).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TabCounts {
    pub ready: u64,
    /// Waiting for a later poll, retrying included (the "waiting" list holds both).
    pub waiting: u64,
    pub leased: u64,
    /// Leases past their deadline (part of `leased`).
    pub stuck: u64,
    pub dead: u64,
    pub results: u64,
}

impl TabCounts {
    /// The count of list `state`.
    pub fn of(&self, state: &str) -> u64 {
        match state {
            "ready" => self.ready,
            "waiting" => self.waiting,
            "leased" => self.leased,
            "dead" => self.dead,
            "results" => self.results,
            _ => 0,
        }
    }
}

/// A task or result, in words: "1 dead task", "3 stored results".
fn state_noun(state: &str, n: u64) -> String {
    match state {
        "ready" => plural(n, "ready task", "ready tasks"),
        "waiting" => plural(n, "waiting task", "waiting tasks"),
        "leased" => plural(n, "leased task", "leased tasks"),
        "dead" => plural(n, "dead task", "dead tasks"),
        "results" => plural(n, "stored result", "stored results"),
        _ => plural(n, "task", "tasks"),
    }
}

/// What an empty list says.
fn empty_text(state: &str) -> &'static str {
    match state {
        "ready" => "No ready tasks: nothing is waiting for a worker.",
        "waiting" => "No tasks are waiting for a later poll or a retry.",
        "leased" => "No leased tasks: no worker is polling right now.",
        "dead" => "No dead tasks.",
        "results" => "No stored results.",
        _ => "Nothing here.",
    }
}

/// One page of a listing, or search hits.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listing {
    pub state: String,
    /// "oldest" or "newest".
    pub order: String,
    pub tasks: Vec<Task>,
    pub results: Vec<StoredResult>,
    pub next_cursor: Option<String>,
    /// Members of the listed set (for a search: hits).
    pub total: u64,
    /// The search text, when this is a search.
    pub search: Option<String>,
    /// Said next to the results (e.g. a search that did not see every key).
    pub note: Option<String>,
    pub now_ms: i64,
    /// Counts of every list, for the tabs.
    pub counts: TabCounts,
    /// The queue's pause, if paused.
    pub paused: Option<PauseInfo>,
    /// This page started at a cursor (it is not the first page).
    pub paged: bool,
    /// The upstream whose tasks these are ("" = the default one).
    pub upstream: String,
    /// Every upstream's name (more than one: the page offers the choice).
    pub upstreams: Vec<String>,
    /// For a search a bulk filter can express: the bulk page with that filter.
    #[serde(default)]
    pub bulk_href: Option<String>,
}

/// A page of `state` in `order` ("oldest", the default, or "newest") after `cursor`, or the
/// hits of `search` when it is not empty.
#[server(prefix = "/admin/fn")]
pub async fn list_tasks(
    state: String,
    cursor: Option<String>,
    search: Option<String>,
    order: Option<String>,
    upstream: Option<String>,
) -> Result<Listing, ServerFnError> {
    use crate::auth::{refuse, require, Role};
    use http::StatusCode;
    require(Role::Viewer).await?;
    let ctx = crate::context::app_context()?;
    let (q, _) = ctx
        .upstream(upstream.as_deref())
        .map_err(|e| refuse(StatusCode::BAD_REQUEST, &e.to_string()))?;
    let upstream = match q.config().upstream.as_str() {
        "" => String::new(),
        u => u.to_string(),
    };
    let upstreams = ctx.upstream_names();
    let failed = |e: queue::QueueError| {
        tracing::warn!(error = %e, "task list failed");
        refuse(StatusCode::SERVICE_UNAVAILABLE, "Redis is unreachable")
    };
    let now_ms = q.now_ms().await.map_err(failed)?;
    let (stats, paused) = tokio::join!(q.stats(), q.pause_info());
    let stats = stats.map_err(failed)?;
    let paused = paused.map_err(failed)?;
    let counts = TabCounts {
        ready: stats.ready,
        waiting: stats.waiting + stats.retrying,
        leased: stats.leased,
        stuck: stats.stuck,
        dead: stats.dead,
        results: stats.results,
    };
    if let Some(text) = search.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        if text.len() > 2048 {
            return Err(refuse(StatusCode::BAD_REQUEST, "search text too long"));
        }
        let parsed = super::search::parse(text)
            .map_err(|e| refuse(StatusCode::BAD_REQUEST, &format!("search: {e}")))?;
        let mut hits = super::search::run(q, text, &parsed).await.map_err(failed)?;
        hits.now_ms = now_ms;
        hits.counts = counts;
        hits.paused = paused;
        hits.bulk_href = parsed.bulk_href(&upstream);
        hits.upstream = upstream;
        hits.upstreams = upstreams;
        rows_only(&mut hits.tasks, &mut hits.results);
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
    let cursor = cursor.filter(|c| queue::is_list_cursor(c));
    let paged = cursor.is_some();
    let mut page = q
        .list(list_state, order, cursor.as_deref(), PAGE)
        .await
        .map_err(failed)?;
    // What the rows show and nothing more: this is sent with the page, twice.
    rows_only(&mut page.items, &mut page.results);
    Ok(Listing {
        state: if state.is_empty() {
            "ready".into()
        } else {
            state
        },
        order: order_name.into(),
        tasks: page.items,
        results: page.results,
        next_cursor: page.next_cursor,
        total: page.total,
        search: None,
        note: None,
        now_ms,
        counts,
        paused,
        paged,
        upstream,
        upstreams,
        bulk_href: None,
    })
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
    provide_confirm(action);
    let data = Resource::new(
        move || {
            let m = query.get();
            (
                m.get("state").unwrap_or_default(),
                m.get("cursor"),
                m.get("q"),
                m.get("order"),
                m.get("upstream"),
                live.tick.get(),
                action.version().get(),
            )
        },
        move |(state, cursor, search, order, upstream, _, _)| async move {
            if !signed_in(me).await {
                return signed_out();
            }
            list_tasks(state, cursor, search, order, upstream).await
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
    remember_list(query);
    view! {
        <section class="panel">
            <h1>"Tasks"</h1>
            <form method="get" action="/admin/tasks" class="search" role="search" data-testid="search-form">
                <label for="task-search">"Search tasks"</label>
                <input
                    type="search"
                    id="task-search"
                    name="q"
                    placeholder="query text, id, or state:dead error:\"HTTP 500\" after:2h"
                    title="query text or id prefix (press / to come here)"
                    list="search-suggestions"
                    aria-describedby="search-help"
                    data-testid="search-input"
                    prop:value=move || query.get().get("q").unwrap_or_default()
                />
                <datalist id="search-suggestions">
                    <option value="state:dead"></option>
                    <option value="state:waiting"></option>
                    <option value="state:ready"></option>
                    <option value="state:leased"></option>
                    <option value="state:dead error:\"HTTP 5\""></option>
                    <option value="after:1h"></option>
                    <option value="after:24h"></option>
                    <option value="tenant:public"></option>
                </datalist>
                // A search stays in the upstream being looked at.
                {move || {
                    query.get().get("upstream").filter(|u| !u.is_empty()).map(|u| {
                        view! { <input type="hidden" name="upstream" value=u /> }
                    })
                }}
                <button type="submit" data-testid="search-submit">"Search"</button>
                <p id="search-help" class="hint">
                    "Qualifiers: " <code>"state:dead"</code> " (waiting, ready, leased), "
                    <code>"error:\"HTTP 500\""</code> ", " <code>"query:order-"</code> ", "
                    <code>"after:2h"</code> " (changed within; s, m, h, d), "
                    <code>"tenant:acme"</code> " (or " <code>"tenant:none"</code> "). Other words: an exact "
                    "query or id first, else part of the query text. Looks at up to 20,000 tasks "
                    "of each state."
                </p>
            </form>
            <ActionResult action />
            <div class="data">
                <Transition fallback=|| view! { <p>"Reading…"</p> }>
                {move || data.get().map(|r| match r {
                        Ok(l) => view! { <ListingView listing=l action /> }.into_any(),
                        Err(e) => view! {
                            <div class="view">
                                <Tabs counts=None current=None order=String::new() upstream=String::new() />
                                <p class="err" data-testid="tasks-error">{error_text(&e)}</p>
                            </div>
                        }.into_any(),
                    })}
            </Transition>
            </div>
        </section>
    }
}

/// The state tabs: a real tab strip, the current one marked `aria-current="page"`, each with
/// its count (dead and stuck in red when above 0). Tabs keep the chosen order (no cursor: a
/// new state starts at its first page). A search has no current tab.
#[component]
fn Tabs(
    counts: Option<TabCounts>,
    current: Option<String>,
    order: String,
    upstream: String,
) -> impl IntoView {
    view! {
        <nav class="tabs" aria-label="Task states" data-testid="state-tabs">
            {STATES
                .iter()
                .map(|(name, label)| {
                    let name = *name;
                    let here = current.as_deref() == Some(name);
                    let n = counts.as_ref().map(|c| c.of(name));
                    let stuck = counts.as_ref().map(|c| c.stuck).unwrap_or(0);
                    let alarming = (name == "dead" && n.unwrap_or(0) > 0)
                        || (name == "leased" && stuck > 0);
                    let class = match (here, alarming) {
                        (true, true) => "tab active alarm",
                        (true, false) => "tab active",
                        (false, true) => "tab alarm",
                        (false, false) => "tab",
                    };
                    let title = (name == "leased" && stuck > 0)
                        .then(|| format!("{} past the deadline", plural(stuck, "lease", "leases")));
                    view! {
                        <a
                            href=tasks_href(name, &order, None, &upstream)
                            class=class
                            aria-current=here.then_some("page")
                            title=title
                            data-testid=format!("tab-{name}")
                        >
                            {*label}
                            {n.map(|n| view! { " " <span class="tab-count" data-testid=format!("tab-count-{name}")>{n}</span> })}
                        </a>
                    }
                })
                .collect_view()}
        </nav>
    }
}

/// The link to a page of the task list. Oldest-first is the default and stays out of the
/// URL; a cursor only ever travels with the order it came from; a named upstream is kept.
/// The bulk page for one state of one upstream's tasks.
fn tasks_bulk_href(state: &str, upstream: &str) -> String {
    let mut href = format!("/admin/bulk?state={state}");
    if !upstream.is_empty() && upstream != "default" {
        href.push_str("&upstream=");
        href.push_str(&encode_component(upstream));
    }
    href
}

fn tasks_href(state: &str, order: &str, cursor: Option<&str>, upstream: &str) -> String {
    let mut href = format!("/admin/tasks?state={state}");
    if !upstream.is_empty() && upstream != "default" {
        href.push_str("&upstream=");
        href.push_str(&encode_component(upstream));
    }
    if order == "newest" {
        href.push_str("&order=newest");
    }
    if let Some(c) = cursor {
        href.push_str("&cursor=");
        href.push_str(&encode_component(c));
    }
    href
}

/// Where the task list is now (tab, order, page or search), as a link back to it.
fn list_href(q: &leptos_router::params::ParamsMap) -> String {
    if let Some(search) = q.get_str("q").filter(|s| !s.trim().is_empty()) {
        return format!("/admin/tasks?q={}", encode_component(search));
    }
    let state = q
        .get_str("state")
        .filter(|s| STATES.iter().any(|(n, _)| n == s));
    let order = q.get_str("order").unwrap_or_default();
    match state {
        Some(state) => tasks_href(
            state,
            order,
            q.get_str("cursor"),
            q.get_str("upstream").unwrap_or_default(),
        ),
        None if order == "newest" => "/admin/tasks?order=newest".into(),
        None => "/admin/tasks".into(),
    }
}

/// Session storage key of the list a task page goes back to.
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
pub(super) const BACK_KEY: &str = "repoll.tasks.back";

/// Remembers where the list is (browser only), so a task page's "back" link returns to the
/// same tab, order, page and search. Without JavaScript, the browser's back button does it.
fn remember_list(query: Memo<leptos_router::params::ParamsMap>) {
    #[cfg(feature = "hydrate")]
    Effect::new(move |_| {
        let href = query.with(list_href);
        if let Some(Ok(Some(storage))) = web_sys::window().map(|w| w.session_storage()) {
            let _ = storage.set_item(BACK_KEY, &href);
        }
    });
    #[cfg(not(feature = "hydrate"))]
    let _ = (query, list_href);
}

#[component]
fn ListingView(listing: Listing, action: ServerAction<Act>) -> impl IntoView {
    let now = listing.now_ms;
    let searching = listing.search.is_some();
    let heading = match &listing.search {
        Some(s) => format!(
            "{} found for \u{201c}{s}\u{201d}",
            plural(listing.total, "task", "tasks")
        ),
        None => format!(
            "{} ({} first)",
            state_noun(&listing.state, listing.total),
            listing.order
        ),
    };
    let (state, order) = (listing.state.clone(), listing.order.clone());
    let up = listing.upstream.clone();
    // With several upstreams: which one's tasks these are, and the others one click away.
    let choose = (listing.upstreams.len() > 1).then(|| {
        let links = listing
            .upstreams
            .iter()
            .map(|u| {
                let here = (u == "default" && up.is_empty()) || *u == up;
                let href = tasks_href(&state, &order, None, u);
                let testid = format!("upstream-tab-{u}");
                view! {
                    " "
                    <a href=href class=if here { "tab active" } else { "tab" } aria-current=here.then_some("page") data-testid=testid>
                        {u.clone()}
                    </a>
                }
            })
            .collect_view();
        view! { <p class="row" data-testid="upstream-tabs">"Upstream:" {links}</p> }
    });
    let next = listing.next_cursor.as_deref().map(|c| {
        let href = tasks_href(&state, &order, Some(c), &up);
        view! { <A href=href attr:data-testid="next-page">"Next page →"</A> }
    });
    // Only past the first page: on the first page (or the only one) it would go nowhere.
    let first = (!searching && listing.paged).then(|| {
        view! { <A href=tasks_href(&state, &order, None, &up) attr:data-testid="first-page">"← First page"</A> }
    });
    // The other order, from its first page.
    let flip = (!searching && listing.total > 1).then(|| {
        let (other, label) = if order == "newest" {
            ("oldest", "Oldest first")
        } else {
            ("newest", "Newest first")
        };
        view! { <A href=tasks_href(&state, other, None, &up) attr:data-testid="order-toggle">{label}</A> }
    });
    let dead = if !searching && listing.state == "dead" {
        listing.total
    } else {
        0
    };
    let empty = listing.tasks.is_empty() && listing.results.is_empty();
    let empty_text = match &listing.search {
        Some(s) => format!("Nothing found for \u{201c}{s}\u{201d}."),
        None => empty_text(&listing.state).to_string(),
    };
    let current = (!searching).then(|| state.clone());
    // The same state, narrowed by error, query and age, for a retry / cancel / purge of many.
    // Bulk actions work on the default upstream's queue; only an admin can run them.
    // A search a bulk filter can express links to it with its filter: retry or purge what
    // was found, not only a whole state.
    let bulk_href = if searching {
        listing.bulk_href.clone()
    } else if state != "results" {
        Some(tasks_bulk_href(&state, &up))
    } else {
        None
    };
    let bulk = bulk_href.filter(|_| can_act()).map(|href| {
        // The bulk page counts every match again (a search shows at most 50).
        let label = if searching {
            "Bulk action on this search…"
        } else {
            "Bulk action by filter…"
        };
        view! { <A href=href attr:data-testid="bulk-link">{label}</A> }
    });
    view! {
        <div class="view">
        <PausedBanner paused=listing.paused now />
        {choose}
        <Tabs counts=Some(listing.counts) current order=order.clone() upstream=listing.upstream.clone() />
        <p class="row"><span data-testid="listing-total">{heading}</span><span>{flip}</span></p>
        // Optional parts each sit in their own element: bare empty placeholders next to each
        // other are what hydration is most likely to mis-assign.
        <div class="muted">{listing.note}</div>
        <div>{bulk}</div>
        <div>
            <ConfirmAction
                action
                op="retry_all_dead"
                label="Retry all dead"
                question=format!("Retry all {}?", plural(dead, "dead task", "dead tasks"))
                yes=format!("Retry {}", plural(dead, "task", "tasks"))
                count=dead
                here="/admin/tasks"
                state="dead"
                testid="retry-all-dead"
            />
        </div>
        {if empty {
            view! { <p class="empty" data-testid="empty-list">{empty_text}</p> }.into_any()
        } else {
            view! { <TaskTable tasks=listing.tasks results=listing.results now /> }.into_any()
        }}
        <p class="pager row"><span>{first}</span><span>{next}</span></p>
        </div>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_links_keep_tab_order_page_and_search() {
        let map = |pairs: &[(&'static str, &str)]| {
            let mut m = leptos_router::params::ParamsMap::new();
            for (k, v) in pairs {
                m.insert(*k, v.to_string());
            }
            m
        };
        assert_eq!(list_href(&map(&[])), "/admin/tasks");
        assert_eq!(
            list_href(&map(&[
                ("state", "dead"),
                ("order", "newest"),
                ("cursor", "17:ab")
            ])),
            "/admin/tasks?state=dead&order=newest&cursor=17%3Aab"
        );
        assert_eq!(
            list_href(&map(&[("state", "dead"), ("q", "a b&c")])),
            "/admin/tasks?q=a%20b%26c"
        );
        assert_eq!(list_href(&map(&[("state", "<x>")])), "/admin/tasks");
    }

    #[test]
    fn nouns_and_empty_lists() {
        assert_eq!(state_noun("dead", 1), "1 dead task");
        assert_eq!(state_noun("dead", 305), "305 dead tasks");
        assert_eq!(state_noun("results", 0), "0 stored results");
        assert_eq!(empty_text("dead"), "No dead tasks.");
    }
}
