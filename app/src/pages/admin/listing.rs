//! One page of the task list, or search hits: what the list's server function
//! (`tasks::list_tasks`) and the search (`search::run`) answer and what `listing_view` shows.
//! Its own module, below all three, so the search and the view need not name the page that
//! uses them.

use serde::{Deserialize, Serialize};

use super::task_tabs::TabCounts;
use model::{PauseInfo, StoredResult, Task};

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
    /// The one state the listed tasks are in, when a bulk action can act on them (a tab, or a
    /// search with `state:`): the rows can then be ticked.
    #[serde(default)]
    pub bulk_state: Option<String>,
    /// The bulk actions that apply to `bulk_state` (`queue::BulkAction::applies_to`).
    #[serde(default)]
    pub bulk_actions: Vec<String>,
    /// The cursor this page started at.
    #[serde(default)]
    pub cursor: Option<String>,
    /// The upstream's last bulk run (so a run started from the ticked rows can say "done").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bulk_run: Option<model::BulkProgress>,
}
