//! Small formatting helpers and widgets shared by the admin pages. Times are shown relative
//! to the server's clock (`now_ms` of the data), so the server render and the hydrated page
//! agree; the words themselves come from [`crate::pages::format`].

use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

pub use crate::pages::format::{duration, plural};
pub use crate::pages::widgets::TimeAt;

use super::actions::Act;
use super::frame::can_act;
use model::PauseInfo;

/// The message of a server-function error, without the framework's prefix.
pub fn error_text(e: &ServerFnError) -> String {
    match e {
        ServerFnError::ServerError(m) => m.clone(),
        _ => "request failed".into(),
    }
}

/// `s`, or "—" when empty. Every text the admin pages render goes through this or is never
/// empty: an empty text node does not survive the HTML round trip, and hydration then finds
/// something else where it expects text.
pub fn or_dash(s: impl Into<String>) -> String {
    let s = s.into();
    if s.is_empty() {
        "—".into()
    } else {
        s
    }
}

/// The first 12 characters of an id, enough to tell tasks apart in a table.
pub fn short(id: &str) -> String {
    id.chars().take(12).collect()
}

/// The banner every dashboard page shows while the queue is paused.
#[component]
pub fn PausedBanner(paused: Option<PauseInfo>, now: i64) -> impl IntoView {
    paused.map(|p| {
        let by = if p.who.is_empty() {
            String::new()
        } else {
            format!(" by {}", p.who)
        };
        let rest = format!("{by}. Workers claim nothing until it is resumed; queries wait.");
        let since = if p.at_ms > 0 {
            view! { <TimeAt now at=p.at_ms past=true /> }.into_any()
        } else {
            view! { <span>"a while ago"</span> }.into_any()
        };
        view! {
            <div class="banner paused" role="status" data-testid="paused-banner">
                <strong>"Queue paused"</strong>
                <span>{since} {rest}</span>
                {can_act().then(|| view! { <a href="/admin#queue-actions">"Resume on the overview"</a> })}
            </div>
        }
    })
}

/// Which many-task action is asking its question right now. Lives with the page, not with
/// the data view (which live updates rebuild), so a question stays open while counts change;
/// it closes once the page's action has answered.
#[derive(Clone, Copy)]
pub struct Confirming(pub RwSignal<Option<&'static str>>);

/// Provides the page's [`Confirming`]; called by pages with many-task actions.
pub fn provide_confirm(action: ServerAction<Act>) {
    let open = RwSignal::new(None);
    Effect::new(move |prev: Option<usize>| {
        let v = action.version().get();
        if prev.is_some_and(|p| p != v) {
            open.set(None);
        }
        v
    });
    provide_context(Confirming(open));
}

/// An action on many tasks, confirmed with its count first ("Retry all 305 dead tasks?").
///
/// With JavaScript the button opens the question in place; without it the button is a GET
/// form that loads the same page with `?confirm=<op>`, which the server renders with the
/// question and its form. Nothing is shown when there is nothing to act on, nor to a viewer.
#[component]
pub fn ConfirmAction(
    action: ServerAction<Act>,
    op: &'static str,
    /// The button that asks ("Retry all dead").
    label: &'static str,
    /// The question, with the count in it.
    question: String,
    /// The button that does it ("Retry 305").
    yes: String,
    count: u64,
    /// Where the no-JS form loads the question: this page's path...
    here: &'static str,
    /// ...and its `state` (a GET form replaces the query of its `action`, so it is a field).
    #[prop(optional)]
    state: Option<&'static str>,
    testid: &'static str,
) -> impl IntoView {
    let query = use_query_map();
    let open = use_context::<Confirming>()
        .map(|c| c.0)
        .unwrap_or_else(|| RwSignal::new(None));
    let asked = move || open.get() == Some(op) || query.with(|q| q.get_str("confirm") == Some(op));
    let back = match state {
        Some(s) => format!("{here}?state={s}"),
        None => here.to_string(),
    };
    let back = StoredValue::new(back);
    let question = StoredValue::new(question);
    let yes = StoredValue::new(yes);
    (count > 0 && can_act()).then(|| {
        view! {
            <div class="confirm-action">
                <form method="get" action=here class="inline">
                    {state.map(|s| view! { <input type="hidden" name="state" value=s /> })}
                    <input type="hidden" name="confirm" value=op />
                    <button
                        type="submit"
                        data-testid=testid
                        on:click=move |ev| {
                            ev.prevent_default();
                            open.set(Some(op));
                        }
                    >
                        {label}
                    </button>
                </form>
                <div>
                    {move || {
                        asked()
                            .then(|| {
                                view! {
                                    <div class="confirm" role="alertdialog" data-testid=format!("{testid}-confirm")>
                                        <p>
                                            <strong data-testid=format!("{testid}-question")>{question.get_value()}</strong>
                                        </p>
                                        <ActionForm action attr:class="inline">
                                            <input type="hidden" name="op" value=op />
                                            <button type="submit" class="danger" data-testid=format!("{testid}-yes")>
                                                {yes.get_value()}
                                            </button>
                                        </ActionForm>
                                        " "
                                        <a
                                            href=back.get_value()
                                            data-testid=format!("{testid}-cancel")
                                            on:click=move |ev| {
                                                // Opened by the no-JS link: the router drops
                                                // `confirm` from the URL; opened in place: close.
                                                if query.with(|q| q.get_str("confirm").is_none()) {
                                                    ev.prevent_default();
                                                }
                                                open.set(None);
                                            }
                                        >
                                            "Cancel"
                                        </a>
                                    </div>
                                }
                            })
                    }}
                </div>
            </div>
        }
    })
}
