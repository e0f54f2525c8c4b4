//! Many-task actions confirmed with their count first ("Retry all 305 dead tasks?"): the
//! question's state per page and the button that asks it. Above `actions` (it posts [`Act`])
//! and `ui`, so those two stay free of each other.

use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use super::actions::Act;
use super::admin_op::AdminOp;
use super::ui::can_act;

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
    op: AdminOp,
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
    let op = op.name();
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
