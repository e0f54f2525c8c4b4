//! Starting and stopping a bulk run: the one server function every bulk form posts to — the
//! bulk page's filter, and the rows ticked on the task list (issue 29), which are the same run
//! on a filter naming those ids (`queue::BulkFilter::ids`). Works as a plain form post without
//! JavaScript (the answer then comes back as the flash message).

use leptos::prelude::*;

use super::bulk_data::FilterForm;
#[cfg(feature = "ssr")]
use super::ui::plural;

/// Starts a bulk run (`op` = retry | cancel | purge) on what `filter` selects, or stops the
/// running one (`op` = stop). `confirmed` is the count the button showed: a start is refused
/// when more tasks match by now. A destructive run (cancel, purge) also needs `typed`, the
/// operator's own typing of that count: one click cannot destroy thousands of tasks. Answers
/// with a sentence saying what happened.
///
/// `chosen` (any value) marks a form of ticked rows: `ids` are then the tasks acted on (none
/// ticked: nothing done), `filter` gives their state and upstream, the count to confirm and to
/// type is the number of ids, and the run checks each task's state as it does for a filter.
#[server(prefix = "/admin/fn")]
pub async fn bulk_act(
    op: String,
    filter: FilterForm,
    confirmed: Option<u64>,
    typed: Option<String>,
    chosen: Option<String>,
    ids: Option<Vec<String>>,
) -> Result<String, ServerFnError> {
    use super::call::{admin_call, AdminCall};
    use crate::auth::{refuse, Role};
    use http::StatusCode;
    let AdminCall { session, ctx } = admin_call(Role::Admin).await?;
    let q = super::bulk_filter::queue_of(&ctx, &filter)?.clone();
    // The audit log is the deployment's one (the default queue's), whichever upstream acts.
    let audit_q = ctx.queue.clone();
    let upstream_note = match q.config().upstream.as_str() {
        "" => String::new(),
        u => format!("upstream {u}: "),
    };
    let who = session.user.clone();
    let failed = |e: queue::QueueError| {
        tracing::error!(error = %e, "bulk action failed");
        refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "the action failed; see the server log",
        )
    };
    if op == "stop" {
        let asked = q.bulk_stop().await.map_err(failed)?;
        return Ok(if asked {
            "stopping after the current chunk".into()
        } else {
            "no bulk action is running".into()
        });
    }
    let action = queue::BulkAction::parse(&op)
        .ok_or_else(|| refuse(StatusCode::BAD_REQUEST, "unknown action"))?;
    let limit = ctx.admin.settings().bulk_limit;
    let chosen_ids = match chosen {
        None => None,
        Some(_) => Some(chosen_ids(ids.unwrap_or_default(), limit)?),
    };
    // Ticked rows: the count is theirs (the page cannot know it without JavaScript).
    let confirmed = match &chosen_ids {
        Some(ids) => Some(ids.len() as u64),
        None => confirmed,
    };
    if destructive(&op) {
        let want = confirmed.map(|n| n.to_string());
        let typed = typed.as_deref().map(str::trim);
        if want.is_none() || typed != want.as_deref() {
            return Err(refuse(
                StatusCode::BAD_REQUEST,
                &format!(
                    "nothing done: type the number of tasks ({}) to confirm a {op}",
                    want.as_deref().unwrap_or("shown")
                ),
            ));
        }
    }
    let mut f = super::bulk_filter::filter(&filter)?;
    f.ids = chosen_ids;
    let job = match q
        .bulk_begin(action, &f, &who, limit, confirmed)
        .await
        .map_err(failed)?
    {
        Ok(job) => job,
        Err(refused) => return Err(refused_answer(&op, f.state.as_str(), refused)),
    };
    let total = job.progress().total;
    run_in_background(job, format!("bulk {op}"), upstream_note, who, audit_q);
    let message = format!("started: {op} {}", plural(total, "task", "tasks"));
    // Ticked rows are posted from the task list, which shows the flash of a no-JS post.
    if f.ids.is_some() {
        super::flash::set(&message);
    }
    Ok(message)
}

/// Why a bulk run was not started, as the operator reads it (with the status to answer).
#[cfg(feature = "ssr")]
fn refused_answer(op: &str, state: &str, refused: queue::BulkRefused) -> ServerFnError {
    use crate::auth::refuse;
    use http::StatusCode;
    use queue::BulkRefused as R;
    let (status, msg) = match refused {
        R::NotApplicable => (
            StatusCode::BAD_REQUEST,
            format!("{op} does not apply to {state} tasks"),
        ),
        R::Nothing => (
            StatusCode::CONFLICT,
            "nothing done: no task matches the filter now".to_string(),
        ),
        R::OverLimit { matched, limit } => (
            StatusCode::BAD_REQUEST,
            format!(
                "nothing done: {matched} tasks match, more than the {limit} one bulk action may touch \
                 (REPOLL_BULK_LIMIT); narrow the filter"
            ),
        ),
        R::CountGrew { confirmed, matched } => (
            StatusCode::CONFLICT,
            format!(
                "nothing done: {matched} tasks match now, more than the {confirmed} shown; look at the count again"
            ),
        ),
        R::Busy(run) => (
            StatusCode::CONFLICT,
            format!(
                "nothing done: another bulk {} is running ({} of {})",
                run.action, run.done, run.total
            ),
        ),
    };
    refuse(status, &msg)
}

/// Runs a started bulk job to its end on the server, not in this request (it goes on when the
/// page is closed), then writes its one audit entry: the filter and what it changed.
#[cfg(feature = "ssr")]
fn run_in_background(
    job: queue::BulkJob,
    audit_action: String,
    upstream_note: String,
    who: String,
    audit_q: queue::Queue,
) {
    let filter_text = job.progress().filter.clone();
    tokio::spawn(async move {
        let end = job.run().await;
        let (target, count) = match &end {
            Ok(p) if p.state == "stopped" => (
                format!("{filter_text} (stopped after {} of {})", p.done, p.total),
                p.changed,
            ),
            Ok(p) => (filter_text, p.changed),
            Err(_) => (format!("{filter_text} (failed; see the server log)"), 0),
        };
        let target = format!("{upstream_note}{target}");
        super::actions::record_audit(&audit_q, &who, &audit_action, &target, count).await;
    });
}

/// The ticked rows' ids: each a task id, duplicates once, at least one and at most `limit`.
#[cfg(feature = "ssr")]
fn chosen_ids(ids: Vec<String>, limit: u64) -> Result<Vec<queue::TaskId>, ServerFnError> {
    use crate::auth::refuse;
    use http::StatusCode;
    if ids.len() as u64 > limit {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            &format!(
                "nothing done: {} tasks chosen, more than the {limit} one bulk action may touch",
                ids.len()
            ),
        ));
    }
    let mut out: Vec<queue::TaskId> = Vec::with_capacity(ids.len());
    let mut seen = std::collections::BTreeSet::new();
    for id in ids {
        let id = id
            .trim()
            .parse::<queue::TaskId>()
            .map_err(|_| refuse(StatusCode::BAD_REQUEST, "bad task id"))?;
        if seen.insert(id.clone()) {
            out.push(id);
        }
    }
    if out.is_empty() {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            "nothing done: no task chosen; tick the rows to act on",
        ));
    }
    Ok(out)
}

/// Whether `op` destroys work (asks for the count typed).
pub fn destructive(op: &str) -> bool {
    matches!(op, "cancel" | "purge")
}
