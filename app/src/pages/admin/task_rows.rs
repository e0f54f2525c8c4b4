//! The rows of the task list (and of search hits): what one row shows of a task or a result.
//!
//! A row is a summary. The last error is shown as its class (a chip: "HTTP 503", "timeout")
//! and its message without the call that got it (`GET http://…: `, the same on every row of
//! an outage; the task page shows it). Its long texts — the query and that message — arrive cut to
//! [`ROW_TEXT_CHARS`] characters with "…" ([`rows_only`], run by the server function before
//! the page is rendered), and a cut text is followed by a link to the task page, which shows
//! it whole. Partial data and results are never in a row, so they are not sent with the page
//! either: a list page is sent twice (its HTML and the data it hydrates from), and 50 rows of
//! whole texts and megabyte partials would make it megabytes.

use leptos::prelude::*;
use leptos_router::components::A;

use super::selection::{PageCheck, RowCheck};
use super::ui::{or_dash, short, TimeAt};
use crate::pages::format::{cut, is_cut, ROW_TEXT_CHARS};
use model::{DeadReason, Priority, StoredResult, Task, TaskState};

/// The tasks and results of a page as their rows show them: query and last error cut to
/// [`ROW_TEXT_CHARS`] characters, no partial data, payload or result data.
#[cfg_attr(not(feature = "ssr"), allow(dead_code))]
pub fn rows_only(tasks: &mut [Task], results: &mut [StoredResult]) {
    for t in tasks {
        t.query = cut(&t.query, ROW_TEXT_CHARS);
        t.last_error = t
            .last_error
            .as_deref()
            .map(|e| cut(model::failure::without_call(e.trim()), ROW_TEXT_CHARS));
        t.partial = None;
        t.payload = String::new();
        // A row acts by id; its lease's fencing token is the task page's business.
        t.token = 0;
    }
    for r in results {
        r.query = cut(&r.query, ROW_TEXT_CHARS);
        r.data = String::new();
    }
}

/// After a cut text: a link to the task page, where the text is shown whole. (Callers wrap it
/// in an element of its own: an absent link is an empty placeholder, which hydration must not
/// confuse with a neighbour's.)
pub fn whole_on_task_page(text: &str, href: &str, what: &'static str) -> impl IntoView {
    is_cut(text).then(|| {
        view! {
            " "
            <A href=href.to_string() attr:class="more" attr:data-testid=format!("whole-{what}")>
                {format!("whole {what}")}
            </A>
        }
    })
}

/// The rows of a list: a table on a wide screen, one card per task on a phone (each cell
/// names its column through `data-label`). With `choose`, each task row starts with its
/// checkbox (`selection`).
#[component]
pub fn TaskTable(
    tasks: Vec<Task>,
    results: Vec<StoredResult>,
    now: i64,
    #[prop(optional)] choose: bool,
) -> impl IntoView {
    let page_ids: Vec<String> = tasks.iter().map(|t| t.id.to_string()).collect();
    view! {
        <table class="cards" data-testid="task-table">
            <thead>
                <tr>
                    {choose.then(|| view! { <PageCheck ids=page_ids /> })}
                    <th>"id"</th><th>"query"</th><th>"state"</th><th>"attempts"</th><th>"polls"</th>
                    <th>"when"</th><th>"worker"</th><th>"last error"</th>
                </tr>
            </thead>
            <tbody>
                {tasks
                    .into_iter()
                    .map(|t| {
                        let when = match t.state {
                            TaskState::Due => {
                                let at = t.due_ms.unwrap_or(0);
                                let word = if at <= now { "ready since " } else { "next poll " };
                                view! { {word} <TimeAt now at /> }.into_any()
                            }
                            TaskState::Leased => {
                                let at = t.lease_deadline_ms.unwrap_or(0);
                                let word = if at <= now { "lease expired " } else { "lease ends " };
                                view! { {word} <TimeAt now at /> }.into_any()
                            }
                            TaskState::Dead => {
                                let reason = format!(" ({})", or_dash(t.dead_reason.map(DeadReason::as_str).unwrap_or_default().to_string()));
                                view! { "died " <TimeAt now at=t.updated_ms past=true /> {reason} }.into_any()
                            }
                            _ => view! { <TimeAt now at=t.updated_ms past=true /> }.into_any(),
                        };
                        let state = match t.state {
                            TaskState::Due if t.due_ms.unwrap_or(0) <= now => "ready",
                            TaskState::Due if t.attempts > 0 => "retrying",
                            TaskState::Due => "waiting",
                            s => s.as_str(),
                        };
                        let state_class = format!("state state-{state}");
                        let (href, short_id) = (format!("/admin/tasks/{}", t.id), short(&t.id));
                        // The class from the message without its call: the same as from the
                        // whole error (the call only precedes what is classified). "other"
                        // says nothing the message does not.
                        let class = t
                            .last_error
                            .as_deref()
                            .map(|e| {
                                model::error_class::classify(
                                    Some(e),
                                    t.dead_reason.map(DeadReason::as_str),
                                )
                            })
                            .filter(|c| *c != model::error_class::ErrorClass::Other)
                            .map(model::error_class::ErrorClass::label);
                        let error = t.last_error.unwrap_or_default();
                        let more_query = whole_on_task_page(&t.query, &href, "query");
                        let more_error = whole_on_task_page(&error, &href, "error");
                        view! {
                            <tr data-testid="task-row" data-id=t.id.to_string()>
                                {choose.then(|| view! { <RowCheck id=t.id.to_string() /> })}
                                <td data-label="id"><A href=href><code>{short_id}</code></A></td>
                                <td data-label="query" class="query">
                                    <crate::pages::reveal::QueryText text=t.query />
                                    <span>{more_query}</span>
                                </td>
                                <td data-label="state">
                                    <span class=state_class>{state}</span>
                                    {(t.priority == Priority::Background).then(|| view! { " " <span class="badge" data-testid="badge-background" title="background priority: claimed after interactive work">"background"</span> })}
                                </td>
                                <td data-label="attempts">{format!("{} of {}", t.attempts, t.max_attempts)}</td>
                                <td data-label="polls">{t.polls}</td>
                                <td data-label="when">{when}</td>
                                <td data-label="worker">{or_dash(t.worker.unwrap_or_default())}</td>
                                <td data-label="last error" class="error-text">
                                    {class.map(|c| view! { <span class="chip">{c}</span> " " })}
                                    <span data-testid="row-error"><crate::pages::reveal::UpstreamText text=or_dash(error) /></span>
                                    <span>{more_error}</span>
                                </td>
                            </tr>
                        }
                    })
                    .collect_view()}
                {results
                    .into_iter()
                    .map(|r| {
                        let (href, short_id) = (format!("/admin/tasks/{}", r.id), short(&r.id));
                        let more_query = whole_on_task_page(&r.query, &href, "query");
                        view! {
                            <tr data-testid="task-row" data-id=r.id.to_string()>
                                {choose.then(|| view! { <td class="choose"></td> })}
                                <td data-label="id"><A href=href><code>{short_id}</code></A></td>
                                <td data-label="query" class="query">
                                    <crate::pages::reveal::QueryText text=r.query />
                                    <span>{more_query}</span>
                                </td>
                                <td data-label="state"><span class="state state-done">"done"</span></td>
                                <td data-label="attempts">"—"</td>
                                <td data-label="polls">{r.polls}</td>
                                <td data-label="when">"completed " <TimeAt now at=r.completed_ms past=true /></td>
                                <td data-label="worker">"—"</td>
                                <td data-label="last error">"—"</td>
                            </tr>
                        }
                    })
                    .collect_view()}
            </tbody>
        </table>
    }
}
