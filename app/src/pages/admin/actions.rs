//! Every admin action, through one server function, [`act`].
//!
//! One entry point on purpose: the checks that make an action safe — signed in as admin,
//! arguments valid, purge confirmed by typing the state's name, written to the audit log when it
//! changed something —
//! are written once, so a new action cannot forget one. (Cross-site requests never get
//! here: the server's same-origin middleware refuses them first.) The function answers with
//! a sentence saying what it did ("released 3 leases"), which the page shows as text.
//!
//! Forms post `op` (what), `id` (a task id, or the purge target) and `confirm` (the typed
//! purge target) / `token` (the lease to release); the forms work without JavaScript.
//! `quiet_worker` / `stop_worker` send a worker process a command through Redis
//! (`worker_command::send_command`; the audit target is `worker:<id>`).
//! `sign_out_all` ends every dashboard session (the acting admin's too, who is handed a new
//! one), e.g. after a cookie may have leaked.

use leptos::prelude::*;

/// Runs one admin action and says what it did.
#[server(prefix = "/admin/fn")]
pub async fn act(
    op: String,
    id: Option<String>,
    confirm: Option<String>,
    token: Option<String>,
) -> Result<String, ServerFnError> {
    use crate::auth::{refuse, require, Role};
    use http::StatusCode;

    let session = require(Role::Admin).await?;
    let ctx = crate::context::app_context()?;
    let q = &ctx.queue;
    let who = session.user.as_str();
    let id = id.unwrap_or_default().trim().to_string();
    let bad = |m: &str| refuse(StatusCode::BAD_REQUEST, m);
    let task_id = || id.parse::<queue::TaskId>().map_err(|_| bad("bad task id"));
    // The queue of the upstream `id` names (pause, resume and the breaker; empty: default).
    let named_queue = || {
        ctx.upstream(Some(id.as_str()))
            .map(|(q, _)| q)
            .map_err(|e| bad(&e.to_string()))
    };
    let failed = |e: queue::QueueError| {
        tracing::error!(error = %e, op = %op, "admin action failed");
        refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "the action failed; see the server log",
        )
    };
    let plural = |n: u64, one: &str, many: &str| {
        if n == 1 {
            format!("1 {one}")
        } else {
            format!("{n} {many}")
        }
    };

    let (target, count, message) = match op.as_str() {
        "retry" => {
            let id = task_id()?;
            let q = ctx.queue_of_task(&id).await.map_err(failed)?;
            let n = u64::from(q.retry(&id, who).await.map_err(failed)?);
            let msg = if n == 1 {
                format!("retried task {id}")
            } else {
                "nothing retried: the task is not dead or waiting".into()
            };
            (id.to_string(), n, msg)
        }
        "retry_all_dead" => {
            let n = q.retry_all_dead(who).await.map_err(failed)?;
            (
                "dead".into(),
                n,
                format!("retried {}", plural(n, "dead task", "dead tasks")),
            )
        }
        "cancel" => {
            let id = task_id()?;
            let q = ctx.queue_of_task(&id).await.map_err(failed)?;
            let n = u64::from(q.cancel(&id, who).await.map_err(failed)?);
            let msg = if n == 1 {
                format!("cancelled task {id}")
            } else {
                "nothing cancelled: no live task with this id".into()
            };
            (id.to_string(), n, msg)
        }
        "release" => {
            let id = task_id()?;
            // With the token shown on the page, only that lease is released: if the task was
            // reclaimed meanwhile, the new holder keeps it.
            let token = token.as_deref().and_then(|t| t.trim().parse::<u64>().ok());
            let by = format!("admin {who}");
            let q = ctx.queue_of_task(&id).await.map_err(failed)?;
            let n = match q.release(&id, token, &by).await {
                Ok(released) => u64::from(released),
                Err(queue::QueueError::StaleToken) => 0,
                Err(e) => return Err(failed(e)),
            };
            let msg = format!("released {}", plural(n, "lease", "leases"));
            (id.to_string(), n, msg)
        }
        "release_stuck" => {
            // Only leases already past their deadline: a lease close to it may belong to a
            // healthy worker that is about to renew it.
            // Every upstream's queue, as the page lists them.
            let by = format!("admin {who}");
            let mut n = 0u64;
            for (_, uq) in ctx.queues() {
                let stuck = uq.stuck_leases(0, queue::MAX_PAGE).await.map_err(failed)?;
                for l in stuck.iter().filter(|l| l.overdue_ms >= 0) {
                    match uq.release(&l.id, Some(l.token), &by).await {
                        Ok(true) => n += 1,
                        Ok(false) | Err(queue::QueueError::StaleToken) => {}
                        Err(e) => return Err(failed(e)),
                    }
                }
            }
            (
                "stuck".into(),
                n,
                format!("released {}", plural(n, "lease", "leases")),
            )
        }
        "purge" => {
            let target = match id.as_str() {
                "dead" => queue::PurgeTarget::Dead,
                "results" => queue::PurgeTarget::Results,
                "history" => queue::PurgeTarget::History,
                "queued" => queue::PurgeTarget::Queued,
                _ => return Err(bad("unknown purge target")),
            };
            if confirm.as_deref().map(str::trim) != Some(id.as_str()) {
                return Err(bad(&format!("not purged: type \"{id}\" to confirm")));
            }
            let n = q.purge(target, who).await.map_err(failed)?;
            (id.clone(), n, format!("purged {n} ({id})"))
        }
        // `id` may name an upstream (the Upstreams page pauses one API); empty: the default.
        "pause" => {
            let uq = named_queue()?;
            let n = u64::from(uq.pause(who).await.map_err(failed)?);
            let msg = if n == 1 {
                "paused: workers claim nothing until resumed"
            } else {
                "already paused: workers claim nothing until resumed"
            };
            (target_of("queue", &id), n, msg.into())
        }
        "resume" => {
            let uq = named_queue()?;
            let n = u64::from(uq.resume(who).await.map_err(failed)?);
            let msg = if n == 1 {
                "resumed"
            } else {
                "not paused: nothing to resume"
            };
            (target_of("queue", &id), n, msg.into())
        }
        "open_breaker" => {
            // For a planned upstream maintenance: claims stop at once; a probe goes after
            // 15 minutes unless an admin closes it first. `id` names the upstream (empty:
            // the default one).
            let uq = named_queue()?;
            uq.open_breaker(who, 15 * 60_000).await.map_err(failed)?;
            (
                target_of("breaker", &id),
                1,
                "breaker open: workers claim nothing for 15 min, then one probe goes".into(),
            )
        }
        "close_breaker" => {
            let uq = named_queue()?;
            let n = u64::from(uq.close_breaker(who).await.map_err(failed)?);
            let msg = if n == 1 {
                "breaker closed: claims resume".into()
            } else {
                "the breaker was already closed".into()
            };
            (target_of("breaker", &id), n, msg)
        }
        // Every session ends (a cookie may have leaked, an operator left): admins and viewers,
        // the acting admin's too, since the leaked cookie may be that one. The acting admin
        // then gets a new session with this answer, so the page stays usable.
        "sign_out_all" => {
            let n = crate::auth::Sessions::of(&ctx)
                .end_all()
                .await
                .map_err(failed)?;
            super::login::start_session(&ctx, Role::Admin).await?;
            (
                "sessions".into(),
                n,
                format!(
                    "signed out {}; you were given a new session",
                    plural(n, "session", "sessions")
                ),
            )
        }
        // A worker process told to go quiet or to stop, through its registry entry (read on
        // its next heartbeat); `id` is the worker's id as the Workers table shows it.
        "quiet_worker" | "stop_worker" => {
            if id.is_empty() || id.len() > super::worker_command::MAX_WORKER_ID {
                return Err(bad("bad worker id"));
            }
            let command = match op.as_str() {
                "quiet_worker" => model::WorkerCommand::Quiet,
                _ => model::WorkerCommand::Stop,
            };
            super::worker_command::send_command(&ctx, &id, command)
                .await
                .map_err(failed)?
        }
        _ => return Err(bad("unknown action")),
    };
    // What changed nothing is not a change: the audit log keeps the last AUDIT_CAP changes,
    // and a stream of no-ops (a command to a worker that is gone, a second pause) must not
    // push them out (issue 39 row 5). The admin still reads what happened in the answer.
    if count > 0 {
        record_audit(q, who, &op, &target, count).await;
    } else {
        tracing::debug!(who, action = %op, target, "admin action changed nothing: not audited");
    }
    super::flash::set(&message);
    Ok(message)
}

/// The audit target of a queue-wide action on an upstream: `kind:<upstream>` (`queue:default`,
/// `breaker:search`), so every entry names the upstream it acted on, the default one too.
#[cfg(feature = "ssr")]
fn target_of(kind: &str, upstream: &str) -> String {
    let upstream = if upstream.is_empty() {
        queue::DEFAULT_UPSTREAM
    } else {
        upstream
    };
    format!("{kind}:{upstream}")
}

/// The sentence the last action answered (or its error: only our own words when it came from
/// the URL, see `crate::pages::form_error`), for `data-testid="action-result"`.
/// After a form post without JavaScript, the page rendered next shows it from the flash
/// cookie instead (the browser never ran the action's client side).
#[component]
pub fn ActionResult(action: ServerAction<Act>) -> impl IntoView {
    #[cfg(feature = "ssr")]
    let flash = super::flash::take();
    #[cfg(not(feature = "ssr"))]
    let flash: Option<String> = None;
    view! {
        <p class="action-result" data-testid="action-result" aria-live="polite">
            {move || {
                crate::pages::form_error::outcome(action)
                    .map(|r| super::ui::or_dash(r.unwrap_or_else(|e| e)))
                    .or_else(|| flash.clone())
            }}
        </p>
    }
}

/// A one-button form running `op` on `id` (works without JavaScript); nothing for a viewer.
#[component]
pub fn ActButton(
    action: ServerAction<Act>,
    op: &'static str,
    #[prop(into, optional)] id: String,
    #[prop(optional)] token: Option<u64>,
    label: &'static str,
    #[prop(optional)] testid: &'static str,
) -> impl IntoView {
    super::ui::can_act().then(|| {
        view! {
            <ActionForm action=action attr:class="inline">
                <input type="hidden" name="op" value=op />
                <input type="hidden" name="id" value=id />
                {token.map(|t| view! { <input type="hidden" name="token" value=t.to_string() /> })}
                <button type="submit" data-testid=testid>
                    {label}
                </button>
            </ActionForm>
        }
    })
}

/// Writes an admin action to the queue's audit log and to the server log. A failure is logged,
/// not returned: the action itself already happened and its result must still reach the admin.
#[cfg(feature = "ssr")]
pub(super) async fn record_audit(
    queue: &queue::Queue,
    who: &str,
    action: &str,
    target: &str,
    count: u64,
) {
    if let Err(e) = queue.audit(who, action, target, count).await {
        tracing::error!(error = %e, who, action, target, count, "audit log write failed");
    }
    tracing::info!(who, action, target, count, "admin action");
}
