//! The triage panel beside the task list (issue 29; Oban Web's sidebar of counts): the list's
//! tasks counted by state, upstream, tenant and — for dead and retrying work — error class
//! (`model::error_class`). Each count is a link to the same search with that qualifier added
//! (`state:`, `tenant:`, `class:`; an upstream keeps the search), so a click narrows the list
//! to exactly the tasks counted.
//!
//! Bounded: the state and upstream counts are the queues' own counters; tenant and class are
//! tallied by one bulk-selection scan of at most `queue::FACET_SCAN_MAX` tasks, and past it
//! the panel says the counts are of the latest 10,000. The panel is its own request, re-read
//! when the list's search changes or an action ran — not on every live event.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

/// One count and the search it links to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FacetLink {
    /// Which facet ("state", "upstream", "tenant", "class").
    pub facet: String,
    /// The value as the filter takes it (a state, a name, a slug).
    pub key: String,
    pub label: String,
    pub count: u64,
    pub href: String,
}

/// The panel's counts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FacetsView {
    pub states: Vec<FacetLink>,
    pub upstreams: Vec<FacetLink>,
    pub tenants: Vec<FacetLink>,
    pub classes: Vec<FacetLink>,
    /// Tenant and class counts were made (the list is of one state).
    pub tallied: bool,
    /// Tasks looked at for them, and whether that was all.
    pub looked: u64,
    pub complete: bool,
}

/// `text` with its `key:` qualifier replaced by `key:value` (added when absent). Tokens are
/// split on spaces outside double quotes, kept as typed.
pub fn with_qualifier(text: &str, key: &str, value: &str) -> String {
    let mut tokens: Vec<String> = Vec::new();
    let (mut cur, mut quoted) = (String::new(), false);
    for c in text.chars() {
        if c == '"' {
            quoted = !quoted;
        }
        if c.is_whitespace() && !quoted {
            if !cur.is_empty() {
                tokens.push(std::mem::take(&mut cur));
            }
        } else {
            cur.push(c);
        }
    }
    if !cur.is_empty() {
        tokens.push(cur);
    }
    let prefix = format!("{key}:");
    tokens.retain(|t| !t.starts_with(&prefix));
    tokens.push(format!("{key}:{value}"));
    tokens.join(" ")
}

/// The task list searching `text` in `upstream` ("" or "default": the default one).
pub fn search_href(text: &str, upstream: &str) -> String {
    use crate::pages::format::encode_component as enc;
    let mut href = format!("/admin/tasks?q={}", enc(text));
    if !upstream.is_empty() && upstream != "default" {
        href.push_str(&format!("&upstream={}", enc(upstream)));
    }
    href
}

/// The panel for the list of `state` (a tab) or `search`, in `upstream`.
#[server(prefix = "/admin/fn")]
pub async fn task_facets(
    state: String,
    search: Option<String>,
    upstream: Option<String>,
) -> Result<FacetsView, ServerFnError> {
    use super::call::{admin_call, upstream_queue, AdminCall};
    use crate::auth::{refuse, Role};
    use http::StatusCode;
    let AdminCall { ctx, .. } = admin_call(Role::Viewer).await?;
    let upstream = super::search::chosen_upstream(search.as_deref(), upstream);
    let q = upstream_queue(&ctx, upstream.as_deref())?;
    let up = q.config().upstream.clone();
    let failed = |e: queue::QueueError| crate::auth::unreachable("task facets", e);
    // The search the counts narrow: as typed, or the tab's state.
    let text = match search.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        Some(s) if s.len() > 2048 => {
            return Err(refuse(StatusCode::BAD_REQUEST, "search text too long"))
        }
        Some(s) => s.to_string(),
        None if queue::BulkState::parse(&state).is_some() => format!("state:{state}"),
        None => return Ok(FacetsView::default()),
    };
    let parsed = super::search::parse(&text)
        .map_err(|e| refuse(StatusCode::BAD_REQUEST, &format!("search: {e}")))?;
    // Stored results are no task: nothing of theirs to count by state, tenant or class.
    if parsed.results {
        return Ok(FacetsView::default());
    }
    let of_state = |s: &model::Stats, state: Option<queue::BulkState>| match state {
        Some(queue::BulkState::Ready) => s.ready,
        Some(queue::BulkState::Waiting) => s.waiting + s.retrying,
        Some(queue::BulkState::Leased) => s.leased,
        Some(queue::BulkState::Dead) => s.dead,
        None => s.ready + s.waiting + s.retrying + s.leased + s.dead,
    };
    let stats = q.stats().await.map_err(failed)?;
    // A tab (a state and nothing more) is counted by the queue's own counters; a search that
    // narrows further counts what it finds in each state (bounded as its list is), so the
    // panel never says "dead 210" beside "26 found".
    let narrowed = !parsed.text.is_empty()
        || super::search::Search {
            state: None,
            upstream: None,
            ..parsed.clone()
        }
        .qualified();
    let mut states = Vec::with_capacity(queue::BulkState::ALL.len());
    for s in queue::BulkState::ALL {
        let count = match narrowed {
            true => {
                q.select_bounded(&parsed.filter(s), 0, queue::FACET_SCAN_MAX)
                    .await
                    .map_err(failed)?
                    .matched
            }
            false => of_state(&stats, Some(s)),
        };
        states.push(FacetLink {
            facet: "state".into(),
            key: s.as_str().into(),
            label: s.as_str().into(),
            count,
            href: search_href(&with_qualifier(&text, "state", s.as_str()), &up),
        });
    }
    let mut upstreams = Vec::new();
    let names = ctx.upstream_names();
    if names.len() > 1 {
        for name in names {
            let Ok((uq, _)) = ctx.upstream(Some(&name)) else {
                continue;
            };
            let s = uq.stats().await.map_err(failed)?;
            upstreams.push(FacetLink {
                facet: "upstream".into(),
                key: name.clone(),
                label: name.clone(),
                count: of_state(&s, parsed.state),
                // A search that names its upstream names this one instead.
                href: match parsed.upstream {
                    Some(_) => search_href(&with_qualifier(&text, "upstream", &name), &name),
                    None => search_href(&text, &name),
                },
            });
        }
    }
    let mut view = FacetsView {
        states,
        upstreams,
        ..FacetsView::default()
    };
    if let Some(state) = parsed.state {
        let f = q
            .facets(&parsed.filter(state), queue::FACET_SCAN_MAX)
            .await
            .map_err(failed)?;
        let link = |facet: &str, value: &str, c: queue::FacetCount| FacetLink {
            facet: facet.into(),
            href: search_href(&with_qualifier(&text, facet, value), &up),
            key: c.key,
            label: c.label,
            count: c.count,
        };
        view.tenants = f
            .tenants
            .into_iter()
            .map(|c| {
                let value = if c.key.is_empty() {
                    "none".to_string()
                } else {
                    c.key.clone()
                };
                link("tenant", &value, c)
            })
            .collect();
        view.classes = f
            .classes
            .into_iter()
            .map(|c| {
                let value = c.key.clone();
                link("class", &value, c)
            })
            .collect();
        view.tallied = true;
        view.looked = f.looked;
        view.complete = f.complete;
    }
    Ok(view)
}

/// The panel (nothing while it loads or when it failed: the list says why).
#[component]
pub fn FacetPanel(data: Resource<Result<FacetsView, ServerFnError>>) -> impl IntoView {
    view! {
        <aside class="facets" data-testid="facets" aria-label="Counts">
            <Transition fallback=|| ()>
                {move || data.get().and_then(|r| r.ok()).map(|v| view! { <FacetLists v /> })}
            </Transition>
        </aside>
    }
}

#[component]
fn FacetLists(v: FacetsView) -> impl IntoView {
    let note = (v.tallied && !v.complete).then(|| {
        format!(
            "Tenant and error counts are of the latest {} tasks ({}+ in all).",
            v.looked, v.looked
        )
    });
    let hint =
        (!v.tallied && !v.states.is_empty()).then_some("Add state: to count by tenant and error.");
    view! {
        <FacetList title="State" links=v.states />
        <FacetList title="Upstream" links=v.upstreams />
        <FacetList title="Tenant" links=v.tenants />
        <FacetList title="Error" links=v.classes />
        <p class="muted" data-testid="facets-note">{note}</p>
        <p class="muted">{hint}</p>
    }
}

#[component]
fn FacetList(title: &'static str, links: Vec<FacetLink>) -> impl IntoView {
    (!links.is_empty()).then(|| {
        let items = links
            .into_iter()
            .map(|l| {
                view! {
                    <li>
                        <a href=l.href data-testid="facet-link" data-facet=l.facet data-key=l.key>
                            {l.label}
                        </a>
                        " "
                        <span class="facet-count" data-testid="facet-count">{l.count}</span>
                    </li>
                }
            })
            .collect_view();
        view! {
            <section>
                <h2>{title}</h2>
                <ul>{items}</ul>
            </section>
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_facet_replaces_or_adds_its_qualifier() {
        assert_eq!(
            with_qualifier("state:dead", "tenant", "acme"),
            "state:dead tenant:acme"
        );
        assert_eq!(
            with_qualifier(r#"state:dead error:"HTTP 500" tenant:x"#, "tenant", "none"),
            r#"state:dead error:"HTTP 500" tenant:none"#
        );
        assert_eq!(
            with_qualifier("order-7 state:dead", "state", "waiting"),
            "order-7 state:waiting"
        );
        assert_eq!(
            search_href("state:dead class:http-503", "search"),
            "/admin/tasks?q=state%3Adead%20class%3Ahttp-503&upstream=search"
        );
    }
}
