//! Acting on chosen rows of the task list (issue 29; Sidekiq, asynqmon and Oban Web have it):
//! a checkbox on each row, one for every row of the page, and a form that runs one of the
//! actions that apply to the list's state on the ticked tasks.
//!
//! The form is a plain HTML form (`ActionForm`): the checkboxes sit in the table rows and join
//! it through their `form` attribute, so without JavaScript the browser posts the ticked ids
//! (`ids[]`) itself. It posts to the bulk run's own server function (`bulk_act` with `chosen`):
//! ticked rows are a bulk run on a filter naming their ids — the same lock, limit, per-task
//! state checks and audit entry as a run by filter; there is no second implementation.
//! A destructive action (purge, cancel) needs the number of ticked rows typed; the server
//! checks it, and with JavaScript the browser holds the form until it matches, and the page
//! shows the live count of ticked rows. Without JavaScript, "tick every row on this page" is
//! a link (`select=page`) that renders the page with every box ticked.

use std::collections::BTreeSet;

use leptos::prelude::*;

use super::bulk_act::{destructive, BulkAct};

/// The selection form's id (the rows' checkboxes name it in their `form` attribute).
pub const FORM_ID: &str = "task-selection";

/// The ticked rows, kept across the live refreshes of the list.
#[derive(Clone, Copy)]
pub struct Chosen {
    ids: RwSignal<BTreeSet<String>>,
    /// The operator ticked or unticked something himself (a `select=page` link then no
    /// longer ticks every row on the next refresh).
    touched: RwSignal<bool>,
    /// Scripts run: the live count can be shown (the server's render, and the first render
    /// of the browser that hydrates it, say nothing of a count they cannot know).
    live: RwSignal<bool>,
}

/// The list's selection, for its rows and its form; cleared when a run starts.
pub fn provide_chosen(action: ServerAction<BulkAct>) -> Chosen {
    let c = Chosen {
        ids: RwSignal::new(BTreeSet::new()),
        touched: RwSignal::new(false),
        live: RwSignal::new(false),
    };
    // Effects run only in the browser.
    Effect::new(move |_| c.live.set(true));
    Effect::new(move |prev: Option<usize>| {
        let v = action.version().get();
        if prev.is_some_and(|p| p != v) && action.value().with(|r| matches!(r, Some(Ok(_)))) {
            c.ids.set(BTreeSet::new());
        }
        v
    });
    provide_context(c);
    c
}

impl Chosen {
    /// Keeps only the rows of `page` ticked; ticks them all when `all` (`select=page`) and
    /// the operator has not chosen himself.
    pub fn for_page(&self, page: &[String], all: bool) {
        let want: BTreeSet<String> = if all && !self.touched.get_untracked() {
            page.iter().cloned().collect()
        } else {
            self.ids
                .get_untracked()
                .into_iter()
                .filter(|id| page.contains(id))
                .collect()
        };
        if want != self.ids.get_untracked() {
            self.ids.set(want);
        }
    }
}

/// A row's checkbox (a cell of its own); nothing when the list offers no selection.
#[component]
pub fn RowCheck(id: String) -> impl IntoView {
    use_context::<Chosen>().map(|c| {
        let ticked = c.ids.with_untracked(|s| s.contains(&id));
        let (mine, flip) = (id.clone(), id.clone());
        let label = format!("choose task {}", super::ui::short(&id));
        view! {
            <td data-label="choose" class="choose">
                <input
                    type="checkbox"
                    name="ids[]"
                    value=id
                    form=FORM_ID
                    checked=ticked
                    prop:checked=move || c.ids.with(|s| s.contains(&mine))
                    on:change=move |ev| {
                        let on = event_target_checked(&ev);
                        c.touched.set(true);
                        c.ids.update(|s| {
                            if on {
                                s.insert(flip.clone());
                            } else {
                                s.remove(&flip);
                            }
                        });
                    }
                    aria-label=label
                    data-testid="row-select"
                />
            </td>
        }
    })
}

/// The header cell: one box for every row of the page (with JavaScript).
#[component]
pub fn PageCheck(ids: Vec<String>) -> impl IntoView {
    use_context::<Chosen>().map(|c| {
        let all = ids.clone();
        let every = move || !all.is_empty() && c.ids.with(|s| all.iter().all(|id| s.contains(id)));
        view! {
            <th class="choose">
                <input
                    type="checkbox"
                    prop:checked=every
                    on:change=move |ev| {
                        let on = event_target_checked(&ev);
                        c.touched.set(true);
                        c.ids.update(|s| {
                            for id in &ids {
                                if on {
                                    s.insert(id.clone());
                                } else {
                                    s.remove(id);
                                }
                            }
                        });
                    }
                    aria-label="choose every row on this page"
                    title="every row on this page"
                    data-testid="select-page"
                />
            </th>
        }
    })
}

/// The form acting on the ticked rows: the actions that apply to `state`, the typed count a
/// destructive one needs, and (with JavaScript) the live count. `tick_all` is this page with
/// every row ticked (the no-JavaScript way).
#[component]
pub fn SelectionForm(
    action: ServerAction<BulkAct>,
    state: String,
    upstream: String,
    actions: Vec<String>,
    tick_all: String,
) -> impl IntoView {
    let c = use_context::<Chosen>()?;
    let op = RwSignal::new(actions.first().cloned().unwrap_or_default());
    let count = move || c.ids.with(|s| s.len());
    let options = actions
        .iter()
        .map(|a| view! { <option value=a.clone()>{action_label(a)}</option> })
        .collect_view();
    let submit_text = move || {
        if c.live.get() {
            format!(
                "{} {} selected",
                action_label(&op.get()),
                super::ui::plural(count() as u64, "task", "tasks")
            )
        } else {
            "Apply to the ticked rows".to_string()
        }
    };
    let destroying = move || c.live.get() && destructive(&op.get());
    // A constant link (the list's own URL, encoded by us), never upstream text.
    let no_script = format!(
        r#"<a href="{}" data-testid="select-page-link">Tick every row on this page</a>"#,
        tick_all.replace('&', "&amp;").replace('"', "%22")
    );
    Some(view! {
        <ActionForm action attr:id=FORM_ID attr:class="selection-bar row" attr:data-testid="selection-form">
            <input type="hidden" name="chosen" value="rows" />
            <input type="hidden" name="filter[state]" value=state />
            <input type="hidden" name="filter[upstream]" value=upstream />
            <span data-testid="selection-count" aria-live="polite">
                {move || c.live.get().then(|| format!("{} ticked", count()))}
            </span>
            <label>
                "Action "
                <select name="op" data-testid="selection-op" on:change=move |ev| op.set(event_target_value(&ev))>
                    {options}
                </select>
            </label>
            <label class="typed-count">
                "To purge or cancel, type the number of ticked rows: "
                <input
                    type="text"
                    name="typed"
                    inputmode="numeric"
                    autocomplete="off"
                    size="6"
                    required=destroying
                    pattern=move || destroying().then(|| format!("^{}$", count()))
                    title="the number of ticked rows"
                    data-testid="selection-typed"
                />
            </label>
            <button
                type="submit"
                class=move || if destructive(&op.get()) { "danger" } else { "primary" }
                disabled=move || c.live.get() && count() == 0
                data-testid="selection-submit"
            >
                {submit_text}
            </button>
            <noscript inner_html=no_script />
        </ActionForm>
    })
}

/// An action's name on a button ("Retry", …).
fn action_label(op: &str) -> &'static str {
    match op {
        "retry" => "Retry",
        "cancel" => "Cancel",
        "purge" => "Purge",
        _ => "Apply to",
    }
}
