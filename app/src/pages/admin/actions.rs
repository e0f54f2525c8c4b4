//! Every admin action, through one server function, [`act`]; the actions themselves are
//! `admin_op`'s.
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

use super::admin_op::AdminOp;

/// Runs one admin action and says what it did.
#[server(prefix = "/admin/fn")]
pub async fn act(
    op: String,
    id: Option<String>,
    confirm: Option<String>,
    token: Option<String>,
) -> Result<String, ServerFnError> {
    use super::admin_op::Ask;
    use super::call::{admin_call, AdminCall};
    use crate::auth::{refuse, Role};

    let AdminCall { session, ctx } = admin_call(Role::Admin).await?;
    let action = AdminOp::parse(&op)
        .ok_or_else(|| refuse(http::StatusCode::BAD_REQUEST, "unknown action"))?;
    let who = session.user.as_str();
    let ask = Ask {
        ctx: &ctx,
        who,
        id: id.unwrap_or_default().trim().to_string(),
        confirm,
        token,
    };
    let done = action.run(&ask).await?;
    // What changed nothing is not a change: the audit log keeps the last AUDIT_CAP changes,
    // and a stream of no-ops (a command to a worker that is gone, a second pause) must not
    // push them out (issue 39 row 5). The admin still reads what happened in the answer.
    if done.count > 0 {
        record_audit(&ctx.queue, who, action.name(), &done.target, done.count).await;
    } else {
        let target = &done.target;
        tracing::debug!(
            who,
            action = action.name(),
            target,
            "admin action changed nothing"
        );
    }
    super::flash::set(&done.message);
    Ok(done.message)
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
    op: AdminOp,
    #[prop(into, optional)] id: String,
    #[prop(optional)] token: Option<u64>,
    label: &'static str,
    #[prop(optional)] testid: &'static str,
) -> impl IntoView {
    super::ui::can_act().then(|| {
        view! {
            <ActionForm action=action attr:class="inline">
                <input type="hidden" name="op" value=op.name() />
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
