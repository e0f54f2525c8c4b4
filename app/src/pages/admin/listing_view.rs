//! One page of the task list as shown: the upstream and state tabs, the heading and order,
//! the links to the bulk page and the selection form, the rows, and the pager.

use leptos::prelude::*;
use leptos_router::components::A;

use super::actions::Act;
use super::admin_op::AdminOp;
use super::bulk_act::BulkAct;
use super::confirm::ConfirmAction;
use super::listing::Listing;
use super::selection::{Chosen, SelectionForm};
use super::task_rows::TaskTable;
use super::task_tabs::{empty_text, state_noun, tasks_bulk_href, tasks_href, Tabs};
use super::ui::{can_act, plural, PausedBanner};
use crate::pages::format::encode_component;

/// What an ended bulk run did, in words: "done: 26 purged", with the tasks that had moved on
/// meanwhile (gone through, not changed) and a stop said.
pub(super) fn run_done_words(run: &model::BulkProgress) -> String {
    let did = match run.action.as_str() {
        "retry" => "retried",
        "cancel" => "cancelled",
        "purge" => "purged",
        other => other,
    };
    let mut words = match run.state.as_str() {
        "finished" => format!("done: {} {did}", run.changed),
        "stopped" => format!(
            "stopped: {} {did}, {} of {} gone through",
            run.changed, run.done, run.total
        ),
        other => format!("{other}: {} {did}", run.changed),
    };
    let moved_on = run.done.saturating_sub(run.changed);
    if moved_on > 0 {
        words.push_str(&format!(" ({moved_on} had moved on)"));
    }
    words
}

/// A search's own list link, in the upstream it looks at.
fn list_href_search(search: &str, upstream: &str) -> String {
    let mut href = format!("/admin/tasks?q={}", encode_component(search));
    if !upstream.is_empty() && upstream != "default" {
        href.push_str("&upstream=");
        href.push_str(&encode_component(upstream));
    }
    href
}

#[component]
pub(super) fn ListingView(
    listing: Listing,
    action: ServerAction<Act>,
    bulk_action: ServerAction<BulkAct>,
    /// `select=page`: every row of the page starts ticked (the no-JavaScript "tick all").
    tick_page: bool,
) -> impl IntoView {
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
        // Every task the list's filter matches, not only the rows of this page: the bulk
        // page counts them all again (a page or a search shows at most 50).
        let label = if searching {
            "Act on all matching this search…".to_string()
        } else {
            format!("Act on all {}…", state_noun(&state, listing.total))
        };
        view! { <A href=href attr:data-testid="bulk-link">{label}</A> }
    });
    // Ticked rows: when the list is of one state an action applies to, for an admin.
    let ticking = listing
        .bulk_state
        .clone()
        .filter(|_| can_act() && !listing.bulk_actions.is_empty() && !listing.tasks.is_empty());
    let page_ids: Vec<String> = listing.tasks.iter().map(|t| t.id.to_string()).collect();
    let selection = ticking.map(|bulk_state| {
        if let Some(c) = use_context::<Chosen>() {
            c.for_page(&page_ids, tick_page);
        }
        let tick_all = match &listing.search {
            Some(s) => format!("{}&select=page", list_href_search(s, &up)),
            None => format!(
                "{}&select=page",
                tasks_href(&state, &order, listing.cursor.as_deref(), &up)
            ),
        };
        view! {
            <SelectionForm
                action=bulk_action
                state=bulk_state
                upstream=up.clone()
                actions=listing.bulk_actions.clone()
                tick_all
            />
        }
    });
    let choosing = selection.is_some();
    // A run started from the ticked rows ("started: purge 26 tasks") says what it did once it
    // has ended: the list is read again on every live event while it runs.
    let last_run = listing.bulk_run.clone();
    let run_done = move || {
        let started = crate::pages::form_error::outcome(bulk_action)
            .and_then(Result::ok)
            .is_some_and(|m| m.starts_with("started: "));
        last_run
            .as_ref()
            .filter(|r| started && !r.running())
            .map(run_done_words)
    };
    // The dead tab leads to the dead work grouped by error.
    let groups = (!searching && state == "dead").then(|| {
        let href = match up.as_str() {
            "" | "default" => "/admin/dead".to_string(),
            u => format!("/admin/dead?upstream={}", encode_component(u)),
        };
        view! { <A href=href attr:data-testid="dead-work-link">"Dead work by error…"</A> }
    });
    view! {
        <div class="view">
        <PausedBanner paused=listing.paused now />
        {choose}
        <Tabs counts=Some(listing.counts) current upstream=listing.upstream.clone() />
        <p class="row"><span data-testid="listing-total">{heading}</span><span>{flip}</span></p>
        // Optional parts each sit in their own element: bare empty placeholders next to each
        // other are what hydration is most likely to mis-assign.
        <div class="muted">{listing.note}</div>
        <p class="row"><span>{bulk}</span><span>{groups}</span></p>
        <div>{selection}</div>
        <p class="action-result" data-testid="bulk-run-done" aria-live="polite">{run_done}</p>
        <div>
            <ConfirmAction
                action
                op=AdminOp::RetryAllDead
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
            view! { <TaskTable tasks=listing.tasks results=listing.results now choose=choosing /> }.into_any()
        }}
        <p class="pager row"><span>{first}</span><span>{next}</span></p>
        </div>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ended_run_says_what_it_did() {
        let run = |action: &str, state: &str, done, changed| model::BulkProgress {
            action: action.into(),
            state: state.into(),
            total: 30,
            done,
            changed,
            ..Default::default()
        };
        assert_eq!(
            run_done_words(&run("purge", "finished", 26, 26)),
            "done: 26 purged"
        );
        assert_eq!(
            run_done_words(&run("retry", "finished", 30, 28)),
            "done: 28 retried (2 had moved on)"
        );
        assert_eq!(
            run_done_words(&run("cancel", "stopped", 10, 10)),
            "stopped: 10 cancelled, 10 of 30 gone through"
        );
    }
}
