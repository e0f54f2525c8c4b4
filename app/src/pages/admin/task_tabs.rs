//! The task list's frame: its states and their tabs (with counts), the words for a state's
//! tasks, and the links to a page of a list or to the bulk page for a state.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

use super::ui::plural;
use crate::pages::format::encode_component;

/// The states a list can show, with their labels.
pub(super) const STATES: [(&str, &str); 5] = [
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
pub(super) fn state_noun(state: &str, n: u64) -> String {
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
pub(super) fn empty_text(state: &str) -> &'static str {
    match state {
        "ready" => "No ready tasks: nothing is waiting for a worker.",
        "waiting" => "No tasks are waiting for a later poll or a retry.",
        "leased" => "No leased tasks: no worker is polling right now.",
        "dead" => "No dead tasks.",
        "results" => "No stored results.",
        _ => "Nothing here.",
    }
}

/// The state tabs: a real tab strip, the current one marked `aria-current="page"`, each with
/// its count (dead and stuck in red when above 0). Each tab opens its state at its own order
/// and first page ([`default_order`]). A search has no current tab.
#[component]
pub(super) fn Tabs(
    counts: Option<TabCounts>,
    current: Option<String>,
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
                            href=tasks_href(name, "", None, &upstream)
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

/// The bulk page for one state of one upstream's tasks.
pub(super) fn tasks_bulk_href(state: &str, upstream: &str) -> String {
    let mut href = format!("/admin/bulk?state={state}");
    if !upstream.is_empty() && upstream != "default" {
        href.push_str("&upstream=");
        href.push_str(&encode_component(upstream));
    }
    href
}

/// The order a state's list opens in: the latest deaths and results first (after an outage
/// the newest failures are the ones to read), everything still waiting oldest first (the
/// next to be claimed).
pub(super) fn default_order(state: &str) -> &'static str {
    match state {
        "dead" | "results" => "newest",
        _ => "oldest",
    }
}

/// The link to a page of the task list. The state's own order ([`default_order`]) stays out
/// of the URL; a cursor only ever travels with the order it came from; a named upstream is
/// kept.
pub(super) fn tasks_href(state: &str, order: &str, cursor: Option<&str>, upstream: &str) -> String {
    let mut href = format!("/admin/tasks?state={state}");
    if !upstream.is_empty() && upstream != "default" {
        href.push_str("&upstream=");
        href.push_str(&encode_component(upstream));
    }
    if matches!(order, "oldest" | "newest") && order != default_order(state) {
        href.push_str("&order=");
        href.push_str(order);
    }
    if let Some(c) = cursor {
        href.push_str("&cursor=");
        href.push_str(&encode_component(c));
    }
    href
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nouns_and_empty_lists() {
        assert_eq!(state_noun("dead", 1), "1 dead task");
        assert_eq!(state_noun("dead", 305), "305 dead tasks");
        assert_eq!(state_noun("results", 0), "0 stored results");
        assert_eq!(empty_text("dead"), "No dead tasks.");
    }
}
