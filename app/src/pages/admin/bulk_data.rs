//! The bulk page's form and a run's progress as the page shows it: the data the page
//! (`bulk`), the server function that starts and stops runs (`bulk_act`) and the form's server
//! side (`bulk_filter`) all exchange. Its own module, below the three, so none of them names
//! the page for a type.

use serde::{Deserialize, Serialize};

/// The filter as the page's form sends it (all text, as typed).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FilterForm {
    pub state: String,
    pub error: String,
    pub query: String,
    /// Hours back from now ("" = any time).
    pub hours: String,
    /// "updated" (last state change) or "created".
    pub field: String,
    /// Exactly this tenant ("" = any, "none" = tasks of no tenant).
    pub tenant: String,
    /// The upstream whose queue this acts on ("" = the default one).
    pub upstream: String,
    /// The last error's class (`class:` of a search, a facet or the dead work view).
    pub class: String,
    /// The last error's group (the dead work view's "retry / purge this group").
    pub group: String,
}

impl FilterForm {
    pub(super) fn from_query(m: &leptos_router::params::ParamsMap) -> FilterForm {
        let get = |k: &str| m.get(k).unwrap_or_default();
        FilterForm {
            state: get("state"),
            error: get("error"),
            query: get("query"),
            hours: get("hours"),
            field: get("field"),
            tenant: get("tenant"),
            upstream: get("upstream"),
            class: get("class"),
            group: get("group"),
        }
    }
}
