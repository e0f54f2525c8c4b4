//! The task list: one state at a time with cursor pages, and search.
//!
//! Order is the queue's own: by due time (ready, waiting), lease deadline (leased), time of
//! death (dead) or completion (results); dead tasks and results newest first by default, the
//! rest oldest first (`task_tabs::default_order`), the other order by `order=`. Cursors are the queue's "score:id" cursors, stable while tasks come and
//! go; a cursor is only meaningful with the order it came from, so every link carries both.
//!
//! Search takes query text or an id. Query text is normalised and hashed exactly like the
//! queue does, so it finds the one task of that query in O(1). An id prefix (hex) is looked
//! up with a bounded `SCAN` over the task and result keys; on a big queue it may stop before
//! seeing every key and says so.
//!
//! The rows themselves, and what of a task they carry, are `task_rows`'; the tabs and links
//! `task_tabs`'; a page as shown `listing_view`'s; ticking rows to act on them `selection`'s.

use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use super::actions::{Act, ActionResult};
use super::bulk_act::BulkAct;
use super::confirm::provide_confirm;
use super::facets::{task_facets, FacetPanel};
use super::frame::{session, signed_in, signed_out, AdminFrame};
use super::listing_view::ListingView;
use super::live::provide_live;
use super::search_box::SearchBox;
use super::selection::provide_chosen;
#[cfg(feature = "ssr")]
use super::task_rows::rows_only;
pub use super::task_tabs::TabCounts;
use super::task_tabs::{tasks_href, Tabs, STATES};
use super::ui::error_text;
use crate::pages::format::encode_component;

// Named from here too: the answer of this page's public server function (`ListTasks`).
pub use super::listing::Listing;

/// Rows per page.
#[cfg_attr(not(feature = "ssr"), allow(dead_code))]
const PAGE: usize = 50;

/// The bulk state of a list or search state, and the actions that apply to it.
#[cfg(feature = "ssr")]
fn bulk_of(state: Option<queue::BulkState>) -> (Option<String>, Vec<String>) {
    match state {
        None => (None, Vec::new()),
        Some(s) => (
            Some(s.as_str().to_string()),
            queue::BulkAction::ALL
                .into_iter()
                .filter(|a| a.applies_to(s))
                .map(|a| a.as_str().to_string())
                .collect(),
        ),
    }
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
    use super::call::{admin_call, upstream_queue, AdminCall};
    use crate::auth::{refuse, Role};
    use http::StatusCode;
    let AdminCall { ctx, .. } = admin_call(Role::Viewer).await?;
    let upstream = super::search::chosen_upstream(search.as_deref(), upstream);
    let q = upstream_queue(&ctx, upstream.as_deref())?;
    let upstream = match q.config().upstream.as_str() {
        "" => String::new(),
        u => u.to_string(),
    };
    let upstreams = ctx.upstream_names();
    let failed = |e: queue::QueueError| crate::auth::unreachable("task list", e);
    let now_ms = q.now_ms().await.map_err(failed)?;
    let (stats, paused, bulk_run) = tokio::join!(q.stats(), q.pause_info(), q.bulk_progress());
    let stats = stats.map_err(failed)?;
    let paused = paused.map_err(failed)?;
    let bulk_run = bulk_run.map_err(failed)?;
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
        (hits.bulk_state, hits.bulk_actions) = bulk_of(parsed.state);
        hits.upstream = upstream;
        hits.upstreams = upstreams;
        hits.bulk_run = bulk_run;
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
    let order_name = match order.as_deref() {
        None | Some("") => super::task_tabs::default_order(&state),
        Some("oldest") => "oldest",
        Some("newest") => "newest",
        _ => return Err(refuse(StatusCode::BAD_REQUEST, "unknown order")),
    };
    let order = if order_name == "newest" {
        queue::Order::NewestFirst
    } else {
        queue::Order::OldestFirst
    };
    // A malformed cursor (edited URL) starts from the first page instead of failing.
    let cursor = cursor.filter(|c| queue::is_list_cursor(c));
    let paged = cursor.is_some();
    let (bulk_state, bulk_actions) = bulk_of(queue::BulkState::parse(&state));
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
        bulk_state,
        bulk_actions,
        cursor,
        bulk_run,
    })
}

/// `/admin/tasks?state=..&cursor=..&q=..`.
/// Whether the list's server function refused the request's search itself (its text, not a
/// passing failure): asking again with the same text is refused again.
fn refuses_the_search(e: &ServerFnError) -> bool {
    matches!(e, ServerFnError::ServerError(m) if m.starts_with("search"))
}

/// The refusal to answer at once for `search` when it is the one last refused.
fn refused_again(
    last: Option<&(Option<String>, ServerFnError)>,
    search: &Option<String>,
) -> Option<ServerFnError> {
    last.filter(|(text, _)| text == search)
        .map(|(_, e)| e.clone())
}

#[component]
pub fn TasksPage() -> impl IntoView {
    // Resources are created here, before the frame, so their order (which hydration
    // matches by) never depends on when the session check resolves.
    let live = provide_live();
    let me = session();
    let query = use_query_map();
    let action = ServerAction::<Act>::new();
    let bulk = ServerAction::<BulkAct>::new();
    provide_confirm(action);
    // A search the server refused is not asked again on every live event: the same text gets
    // the same refusal until it changes (it was re-requested every tick, a 400 each time).
    let refused = StoredValue::new(None::<(Option<String>, ServerFnError)>);
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
                action.version().get() + bulk.version().get(),
            )
        },
        move |(state, cursor, search, order, upstream, _, _)| async move {
            if let Some(e) = refused.with_value(|r| refused_again(r.as_ref(), &search)) {
                return Err(e);
            }
            if !signed_in(me).await {
                return signed_out();
            }
            let asked = search.clone();
            let out = list_tasks(state, cursor, search, order, upstream).await;
            let refusal = out.as_ref().err().filter(|e| refuses_the_search(e));
            refused.set_value(refusal.map(|e| (asked, e.clone())));
            out
        },
    );
    // The triage counts: re-read when the search changes or an action ran, not on every live
    // event (their tally looks at up to 10,000 tasks).
    let facets = Resource::new(
        move || {
            let m = query.get();
            (
                m.get("state").unwrap_or_default(),
                m.get("q"),
                m.get("upstream"),
                action.version().get() + bulk.version().get(),
            )
        },
        move |(state, search, upstream, _)| async move {
            if !signed_in(me).await {
                return signed_out();
            }
            task_facets(state, search, upstream).await
        },
    );
    view! {
        <AdminFrame me>
            <TasksBody data action bulk facets />
        </AdminFrame>
    }
}

#[component]
fn TasksBody(
    data: Resource<Result<Listing, ServerFnError>>,
    action: ServerAction<Act>,
    bulk: ServerAction<BulkAct>,
    facets: Resource<Result<super::facets::FacetsView, ServerFnError>>,
) -> impl IntoView {
    let query = use_query_map();
    remember_list(query);
    provide_chosen(bulk);
    let tick_page = move || query.with(|q| q.get_str("select") == Some("page"));
    let bulk_result =
        move || crate::pages::form_error::outcome(bulk).map(|r| r.unwrap_or_else(|e| e));
    view! {
        <section class="panel">
            <h1>"Tasks"</h1>
            <form method="get" action="/admin/tasks" class="search" role="search" data-testid="search-form">
                <label for="task-search">"Search tasks"</label>
                <SearchBox query />
                // A search stays in the upstream being looked at.
                {move || {
                    query.get().get("upstream").filter(|u| !u.is_empty()).map(|u| {
                        view! { <input type="hidden" name="upstream" value=u /> }
                    })
                }}
                <button type="submit" data-testid="search-submit">"Search"</button>
                <p id="search-help" class="hint">
                    "Qualifiers: " <code>"state:dead"</code> " (waiting, ready, leased, results), "
                    <code>"error:\"HTTP 500\""</code> ", " <code>"query:order-"</code> ", "
                    <code>"after:2h"</code> " (changed within; s, m, h, d), "
                    <code>"tenant:acme"</code> " (or " <code>"tenant:none"</code> "), "
                    <code>"upstream:search"</code> ". Suggestions follow as you type (↓ shows them). Other words: an exact "
                    "query or id first, else part of the query text of tasks and of stored results. "
                    "Looks at up to 20,000 tasks of each state and the newest 5,000 results."
                </p>
            </form>
            <ActionResult action />
            <p class="action-result" data-testid="selection-result" aria-live="polite">{bulk_result}</p>
            <div class="tasks-layout">
            <div class="data">
                <Transition fallback=|| view! { <p>"Reading…"</p> }>
                {move || data.get().map(|r| match r {
                        Ok(l) => view! { <ListingView listing=l action bulk_action=bulk tick_page=tick_page() /> }.into_any(),
                        Err(e) => view! {
                            <div class="view">
                                <Tabs counts=None current=None upstream=String::new() />
                                <p class="err" data-testid="tasks-error">{error_text(&e)}</p>
                            </div>
                        }.into_any(),
                    })}
            </Transition>
            </div>
            <FacetPanel data=facets />
            </div>
        </section>
    }
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
                ("order", "oldest"),
                ("cursor", "17:ab")
            ])),
            "/admin/tasks?state=dead&order=oldest&cursor=17%3Aab"
        );
        // A state's own order stays out of the link: dead and results newest first, the
        // waiting states oldest first.
        assert_eq!(
            list_href(&map(&[("state", "dead"), ("order", "newest")])),
            "/admin/tasks?state=dead"
        );
        assert_eq!(
            list_href(&map(&[("state", "ready"), ("order", "newest")])),
            "/admin/tasks?state=ready&order=newest"
        );
        assert_eq!(
            list_href(&map(&[("state", "dead"), ("q", "a b&c")])),
            "/admin/tasks?q=a%20b%26c"
        );
        assert_eq!(list_href(&map(&[("state", "<x>")])), "/admin/tasks");
    }

    #[test]
    fn a_refused_search_is_answered_again_only_for_the_same_text() {
        let refusal = ServerFnError::ServerError("search: unknown field `colour`".into());
        assert!(refuses_the_search(&refusal));
        assert!(!refuses_the_search(&ServerFnError::ServerError(
            "the task list is unavailable (Redis)".into()
        )));
        let last = (Some("colour:red".to_string()), refusal);
        let again = refused_again(Some(&last), &Some("colour:red".into()));
        assert!(matches!(again, Some(ServerFnError::ServerError(m)) if m.starts_with("search:")));
        assert!(refused_again(Some(&last), &Some("colour:re".into())).is_none());
        assert!(refused_again(None, &Some("colour:red".into())).is_none());
    }
}
