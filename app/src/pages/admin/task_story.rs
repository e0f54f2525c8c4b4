//! The parts of a task's story on its page that the queue sums up rather than lists (issue
//! 29): its polls ("6 polls, every ~8 s, first 6 min ago, last just now"), its last failed
//! call (HTTP status, duration, the start of the body: upstream text, shown as text), and what
//! the stored result keeps of the task that made it (query, upstream, tenant, the completing
//! claim). The words are plain text, re-rendered on each live tick, never a countdown.

use leptos::prelude::*;

use super::ui::or_dash;
use crate::pages::format::{ago, duration, plural};
use model::{FailedCall, PollSummary, ResultStory};

/// A task's polls in words: "6 polls, every ~8 s, first 6 min ago, last just now"; "1 poll,
/// 3 s ago"; "none" without a summary (no poll yet, or a record older than the summary: then
/// the bare count).
pub fn polls_words(summary: Option<&PollSummary>, count: u32, now: i64) -> String {
    let Some(p) = summary else {
        return if count == 0 {
            "none".into()
        } else {
            count.to_string()
        };
    };
    let n = plural(u64::from(p.count), "poll", "polls");
    match p.every_ms() {
        Some(every) => format!(
            "{n}, every ~{}, first {}, last {}",
            duration(every),
            ago(now, p.first_ms),
            ago(now, p.last_ms)
        ),
        None => format!("{n}, {}", ago(now, p.last_ms)),
    }
}

/// The tenant in words ("none" for the tasks of no tenant).
pub fn tenant_words(tenant: &str) -> String {
    if tenant.is_empty() {
        "none".into()
    } else {
        tenant.to_string()
    }
}

/// One field of a list (the task's and the result's: `field-<name>` test ids).
pub fn field(name: &'static str, value: AnyView) -> AnyView {
    view! {
        <dt>{name}</dt>
        <dd data-testid=format!("field-{name}")>{value}</dd>
    }
    .into_any()
}

pub fn text(s: impl Into<String>) -> AnyView {
    or_dash(s).into_any()
}

/// The last failed call's fields, beside the error message: its HTTP status, how long it
/// took, and the start of the body it answered (as text, in a block that keeps its lines;
/// admins only).
pub fn failed_call_fields(call: &FailedCall) -> Vec<AnyView> {
    let status = match call.http_status {
        Some(code) => code.to_string(),
        None => "none (no HTTP error answer)".into(),
    };
    // A viewer's page gets no body (`read_task` leaves it out): say so rather than "—".
    let body = if !super::ui::can_act() {
        view! { <span class="muted" data-testid="failed-body-admins-only">"shown to admins only"</span> }
            .into_any()
    } else if call.body.is_empty() {
        text("").into_any()
    } else {
        view! { <pre class="failed-body"><crate::pages::reveal::UpstreamText text=call.body.clone() /></pre> }.into_any()
    };
    vec![
        field("HTTP status", text(status)),
        field(
            "call took",
            text(duration(i64::try_from(call.took_ms).unwrap_or(i64::MAX))),
        ),
        field("response body", body),
    ]
}

/// What the stored result keeps of the task that made it: the claim that completed it, the
/// last call's latency, its polls (its tenant is shown with its query, `task_result`).
pub fn story_fields(story: &ResultStory, polls: u32, now: i64) -> Vec<AnyView> {
    let mut out = vec![field(
        "completed by",
        text(format!("{} token {}", story.worker, story.token)),
    )];
    if story.claimed_ms > 0 {
        out.push(field("claimed", text(ago(now, story.claimed_ms))));
    }
    out.push(field(
        "last call took",
        text(duration(
            i64::try_from(story.latency_ms).unwrap_or(i64::MAX),
        )),
    ));
    out.push(field(
        "polls",
        text(polls_words(story.polls.as_ref(), polls, now)),
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polls_are_told_in_words() {
        let now = 1_000_000;
        let six = PollSummary {
            count: 6,
            first_ms: now - 40_500,
            last_ms: now - 500,
        };
        assert_eq!(
            polls_words(Some(&six), 6, now),
            "6 polls, every ~8 s, first 40 s ago, last just now"
        );
        let one = PollSummary {
            count: 1,
            first_ms: now - 3_000,
            last_ms: now - 3_000,
        };
        assert_eq!(polls_words(Some(&one), 1, now), "1 poll, 3 s ago");
        assert_eq!(polls_words(None, 0, now), "none");
        assert_eq!(polls_words(None, 4, now), "4");
    }
}
