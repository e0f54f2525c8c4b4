//! One task in full: every field, the latest partial, the final result, and its whole
//! history (claims with worker and token, upstream answers, reschedules, errors, lease
//! expiries, admin actions with who did them) — plus the actions that apply to it.

use leptos::prelude::*;
use leptos_router::hooks::use_params_map;
use serde::{Deserialize, Serialize};

use super::actions::{Act, ActButton, ActionResult};
use super::frame::{session, signed_in, signed_out, AdminFrame};
use super::live::provide_live;
use super::model::{HistoryRow, ResultRow, TaskRow};
use super::ui::{error_text, or_dash, relative};

/// Everything known about one id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskView {
    pub id: String,
    pub task: Option<TaskRow>,
    pub result: Option<ResultRow>,
    /// Newest first.
    pub history: Vec<HistoryRow>,
    pub now_ms: i64,
}

/// The task, result and history of `id`; None when nothing is known about it.
#[server(prefix = "/admin/fn")]
pub async fn read_task(id: String) -> Result<Option<TaskView>, ServerFnError> {
    use crate::auth::{refuse, require, Role};
    use http::StatusCode;
    require(Role::Viewer).await?;
    if !(id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))) {
        return Err(refuse(StatusCode::BAD_REQUEST, "bad task id"));
    }
    let ctx = crate::context::app_context()?;
    let failed = |e: queue::QueueError| {
        tracing::warn!(error = %e, "task read failed");
        refuse(StatusCode::SERVICE_UNAVAILABLE, "Redis is unreachable")
    };
    let now_ms = ctx.queue.now_ms().await.map_err(failed)?;
    let detail = ctx.queue.get(&id).await.map_err(failed)?;
    Ok(detail.map(|d| TaskView {
        id,
        task: d.task.map(Into::into),
        result: d.result.map(Into::into),
        history: d.history.into_iter().map(Into::into).collect(),
        now_ms,
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
    view! {
        <section class="panel">
            <h1>"Task"</h1>
            <ActionResult action />
            <div class="data">
                <Transition fallback=|| view! { <p>"Reading…"</p> }>
                {move || data.get().map(|r| match r {
                        Ok(Some(v)) => view! { <TaskDetailView view=v action /> }.into_any(),
                        Ok(None) => view! { <p data-testid="task-missing">"Nothing is known about this id (finished and expired, purged, or never seen)."</p> }.into_any(),
                        Err(e) => view! { <p class="err" data-testid="task-error">{error_text(&e)}</p> }.into_any(),
                    })}
            </Transition>
            </div>
        </section>
    }
}

#[component]
fn TaskDetailView(view: TaskView, action: ServerAction<Act>) -> impl IntoView {
    let now = view.now_ms;
    let id = view.id.clone();
    let field = |name: &'static str, value: String| {
        view! {
            <dt>{name}</dt>
            <dd data-testid=format!("field-{name}")>{or_dash(value)}</dd>
        }
    };
    let opt = |v: Option<i64>| v.map(|t| relative(now, t)).unwrap_or_else(|| "—".into());
    let task = view.task.map(|t| {
        let leased = t.state == "leased";
        let retryable = t.state == "dead" || t.state == "due";
        let token = t.token;
        let tid = t.id.clone();
        view! {
            <h2>"Live task"</h2>
            <div class="row">
                {retryable.then(|| view! { <ActButton action op="retry" id=tid.clone() label="Retry now" testid="task-retry" /> })}
                {leased.then(|| view! { <ActButton action op="release" id=tid.clone() token=token label="Release lease" testid="task-release" /> })}
                <ActButton action op="cancel" id=tid.clone() label="Cancel task" testid="task-cancel" />
            </div>
            <dl class="fields" data-testid="task-fields">
                {field("state", t.state.clone())}
                {field("query", t.query.clone())}
                {field("payload", t.payload.clone())}
                {field("created", relative(now, t.created_ms))}
                {field("updated", relative(now, t.updated_ms))}
                {field("attempts", format!("{} of {}", t.attempts, t.max_attempts))}
                {field("polls", t.polls.to_string())}
                {field("token", t.token.to_string())}
                {field("worker", t.worker.clone().unwrap_or_else(|| "—".into()))}
                {field("due", opt(t.due_ms))}
                {field("lease deadline", opt(t.lease_deadline_ms))}
                {field("deadline", if t.deadline_ms == 0 { "none".into() } else { relative(now, t.deadline_ms) })}
                {field("dead reason", t.dead_reason.clone().unwrap_or_else(|| "—".into()))}
                {field("last error", t.last_error.clone().unwrap_or_else(|| "—".into()))}
            </dl>
            <h3>"Latest partial"</h3>
            <pre data-testid="task-partial">{or_dash(t.partial.unwrap_or_default())}</pre>
        }
    });
    let result = view.result.map(|r| {
        view! {
            <h2>"Final result"</h2>
            <dl class="fields">
                {field("completed", relative(now, r.completed_ms))}
                {field("created", relative(now, r.created_ms))}
                {field("polls", r.polls.to_string())}
            </dl>
            <pre data-testid="task-result">{or_dash(r.data)}</pre>
        }
    });
    view! {
        <div class="view">
        <p>"id " <code data-testid="task-id">{id}</code></p>
        <div>{task}</div>
        <div>{result}</div>
        <h2>"History"</h2>
        <ol class="timeline" data-testid="timeline" reversed>
            {view
                .history
                .into_iter()
                .map(|h| {
                    let kind = h.kind.clone();
                    view! {
                        <li data-kind=kind>
                            <span class="when">{relative(now, h.at_ms)}</span> " "
                            <strong class="kind">{or_dash(h.kind)}</strong> " "
                            <span class="detail">{or_dash(h.detail)}</span>
                        </li>
                    }
                })
                .collect_view()}
        </ol>
        </div>
    }
}
