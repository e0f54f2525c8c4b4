//! The overview's queue-wide actions on the default upstream: pause / resume, the breaker
//! (open for a planned maintenance, close), retry all dead (asked with its count first) and
//! purge by state (the state's name typed to confirm), and signing out every session. Admins only: the overview renders this
//! panel only when `ui::can_act` says so.

use leptos::prelude::*;

use super::actions::{Act, ActButton, ActionResult};
use super::admin_op::AdminOp;
use super::confirm::ConfirmAction;
use super::overview_data::OverviewData;
use super::ui::plural;
use model::Stats;

/// The "Actions" panel under the overview's data.
#[component]
pub fn QueueActions(
    data: Resource<Result<OverviewData, ServerFnError>>,
    action: ServerAction<Act>,
) -> impl IntoView {
    let stats = move || {
        data.get()
            .and_then(Result::ok)
            .filter(|d| d.upstream.is_empty())
            .map(|d| (d.stats, d.breaker.is_some()))
    };
    view! {
        <section class="panel" id="queue-actions" data-testid="queue-actions">
            <h2>"Actions"</h2>
            <ActionResult action />
            // Re-rendered with the counts: only the action that applies (pause or resume),
            // "retry all" with its count. The purge forms below stay put, so a live update
            // never wipes what is being typed.
            <Transition fallback=|| view! { <p>"…"</p> }>
                {move || stats().map(|(s, breaker_open)| {
                    let dead = s.dead;
                    view! {
                        <div class="row">
                            {if s.paused {
                                view! { <ActButton action op=AdminOp::Resume label="Resume queue" testid="resume" /> }.into_any()
                            } else {
                                view! { <ActButton action op=AdminOp::Pause label="Pause queue" testid="pause" /> }.into_any()
                            }}
                            // For a planned upstream maintenance: claims stop; after 15 min a
                            // probe goes unless it was closed before.
                            {if breaker_open {
                                view! { <ActButton action op=AdminOp::CloseBreaker label="Close breaker" testid="close-breaker" /> }.into_any()
                            } else {
                                view! { <ActButton action op=AdminOp::OpenBreaker label="Open breaker (15 min)" testid="open-breaker" /> }.into_any()
                            }}
                            <ConfirmAction
                                action
                                op=AdminOp::RetryAllDead
                                label="Retry all dead"
                                question=format!("Retry all {}?", plural(dead, "dead task", "dead tasks"))
                                yes=format!("Retry {}", plural(dead, "task", "tasks"))
                                count=dead
                                here="/admin"
                                testid="retry-all-dead"
                            />
                        </div>
                    }
                })}
            </Transition>
            <h3>"Purge"</h3>
            <div class="table-scroll">
            <table class="purge">
                <tbody>
                    <PurgeRow action data target="dead" one="dead task" many="dead tasks" count=|s| Some(s.dead) />
                    <PurgeRow action data target="results" one="stored result" many="stored results" count=|s| Some(s.results) />
                    <PurgeRow
                        action
                        data
                        target="queued"
                        one="queued task (ready, waiting or retrying)"
                        many="queued tasks (ready, waiting, retrying)"
                        count=|s| Some(s.ready + s.waiting + s.retrying)
                    />
                    <PurgeRow action data target="history" one="" many="" count=|_| None />
                </tbody>
            </table>
            </div>
            <h3>"Sessions"</h3>
            <p class="muted">
                "Ends every signed-in session, admins' and viewers', yours included (you are given a new one): after a cookie may have leaked, or someone should no longer see the dashboard. Changing a password ends its sessions by itself."
            </p>
            <ConfirmAction
                action
                op=AdminOp::SignOutAll
                label="Sign out every session"
                question="Sign out every session? Everyone signed in must sign in again.".to_string()
                yes="Sign out everyone".to_string()
                count=1
                here="/admin"
                testid="sign-out-all"
            />
        </section>
    }
}

/// One purge target: says how many it removes and asks for the target's name to be typed.
/// The typed name is cleared once a purge has been done.
#[component]
fn PurgeRow(
    action: ServerAction<Act>,
    data: Resource<Result<OverviewData, ServerFnError>>,
    target: &'static str,
    one: &'static str,
    many: &'static str,
    /// How many it removes; None when it has no count (task histories).
    count: fn(&Stats) -> Option<u64>,
) -> impl IntoView {
    let typed = RwSignal::new(String::new());
    Effect::new(move |_| {
        if let Some(Ok(m)) = action.value().get() {
            if m.starts_with("purged") {
                typed.set(String::new());
            }
        }
    });
    let counted = count(&Stats::default()).is_some();
    let sentence = move || match counted {
        true => {
            let n = data
                .get()
                .and_then(Result::ok)
                .and_then(|d| count(&d.stats));
            let words = match n {
                Some(1) => format!(" {one}."),
                _ => format!(" {many}."),
            };
            view! {
                "Removes " <strong data-testid=format!("purge-count-{target}")>{n.map(|n| n.to_string()).unwrap_or_else(|| "…".into())}</strong>
                {words}
            }
            .into_any()
        }
        false => view! { "Removes the history of every task." }.into_any(),
    };
    view! {
        <tr>
            <td>
                <Transition fallback=|| "…">{sentence}</Transition>
            </td>
            <td>
                <ActionForm action=action attr:class="inline">
                    <input type="hidden" name="op" value="purge" />
                    <input type="hidden" name="id" value=target />
                    <label class="sr-only" for=format!("purge-confirm-{target}")>{format!("Type {target} to confirm")}</label>
                    <input
                        type="text"
                        name="confirm"
                        id=format!("purge-confirm-{target}")
                        autocomplete="off"
                        placeholder=format!("type {target} to confirm")
                        data-testid=format!("purge-confirm-{target}")
                        prop:value=move || typed.get()
                        on:input=move |ev| typed.set(event_target_value(&ev))
                    />
                    <button type="submit" class="danger" data-testid=format!("purge-{target}")>
                        {format!("Purge {target}")}
                    </button>
                </ActionForm>
            </td>
        </tr>
    }
}
