//! One task in full: every field, the latest partial, the final result, and its whole
//! history (claims with worker and token, upstream answers, reschedules, errors, lease
//! expiries, admin actions with who did them) — plus the actions that apply to it.

use leptos::prelude::*;
use leptos_router::hooks::use_params_map;
use serde::{Deserialize, Serialize};

use super::actions::{Act, ActButton, ActionResult};
use super::admin_op::AdminOp;
use super::frame::{session, signed_in, signed_out, AdminFrame};
use super::live::provide_live;
use super::task_result::{data_block, ResultWindows, StoredResultView};
use super::task_story::{failed_call_fields, field, polls_words, tenant_words, text};
use super::task_trace::{trace_view, TraceRef};
use super::ui::{duration, error_text, or_dash, plural, PausedBanner, TimeAt};
use crate::pages::format::{detail_pieces, iso, utc, Piece};
use model::{
    DeadReason, FailedCall, HistoryEntry, PauseInfo, PollSummary, ResultStory, StoredResult, Task,
    TaskState,
};

/// Everything known about one id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskView {
    pub id: model::TaskId,
    /// The upstream whose queue holds it (`default` unless the deployment names several).
    pub upstream: String,
    pub task: Option<Task>,
    pub result: Option<StoredResult>,
    /// Newest first.
    pub history: Vec<HistoryEntry>,
    /// The live task's polls summed up.
    pub polls: Option<PollSummary>,
    /// The live task's last failed call (beside `task.last_error`); its body only for an
    /// admin (empty for a viewer).
    pub last_call: Option<FailedCall>,
    /// What the stored result keeps of the task that made it.
    pub result_story: Option<ResultStory>,
    pub now_ms: i64,
    /// The queue's pause, if paused.
    pub paused: Option<PauseInfo>,
    /// The windows of its queue's results (fresh, stale, stale-if-error).
    pub windows: ResultWindows,
    /// The live task's traces (none while tracing is off).
    pub traces: Vec<TraceRef>,
}

/// The task, result and history of `id`; None when nothing is known about it.
#[server(prefix = "/admin/fn")]
pub async fn read_task(id: String) -> Result<Option<TaskView>, ServerFnError> {
    use super::call::{admin_call, AdminCall};
    use crate::auth::{refuse, Role};
    use http::StatusCode;
    let AdminCall { session, ctx } = admin_call(Role::Viewer).await?;
    let id: queue::TaskId = id
        .parse()
        .map_err(|_| refuse(StatusCode::BAD_REQUEST, "bad task id"))?;
    let failed = |e: queue::QueueError| crate::auth::unreachable("task read", e);
    let now_ms = ctx.queue.now_ms().await.map_err(failed)?;
    let Some((upstream, q, d)) = ctx.find_task(&id).await.map_err(failed)? else {
        return Ok(None);
    };
    let paused = q.pause_info().await.map_err(failed)?;
    // The upstream's answer body is for admins only (README): a viewer's page never gets it,
    // not even in the data the page hydrates from.
    let mut last_call = d.last_call;
    if session.role != Role::Admin {
        if let Some(call) = last_call.as_mut() {
            call.body.clear();
        }
    }
    let traces = d
        .task
        .as_ref()
        .map(|t| super::task_trace::trace_refs(&t.trace, ctx.trace_url.as_deref()))
        .unwrap_or_default();
    Ok(Some(TaskView {
        id,
        upstream: upstream.to_string(),
        task: d.task,
        result: d.result,
        history: d.history,
        polls: d.polls,
        last_call,
        result_story: d.result_story,
        now_ms,
        paused,
        windows: ResultWindows::of(q),
        traces,
    }))
}

/// `/admin/tasks/:id`.
#[component]
pub fn TaskPage() -> impl IntoView {
    // Resources are created here, before the frame, so their order (which hydration
    // matches by) never depends on when the session check resolves.
    let live = provide_live();
    let me = session();
    let params = use_params_map();
    let action = ServerAction::<Act>::new();
    let data = Resource::new(
        move || {
            (
                params.get().get("id").unwrap_or_default(),
                live.tick.get(),
                action.version().get(),
            )
        },
        move |(id, _, _)| async move {
            if !signed_in(me).await {
                return signed_out();
            }
            read_task(id).await
        },
    );
    view! {
        <AdminFrame me>
            <TaskBody data action />
        </AdminFrame>
    }
}

#[component]
fn TaskBody(
    data: Resource<Result<Option<TaskView>, ServerFnError>>,
    action: ServerAction<Act>,
) -> impl IntoView {
    // Back to the list as it was left (tab, order, page, search), remembered by the list in
    // the browser; the plain list without JavaScript.
    let back = RwSignal::new("/admin/tasks".to_string());
    #[cfg(feature = "hydrate")]
    Effect::new(move |_| {
        let stored = web_sys::window()
            .and_then(|w| w.session_storage().ok().flatten())
            .and_then(|s| s.get_item(super::tasks::BACK_KEY).ok().flatten());
        if let Some(href) = stored.filter(|h| h.starts_with("/admin/tasks")) {
            back.set(href);
        }
    });
    view! {
        <section class="panel">
            <p class="back"><a href=move || back.get() data-testid="back-to-list">"← Task list"</a></p>
            <ActionResult action />
            <div class="data">
                <Transition fallback=|| view! { <p>"Reading…"</p> }>
                {move || data.get().map(|r| match r {
                        Ok(Some(v)) => view! { <TaskDetailView view=v action /> }.into_any(),
                        Ok(None) => view! {
                            <div class="view">
                                <h1 data-testid="task-heading">"Unknown task"</h1>
                                <p data-testid="task-missing">"Nothing is known about this id (finished and expired, purged, or never seen)."</p>
                            </div>
                        }.into_any(),
                        Err(e) => view! { <p class="err" data-testid="task-error">{error_text(&e)}</p> }.into_any(),
                    })}
            </Transition>
            </div>
        </section>
    }
}

/// What a task is now, in words: the page's heading and the state field.
fn state_words(view: &TaskView) -> (&'static str, &'static str) {
    match (&view.task, &view.result) {
        (Some(t), _) => match t.state {
            TaskState::Dead => ("Dead task", "dead"),
            TaskState::Leased => ("Running task", "leased"),
            TaskState::Due if t.due_ms.unwrap_or(0) <= view.now_ms => ("Ready task", "ready"),
            TaskState::Due if t.attempts > 0 => ("Retrying task", "retrying"),
            TaskState::Due => ("Waiting task", "waiting"),
            _ => ("Task", "unknown"),
        },
        (None, Some(_)) => ("Done", "done"),
        (None, None) => ("Finished task", "gone"),
    }
}

/// One failed attempt as the attempts table shows it, read from the history: the error entry
/// and the claim it ended (the worker and the call's start).
#[derive(Clone, Debug, PartialEq, Eq)]
struct AttemptRow {
    /// 1 = the first attempt still in the history.
    number: u32,
    /// When the error was recorded.
    at_ms: i64,
    /// The worker that made the call, when its claim is in the history.
    worker: Option<String>,
    /// From the claim to the error (the call, plus the round trips around it).
    took_ms: Option<i64>,
    /// The call that failed ("GET http://api.example/v1/x"), when the worker recorded it (the
    /// URL without its query string: the worker leaves out where credentials may be).
    call: Option<String>,
    /// The error in full, as the worker recorded it.
    error: String,
    /// When the next try was due, when there was one.
    retry_at: Option<i64>,
}

/// Every failed attempt in the history, newest first. The history keeps, per error, the claim
/// it ended ("by w1 token 7") and the error ("HTTP 503: … -> retry at <ms> (attempt 2)", or
/// only the error when it was the last); an operator wants them side by side, in full, the
/// way bull-board lists a job's attempts.
fn attempt_rows(history: &[HistoryEntry]) -> Vec<AttemptRow> {
    // Oldest first, to number them and pair each error with the claim before it.
    let mut claim: Option<&HistoryEntry> = None;
    let mut rows = Vec::new();
    for h in history.iter().rev() {
        match h.kind.as_str() {
            "claimed" => claim = Some(h),
            "error" => {
                let (error, retry) = match h.detail.split_once(" -> retry at ") {
                    Some((e, rest)) => (e, Some(rest)),
                    None => (h.detail.as_str(), None),
                };
                let retry_at = retry.and_then(|r| r.split_whitespace().next()?.parse().ok());
                let (call, error) = split_call(error);
                let number = retry
                    .and_then(|r| r.split("(attempt ").nth(1))
                    .and_then(|n| n.trim_end_matches(')').parse().ok())
                    .unwrap_or(rows.last().map_or(1, |r: &AttemptRow| r.number + 1));
                let worker = claim.and_then(|c| {
                    let by = c.detail.strip_prefix("by ")?;
                    Some(by.split(" token ").next().unwrap_or(by).to_string())
                });
                rows.push(AttemptRow {
                    number,
                    at_ms: h.at_ms,
                    worker,
                    took_ms: claim.map(|c| (h.at_ms - c.at_ms).max(0)),
                    call: call.map(str::to_string),
                    error: error.to_string(),
                    retry_at,
                });
                claim = None;
            }
            // An admin retry starts the count again.
            "retried" => claim = None,
            _ => {}
        }
    }
    rows.reverse();
    rows
}

/// The worker's "METHOD URL: error" split into the call and the error; (None, all) for an
/// error recorded without its call (older workers, a query that could not be put in a URL).
fn split_call(error: &str) -> (Option<&str>, &str) {
    let Some((method, rest)) = error.split_once(' ') else {
        return (None, error);
    };
    let is_method = !method.is_empty() && method.bytes().all(|b| b.is_ascii_uppercase());
    let is_url = rest.starts_with("http://") || rest.starts_with("https://");
    // A URL has no spaces (the worker percent-encodes the query), so the first ": " ends it.
    match rest.split_once(": ") {
        Some((url, e)) if is_method && is_url && !url.contains(' ') => {
            (Some(&error[..method.len() + 1 + url.len()]), e)
        }
        _ => (None, error),
    }
}

/// The attempts table: one row per failed attempt, newest first.
#[component]
fn Attempts(rows: Vec<AttemptRow>, now: i64) -> impl IntoView {
    let n = rows.len();
    view! {
        <h2>{format!("Failed attempts ({n})")}</h2>
        <div class="table-scroll">
        <table class="cards" data-testid="attempts">
            <thead>
                <tr><th>"#"</th><th>"when"</th><th>"worker"</th><th>"call"</th><th>"took"</th><th>"error"</th><th>"then"</th></tr>
            </thead>
            <tbody>
                {rows
                    .into_iter()
                    .map(|r| {
                        // Plain words relative to the error, which stay true as time passes
                        // (not a countdown that would need to tick).
                        let then = match r.retry_at {
                            Some(t) => format!("next try due {} later", duration((t - r.at_ms).max(0))),
                            None => "gave up".into(),
                        };
                        view! {
                            <tr data-testid="attempt-row">
                                <td data-label="#">{r.number}</td>
                                <td data-label="when"><TimeAt now at=r.at_ms past=true /></td>
                                <td data-label="worker">{or_dash(r.worker.unwrap_or_default())}</td>
                                <td data-label="call" class="call-text" data-testid="attempt-call">{or_dash(r.call.unwrap_or_default())}</td>
                                <td data-label="took">{r.took_ms.map(duration).unwrap_or_else(|| "—".into())}</td>
                                <td data-label="error" class="error-text" data-testid="attempt-error"><crate::pages::reveal::UpstreamText text=r.error /></td>
                                <td data-label="then" data-testid="attempt-then">{then}</td>
                            </tr>
                        }
                    })
                    .collect_view()}
            </tbody>
        </table>
        </div>
    }
}

#[component]
fn TaskDetailView(view: TaskView, action: ServerAction<Act>) -> impl IntoView {
    let now = view.now_ms;
    let id = view.id.clone();
    let (heading, state_word) = state_words(&view);
    let heading_class = format!("task-heading state-{state_word}");
    let at = move |t: i64| view! { <TimeAt now at=t /> }.into_any();
    let past = move |t: i64| view! { <TimeAt now at=t past=true /> }.into_any();
    let dead_block = view.task.as_ref().filter(|t| t.state == TaskState::Dead).map(|t| {
        let reason = or_dash(t.dead_reason.map(DeadReason::as_str).unwrap_or_default().to_string());
        let error = t.last_error.clone().filter(|e| !e.is_empty());
        view! {
            <div class="dead-block" role="alert" data-testid="dead-block">
                <p>
                    <strong>"Dead: " {reason}</strong> " · died " {past(t.updated_ms)}
                    {format!(" after {} and {}", plural(u64::from(t.attempts), "attempt", "attempts"), plural(u64::from(t.polls), "poll", "polls"))}
                </p>
                {error.map(|e| view! { <p class="error-text">"Last error: " <span data-testid="dead-error"><crate::pages::reveal::UpstreamText text=e /></span></p> })}
            </div>
        }
    });
    let upstream = view.upstream.clone();
    // The task beside a result is its refresh (or a new ask's task): its state and mark.
    let beside = view.task.as_ref().map(|t| (t.state, t.refresh));
    let traces = view.traces;
    let task = view.task.map(|t| {
        let (leased, dead) = (t.state == TaskState::Leased, t.state == TaskState::Dead);
        let retryable = matches!(t.state, TaskState::Dead | TaskState::Due);
        let token = t.token;
        let tid = t.id.clone();
        let is_due = t.state == TaskState::Due;
        // Only the fields that apply to this state, collected into one list (no empty
        // placeholders between the rows).
        let mut fields: Vec<AnyView> = vec![
            field("state", text(state_word)),
            field("query", view! { <crate::pages::reveal::QueryText text=t.query.clone() /> }.into_any()),
            field("upstream", text(upstream.clone())),
        ];
        if !t.payload.is_empty() {
            fields.push(field("payload", text(t.payload.clone())));
        }
        if t.refresh {
            let what = if view.result.is_some() {
                "yes: its result replaces the stored one below"
            } else {
                "yes (the result it refreshes has expired)"
            };
            fields.push(field("refresh", text(what)));
        }
        fields.push(field("tenant", text(tenant_words(&t.tenant))));
        if let Some(job) = &t.job {
            // The upstream's own text, shown as text (the queue gives a URL without its query
            // string, where a presigned or keyed URL carries its credential).
            fields.push(field("upstream job", text(job.clone())));
        }
        fields.push(field("priority", text(t.priority.as_str().to_string())));
        fields.push(field("created", past(t.created_ms)));
        fields.push(field("updated", past(t.updated_ms)));
        fields.push(field("attempts", text(format!("{} of {}", t.attempts, t.max_attempts))));
        fields.push(field("polls", text(polls_words(view.polls.as_ref(), t.polls, now))));
        if leased {
            fields.push(field("worker", text(t.worker.clone().unwrap_or_default())));
            fields.push(field("token", text(t.token.to_string())));
            fields.push(field("lease deadline", at(t.lease_deadline_ms.unwrap_or(0))));
        }
        if is_due {
            let when = t.due_ms.unwrap_or(0);
            let name = if when <= now { "ready since" } else { "next poll" };
            fields.push(field(name, at(when)));
        }
        if !dead && t.deadline_ms != 0 {
            fields.push(field("deadline", at(t.deadline_ms)));
        }
        if dead {
            fields.push(field("dead reason", text(t.dead_reason.map(DeadReason::as_str).unwrap_or_default().to_string())));
        }
        // A dead task's last error is in the red block; a live one's says why it is retrying.
        if let Some(e) = t.last_error.clone().filter(|e| !e.is_empty() && !dead) {
            fields.push(field("last error", view! { <crate::pages::reveal::UpstreamText text=e /> }.into_any()));
        }
        // The failed call behind that error, each part a field of its own.
        if let Some(call) = view.last_call.as_ref().filter(|_| t.last_error.is_some()) {
            fields.extend(failed_call_fields(call));
        }
        if !traces.is_empty() {
            fields.push(field("trace", trace_view(traces)));
        }
        let partial = t.partial.clone().filter(|p| !p.is_empty());
        view! {
            <div class="row actions">
                {retryable.then(|| view! { <ActButton action op=AdminOp::Retry id=tid.clone() label="Retry now" testid="task-retry" /> })}
                {leased.then(|| view! { <ActButton action op=AdminOp::Release id=tid.clone() token=token label="Release lease" testid="task-release" /> })}
                <ActButton action op=AdminOp::Cancel id=tid.clone() label="Cancel task" testid="task-cancel" />
            </div>
            <dl class="fields" data-testid="task-fields">{fields}</dl>
            <h2>"Latest partial data"</h2>
            {match partial {
                Some(p) => data_block(p, "task-partial").into_any(),
                // A dead task will get none: "yet" would promise some.
                None if dead => view! { <p class="muted" data-testid="task-partial">"The upstream sent no partial data."</p> }.into_any(),
                None => view! { <p class="muted" data-testid="task-partial">"No partial data yet."</p> }.into_any(),
            }}
        }
    });
    let windows = view.windows;
    // A done task's page has no task fields above its result: the result tells the query,
    // upstream and tenant itself.
    let about = beside.is_none().then(|| upstream.clone());
    let story = view.result_story;
    let result = view.result.map(|result| {
        view! { <StoredResultView result windows task=beside story about now /> }
    });
    let history_empty = view.history.is_empty();
    let attempts = attempt_rows(&view.history);
    let attempts = (!attempts.is_empty()).then(|| view! { <Attempts rows=attempts now /> });
    view! {
        <div class="view">
        <PausedBanner paused=view.paused now />
        <h1 class=heading_class data-testid="task-heading">{heading}</h1>
        <p class="task-id">"id " <code data-testid="task-id">{id.to_string()}</code></p>
        <div>{dead_block}</div>
        <div>{task}</div>
        <div>{result}</div>
        <div>{attempts}</div>
        <h2>"History"</h2>
        {history_empty.then(|| view! { <p class="empty">"No history kept."</p> })}
        <ol class="timeline" data-testid="timeline" reversed>
            {view
                .history
                .into_iter()
                .map(|h| {
                    let kind = h.kind.clone();
                    let mut pieces = detail_pieces(&h.detail, h.at_ms);
                    if pieces.is_empty() {
                        pieces.push(Piece::Text("—".into()));
                    }
                    let detail = pieces
                        .into_iter()
                        .map(|p| match p {
                            // Details carry upstream errors: shown as upstream text.
                            Piece::Text(t) => view! { <crate::pages::reveal::UpstreamText text=t /> }.into_any(),
                            Piece::Time(ts, words) => view! {
                                <time datetime=iso(ts) title=utc(ts)>{words}</time>
                            }.into_any(),
                        })
                        .collect_view();
                    view! {
                        <li data-kind=kind>
                            <span class="when"><TimeAt now at=h.at_ms past=true exact=true /></span> " "
                            <strong class="kind">{or_dash(h.kind)}</strong> " "
                            <span class="detail">{detail}</span>
                        </li>
                    }
                })
                .collect_view()}
        </ol>
        </div>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(at_ms: i64, kind: &str, detail: &str) -> HistoryEntry {
        HistoryEntry {
            at_ms,
            kind: kind.into(),
            detail: detail.into(),
        }
    }

    #[test]
    fn attempts_pair_each_error_with_its_claim_newest_first() {
        // Newest first, as the queue returns a history.
        let history = vec![
            h(9_000, "dead", "max_attempts: after 2 attempts"),
            h(9_000, "error", "HTTP 503: upstream says no"),
            h(8_700, "claimed", "by w2 token 8"),
            h(
                5_000,
                "error",
                "timeout after 3000 ms -> retry at 7000 (attempt 1)",
            ),
            h(2_000, "claimed", "by w1 token 7"),
            h(1_000, "enqueued", ""),
        ];
        let rows = attempt_rows(&history);
        assert_eq!(rows.len(), 2);
        assert_eq!(
            rows[1],
            AttemptRow {
                number: 1,
                at_ms: 5_000,
                worker: Some("w1".into()),
                took_ms: Some(3_000),
                call: None,
                error: "timeout after 3000 ms".into(),
                retry_at: Some(7_000),
            }
        );
        assert_eq!(rows[0].number, 2);
        assert_eq!(rows[0].worker.as_deref(), Some("w2"));
        assert_eq!(rows[0].took_ms, Some(300));
        assert_eq!(rows[0].error, "HTTP 503: upstream says no");
        assert_eq!(rows[0].retry_at, None);
    }

    #[test]
    fn the_call_is_split_from_the_error() {
        let rows = attempt_rows(&[h(
            5,
            "error",
            "GET http://api.example:8080/v1/a%20b: HTTP 503: no: not now -> retry at 9 (attempt 3)",
        )]);
        assert_eq!(
            rows[0].call.as_deref(),
            Some("GET http://api.example:8080/v1/a%20b")
        );
        assert_eq!(rows[0].error, "HTTP 503: no: not now");
        assert_eq!((rows[0].number, rows[0].retry_at), (3, Some(9)));
        for plain in [
            "HTTP 503: upstream says no",
            "GET is not a URL: boom",
            "query '..' cannot be placed in the URL path",
            "POST https://x/y",
        ] {
            assert_eq!(split_call(plain), (None, plain));
        }
    }

    #[test]
    fn an_error_without_its_claim_still_shows() {
        let rows = attempt_rows(&[h(5, "error", "boom")]);
        assert_eq!(rows.len(), 1);
        assert_eq!(
            (rows[0].number, rows[0].worker.clone(), rows[0].took_ms),
            (1, None, None)
        );
        assert!(attempt_rows(&[h(1, "enqueued", ""), h(2, "claimed", "by w token 1")]).is_empty());
    }
}
