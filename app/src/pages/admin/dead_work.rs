//! `/admin/dead`: the dead work grouped by error (issue 29) — the class and the normalised
//! message (`model::error_class::group_of`: without the call, numbers as `#`), each group with
//! its count and when its first and last task died, and links that act on that group only:
//! its tasks in the list (`group:` search), and "retry / purge this group" on the bulk page
//! with the group's filter carried (the bulk page counts it again, and a purge asks for that
//! count typed). Bounded like the facets: the first `queue::FACET_SCAN_MAX` dead tasks.

use leptos::prelude::*;
use leptos_router::hooks::use_query_map;
use serde::{Deserialize, Serialize};

use super::frame::{session, signed_in, signed_out, AdminFrame};
use super::live::provide_live;
use super::ui::{can_act, error_text, plural};
use crate::pages::widgets::TimeAt;

/// One group as the page shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupView {
    pub key: String,
    pub class: String,
    pub message: String,
    pub count: u64,
    pub first_ms: i64,
    pub last_ms: i64,
    /// The group's tasks in the list.
    pub list_href: String,
    /// The bulk page with the group's filter.
    pub bulk_href: String,
}

/// The page's data.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadWorkView {
    pub groups: Vec<GroupView>,
    pub more_groups: u64,
    pub matched: u64,
    pub looked: u64,
    pub complete: bool,
    pub now_ms: i64,
}

/// The dead tasks of `upstream` grouped by error.
#[server(prefix = "/admin/fn")]
pub async fn dead_work(upstream: Option<String>) -> Result<DeadWorkView, ServerFnError> {
    use super::call::{admin_call, upstream_queue, AdminCall};
    use crate::auth::Role;
    use crate::pages::format::encode_component as enc;
    let AdminCall { ctx, .. } = admin_call(Role::Viewer).await?;
    let q = upstream_queue(&ctx, upstream.as_deref())?;
    let up = q.config().upstream.clone();
    let failed = |e: queue::QueueError| crate::auth::unreachable("dead work", e);
    let every_dead = queue::BulkFilter::default();
    let (g, now_ms) = tokio::join!(
        q.dead_groups(&every_dead, queue::FACET_SCAN_MAX),
        q.now_ms()
    );
    let g = g.map_err(failed)?;
    let up_param = match up.as_str() {
        "" | queue::DEFAULT_UPSTREAM => String::new(),
        u => format!("&upstream={}", enc(u)),
    };
    Ok(DeadWorkView {
        groups: g
            .groups
            .into_iter()
            .map(|d| GroupView {
                list_href: super::facets::search_href(&format!("state:dead group:{}", d.key), &up),
                bulk_href: format!("/admin/bulk?state=dead&group={}{up_param}", d.key),
                key: d.key,
                class: d.class_label,
                message: d.message,
                count: d.count,
                first_ms: d.first_ms,
                last_ms: d.last_ms,
            })
            .collect(),
        more_groups: g.more_groups,
        matched: g.matched,
        looked: g.looked,
        complete: g.complete,
        now_ms: now_ms.map_err(failed)?,
    })
}

/// `/admin/dead?upstream=..`.
#[component]
pub fn DeadWorkPage() -> impl IntoView {
    let live = provide_live();
    let me = session();
    let query = use_query_map();
    let data = Resource::new(
        move || (query.with(|m| m.get("upstream")), live.tick.get()),
        move |(upstream, _)| async move {
            if !signed_in(me).await {
                return signed_out();
            }
            dead_work(upstream).await
        },
    );
    view! {
        <AdminFrame me>
            <section class="panel">
                <h1>"Dead work by error"</h1>
                <p class="muted">
                    "Dead tasks grouped by the class of their last error and its message (numbers shown as #). "
                    "A group's actions open the bulk page with that group's filter: it counts the tasks again before anything is done."
                </p>
                <div class="data">
                    <Transition fallback=|| view! { <p>"Reading…"</p> }>
                        {move || data.get().map(|r| match r {
                            Ok(d) => view! { <Groups d /> }.into_any(),
                            Err(e) => view! { <p class="err" data-testid="dead-work-error">{error_text(&e)}</p> }.into_any(),
                        })}
                    </Transition>
                </div>
            </section>
        </AdminFrame>
    }
}

#[component]
fn Groups(d: DeadWorkView) -> impl IntoView {
    if d.groups.is_empty() {
        return view! { <p class="empty" data-testid="dead-work-empty">"No dead tasks."</p> }
            .into_any();
    }
    let now = d.now_ms;
    let scope = if d.complete {
        format!(
            "{} in {}",
            plural(d.matched, "dead task", "dead tasks"),
            plural(d.groups.len() as u64 + d.more_groups, "group", "groups")
        )
    } else {
        format!("the latest {} dead tasks ({}+ in all)", d.looked, d.looked)
    };
    let more =
        (d.more_groups > 0).then(|| format!("{} smaller groups are not shown.", d.more_groups));
    let act = can_act();
    let rows = d
        .groups
        .into_iter()
        .map(|g| {
            let actions = act.then(|| {
                view! {
                    " "
                    <a href=g.bulk_href.clone() data-testid="group-retry">"Retry this group…"</a>
                    " "
                    <a href=format!("{}#purge", g.bulk_href) data-testid="group-purge">"Purge this group…"</a>
                }
            });
            view! {
                <tr data-testid="dead-group" data-key=g.key.clone() data-count=g.count.to_string()>
                    <td data-label="error">{g.class}</td>
                    <td data-label="message" class="message error-text"><crate::pages::reveal::UpstreamText text=g.message /></td>
                    <td data-label="tasks">
                        <a href=g.list_href data-testid="group-count">{g.count}</a>
                    </td>
                    <td data-label="first died"><TimeAt now at=g.first_ms past=true /></td>
                    <td data-label="last died"><TimeAt now at=g.last_ms past=true /></td>
                    <td data-label="act">{actions}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <div class="view">
            <p data-testid="dead-work-scope">{scope}</p>
            <table class="cards dead-groups" data-testid="dead-groups">
                <thead>
                    <tr>
                        <th>"error"</th><th>"message"</th><th>"tasks"</th><th>"first died"</th>
                        <th>"last died"</th><th>""</th>
                    </tr>
                </thead>
                <tbody>{rows}</tbody>
            </table>
            <p class="muted">{more}</p>
        </div>
    }
    .into_any()
}
