//! The stored result on the task page: when it was made, how old it is, the windows of its
//! life (fresh until, stale until, stale-if-error until: the queue's `result_ttl_ms` and
//! `freshness` windows counted from its completion) and the refresh beside it, if one runs
//! (the task on the same page, its record marked `refresh`).

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

use super::task_story::{field, story_fields, tenant_words, text};
use super::ui::{duration, TimeAt};
use crate::pages::format::{pretty_json, progress_of_text};
use crate::pages::widgets::{JsonBlock, ProgressBar};
use model::{ResultStory, StoredResult, TaskState};

/// The windows of a stored result's life in its queue (ms), as configured
/// (`REPOLL_FRESH_FOR_MS`, `REPOLL_STALE_FOR_MS`, `REPOLL_STALE_IF_ERROR_FOR_MS`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResultWindows {
    pub fresh_ms: u64,
    pub stale_ms: u64,
    pub stale_if_error_ms: u64,
}

#[cfg(feature = "ssr")]
impl ResultWindows {
    /// The windows of `q`'s results.
    pub fn of(q: &queue::Queue) -> ResultWindows {
        let c = q.config();
        ResultWindows {
            fresh_ms: c.result_ttl_ms,
            stale_ms: c.freshness.stale_ms,
            stale_if_error_ms: c.freshness.stale_if_error_ms,
        }
    }
}

/// The ends of a result's windows (ms since the epoch), for a result completed at `done`.
fn window_ends(done: i64, w: ResultWindows) -> [i64; 3] {
    let add = |at: i64, ms: u64| at.saturating_add(i64::try_from(ms).unwrap_or(i64::MAX));
    let fresh = add(done, w.fresh_ms);
    let stale = add(fresh, w.stale_ms);
    [fresh, stale, add(stale, w.stale_if_error_ms)]
}

/// Where a result completed at `done` stands at `now`, in words: what an ask gets from it.
fn phase(done: i64, now: i64, w: ResultWindows) -> &'static str {
    let [fresh, stale, last] = window_ends(done, w);
    if now < fresh {
        "fresh: answered as it is"
    } else if now < stale {
        "stale: answered at once while a refresh runs"
    } else if now < last {
        "stale-if-error: answered only while its refresh cannot run"
    } else {
        "expired: no longer answered"
    }
}

/// The task beside the result (its refresh, when marked so), in words.
fn refresh_words((state, refresh): (TaskState, bool)) -> String {
    let what = if refresh { "a refresh" } else { "a task" };
    match state {
        TaskState::Leased => {
            format!("{what} runs now (the task above); its result replaces this one")
        }
        TaskState::Due => {
            format!("{what} waits its turn (the task above); its result replaces this one")
        }
        TaskState::Dead => {
            format!("{what} failed (the task above): this result is kept for stale-if-error")
        }
        TaskState::Done => format!("{what} is done"),
    }
}

/// The stored result: its times, age, windows, the refresh beside it, and its data.
#[component]
pub fn StoredResultView(
    result: StoredResult,
    windows: ResultWindows,
    /// The state of the task beside the result, and whether it is marked a refresh.
    task: Option<(TaskState, bool)>,
    /// What the result keeps of the task that made it (None: unreadable, never in practice).
    story: Option<ResultStory>,
    /// The upstream, when no task fields are shown above (a done task): then the result's
    /// fields start with its query, upstream and tenant.
    about: Option<String>,
    now: i64,
) -> impl IntoView {
    let r = result;
    let took = (r.completed_ms - r.created_ms).max(0);
    let age = (now - r.completed_ms).max(0);
    let [fresh_until, stale_until, last_until] = window_ends(r.completed_ms, windows);
    let at = move |t: i64| view! { <TimeAt now at=t /> };
    let refresh = task.map(refresh_words).unwrap_or_else(|| "none".into());
    let mut about_fields = Vec::new();
    if let Some(upstream) = about {
        about_fields.push(field(
            "query",
            view! { <crate::pages::reveal::QueryText text=r.query.clone() /> }.into_any(),
        ));
        about_fields.push(field("upstream", text(upstream)));
        let tenant = story.as_ref().map(|s| tenant_words(&s.tenant));
        about_fields.push(field("tenant", text(tenant.unwrap_or_default())));
    }
    let story_fields = story
        .as_ref()
        .map(|s| story_fields(s, r.polls, now))
        .unwrap_or_else(|| vec![field("polls", text(r.polls.to_string()))]);
    view! {
        <h2>"Final result"</h2>
        <dl class="fields" data-testid="result-fields">
            {about_fields}
            {field("completed", view! { <TimeAt now at=r.completed_ms past=true /> }.into_any())}
            {field("age", text(format!("{} · {}", duration(age), phase(r.completed_ms, now, windows))))}
            {field("fresh until", at(fresh_until).into_any())}
            {field("stale until", at(stale_until).into_any())}
            {field("stale-if-error until", at(last_until).into_any())}
            {field("refresh", text(refresh))}
            {field("created", view! { <TimeAt now at=r.created_ms past=true /> }.into_any())}
            {field("time to result", text(format!("{} from the enqueue", duration(took))))}
            {story_fields}
        </dl>
        {data_block(r.data, "task-result")}
    }
}

/// The data of a task or result: a progress bar when it says how far it is, then the JSON.
pub fn data_block(data: String, testid: &'static str) -> impl IntoView {
    let progress = progress_of_text(&data).map(|p| view! { <ProgressBar percent=p /> });
    view! {
        <div>{progress}</div>
        <JsonBlock pretty=pretty_json(&data) testid />
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_passes_through_its_windows() {
        let w = ResultWindows {
            fresh_ms: 1_000,
            stale_ms: 2_000,
            stale_if_error_ms: 4_000,
        };
        assert_eq!(window_ends(10, w), [1_010, 3_010, 7_010]);
        assert!(phase(10, 1_009, w).starts_with("fresh"));
        assert!(phase(10, 1_010, w).starts_with("stale:"));
        assert!(phase(10, 3_010, w).starts_with("stale-if-error"));
        assert!(phase(10, 7_010, w).starts_with("expired"));
        // Windows too long to add up stay at the end of time rather than wrapping.
        let huge = ResultWindows {
            fresh_ms: u64::MAX,
            ..w
        };
        assert_eq!(window_ends(10, huge)[2], i64::MAX);
    }

    #[test]
    fn the_refresh_beside_a_result_is_told() {
        assert!(refresh_words((TaskState::Leased, true)).starts_with("a refresh runs now"));
        assert!(refresh_words((TaskState::Due, true)).starts_with("a refresh waits"));
        assert!(refresh_words((TaskState::Dead, true)).contains("stale-if-error"));
        assert!(refresh_words((TaskState::Due, false)).starts_with("a task waits"));
    }
}
