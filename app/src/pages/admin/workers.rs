//! The overview's Workers table: every worker that heartbeats into the shown upstream's
//! registry, with its memory (its process's resident set, read by the process itself), what
//! it is doing (running, quiet, stopping, or a command sent and not yet acted on), and for an
//! admin the two commands: **quiet** (claim nothing new, finish what it holds) and **stop**
//! (graceful, as on SIGTERM; asked for confirmation first). A command goes through Redis into
//! the worker's registry entry, which its next heartbeat reads (`queue::Queue::command_worker`,
//! sent by `worker_command`), and acts on the worker's whole process (a `repoll worker` exits;
//! a `repoll serve` stops its embedded workers and serves on). Both are forms (`act`: audited)
//! that work without JavaScript.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

use super::actions::{Act, ActButton};
use super::admin_op::AdminOp;
use super::ui::{can_act, or_dash, TimeAt};
use model::{WorkerCommand, WorkerInfo, WorkerMode};

/// A worker as the workers table shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerRow {
    pub info: WorkerInfo,
    /// Missed its heartbeats: probably dead (its entry expires soon).
    pub gone: bool,
}

/// The page's action and which worker's stop question is open. Lives with the page, not with
/// the table (which live updates rebuild), so a question stays open while rows change; it
/// closes once the page's action has answered.
#[derive(Clone, Copy)]
struct WorkerActions {
    action: ServerAction<Act>,
    asking: RwSignal<Option<String>>,
}

/// Provides the table's [`WorkerActions`]; called by the page that shows the table.
pub fn provide_worker_actions(action: ServerAction<Act>) {
    let asking = RwSignal::new(None);
    Effect::new(move |prev: Option<usize>| {
        let v = action.version().get();
        if prev.is_some_and(|p| p != v) {
            asking.set(None);
        }
        v
    });
    provide_context(WorkerActions { action, asking });
}

/// A resident set in words: "48.2 MiB"; "—" when the process could not tell.
pub fn memory_words(bytes: Option<u64>) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    let Some(bytes) = bytes else {
        return "—".into();
    };
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// What the state column says: the worker's own mode, or the command an admin sent that it
/// has not acted on yet ("quiet requested": its next heartbeat reads it).
pub fn state_words(info: &WorkerInfo) -> &'static str {
    match info.command {
        Some(c) if c.mode() > info.mode => match c {
            WorkerCommand::Quiet => "quiet requested",
            WorkerCommand::Stop => "stop requested",
        },
        _ => info.mode.as_str(),
    }
}

/// The Workers heading and table (or the sentence saying there is none).
#[component]
pub fn WorkersTable(workers: Vec<WorkerRow>, now: i64) -> impl IntoView {
    let empty = workers.is_empty();
    let admin = can_act();
    view! {
        <h2 id="workers">"Workers"</h2>
        {empty.then(|| view! { <p class="empty" data-testid="workers-empty">"No worker has reported in: nothing is polling the upstream."</p> })}
        // A box that may scroll sideways (on a phone) takes the keyboard focus, so it can be
        // scrolled without a mouse (a viewer's table has nothing else focusable).
        <div class="table-scroll" tabindex="0" role="region" aria-label="Workers">
        <table data-testid="workers" class:hidden=empty>
            <thead>
                <tr>
                    // The commands right after the id: the table scrolls sideways on a phone,
                    // and its actions must not be what scrolls out of view.
                    <th>"id"</th>{admin.then(|| view! { <th>"commands"</th> })}<th>"host"</th>
                    <th>"pid"</th><th>"up since"</th><th>"in flight"</th><th>"completed"</th>
                    <th>"dead"</th><th>"memory"</th><th>"state"</th><th>"last heartbeat"</th>
                </tr>
            </thead>
            <tbody>
                {workers
                    .into_iter()
                    .map(|row| view! { <WorkerTableRow row now admin /> })
                    .collect_view()}
            </tbody>
        </table>
        </div>
    }
}

#[component]
fn WorkerTableRow(row: WorkerRow, now: i64, admin: bool) -> impl IntoView {
    let WorkerRow { info: w, gone } = row;
    let class = if gone { "gone" } else { "" };
    let state = state_words(&w);
    let state_class = match w.mode {
        WorkerMode::Running if w.command.is_none() => "badge",
        _ => "badge warn",
    };
    // A gone worker reads no command; a stopping one has nothing left to be told.
    let offer_quiet = !gone && w.mode == WorkerMode::Running && w.command.is_none();
    let offer_stop =
        !gone && w.mode < WorkerMode::Stopping && w.command != Some(WorkerCommand::Stop);
    let wid = w.id.clone();
    let commands = admin.then(|| {
        let id = w.id.clone();
        view! {
            <td class="worker-commands">
                {offer_quiet.then(|| view! { <QuietWorker id=id.clone() /> })}
                {offer_stop.then(|| view! { <StopWorker id=id.clone() /> })}
            </td>
        }
    });
    view! {
        <tr class=class data-worker=wid data-mode=w.mode.as_str()>
            <td>
                <code>{or_dash(w.id)}</code>
                {gone.then(|| view! { <span class="badge err">"gone"</span> })}
            </td>
            {commands}
            <td>{or_dash(w.host)}</td>
            <td>{w.pid}</td>
            <td><TimeAt now at=w.started_ms past=true /></td>
            <td>{w.in_flight}</td>
            <td>{w.completed}</td>
            <td>{w.dead}</td>
            <td class="num" data-testid="worker-memory" data-bytes=w.rss_bytes.map(|b| b.to_string())>
                {memory_words(w.rss_bytes)}
            </td>
            <td><span class=state_class data-testid="worker-state">{state}</span></td>
            <td><TimeAt now at=w.last_seen_ms past=true /></td>
        </tr>
    }
}

/// The quiet button: one form, no question (quiet takes nothing away: what the worker holds
/// is finished).
#[component]
fn QuietWorker(id: String) -> impl IntoView {
    use_context::<WorkerActions>().map(|c| {
        view! { <ActButton action=c.action op=AdminOp::QuietWorker id label="Quiet" testid="worker-quiet" /> }
    })
}

/// The stop button, which asks first. With JavaScript the question opens in place; without
/// it the button is a GET form that loads the overview with `?stop_worker=<id>`, which the
/// server renders with the question and its form.
#[component]
fn StopWorker(id: String) -> impl IntoView {
    let query = leptos_router::hooks::use_query_map();
    let ctx = use_context::<WorkerActions>()?;
    let upstream = query
        .with_untracked(|q| q.get("upstream"))
        .filter(|u| !u.is_empty());
    let back = match &upstream {
        Some(u) => format!(
            "/admin?upstream={}",
            crate::pages::format::encode_component(u)
        ),
        None => "/admin".to_string(),
    };
    let id = StoredValue::new(id);
    let asked = move || {
        let id = id.get_value();
        ctx.asking.with(|a| a.as_deref() == Some(id.as_str()))
            || query.with(|q| q.get_str("stop_worker") == Some(id.as_str()))
    };
    let question = format!(
        "Stop worker {}? Its process claims nothing more, finishes or releases its calls within \
         its grace period and leaves (a web server's embedded workers stop; the server serves on).",
        id.get_value()
    );
    let question = StoredValue::new(question);
    let back = StoredValue::new(back);
    Some(view! {
        <form method="get" action="/admin" class="inline">
            {upstream.map(|u| view! { <input type="hidden" name="upstream" value=u /> })}
            <input type="hidden" name="stop_worker" value=id.get_value() />
            <button
                type="submit"
                data-testid="worker-stop"
                on:click=move |ev| {
                    ev.prevent_default();
                    ctx.asking.set(Some(id.get_value()));
                }
            >
                "Stop…"
            </button>
        </form>
        {move || asked().then(|| view! {
            <div class="confirm" role="alertdialog" data-testid="worker-stop-confirm">
                <p><strong data-testid="worker-stop-question">{question.get_value()}</strong></p>
                <ActionForm action=ctx.action attr:class="inline">
                    <input type="hidden" name="op" value=AdminOp::StopWorker.name() />
                    <input type="hidden" name="id" value=id.get_value() />
                    <button type="submit" class="danger" data-testid="worker-stop-yes">"Stop worker"</button>
                </ActionForm>
                " "
                <a
                    href=back.get_value()
                    data-testid="worker-stop-cancel"
                    on:click=move |ev| {
                        // Opened in place: close it here; opened by the no-JS link: the link
                        // drops `stop_worker` from the URL.
                        if query.with(|q| q.get_str("stop_worker").is_none()) {
                            ev.prevent_default();
                        }
                        ctx.asking.set(None);
                    }
                >
                    "Cancel"
                </a>
            </div>
        })}
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(mode: WorkerMode, command: Option<WorkerCommand>) -> WorkerInfo {
        WorkerInfo {
            id: "w".into(),
            host: "h".into(),
            pid: 1,
            started_ms: 1,
            in_flight: 0,
            completed: 0,
            dead: 0,
            last_seen_ms: 1,
            rss_bytes: None,
            mode,
            command,
        }
    }

    #[test]
    fn memory_is_in_binary_units_and_a_dash_when_unknown() {
        assert_eq!(memory_words(None), "—");
        assert_eq!(memory_words(Some(512)), "512 B");
        assert_eq!(memory_words(Some(1536)), "1.5 KiB");
        assert_eq!(
            memory_words(Some(48 * 1024 * 1024 + 200 * 1024)),
            "48.2 MiB"
        );
        assert_eq!(memory_words(Some(3 << 30)), "3.0 GiB");
    }

    #[test]
    fn the_state_is_the_workers_own_once_it_acted_on_the_command() {
        use WorkerMode::{Quiet, Running, Stopping};
        let (quiet, stop) = (Some(WorkerCommand::Quiet), Some(WorkerCommand::Stop));
        assert_eq!(state_words(&info(Running, None)), "running");
        assert_eq!(state_words(&info(Running, quiet)), "quiet requested");
        assert_eq!(state_words(&info(Quiet, quiet)), "quiet");
        assert_eq!(state_words(&info(Quiet, stop)), "stop requested");
        assert_eq!(state_words(&info(Stopping, stop)), "stopping");
        // Stopping on a signal while a quiet was pending: it says what it does.
        assert_eq!(state_words(&info(Stopping, quiet)), "stopping");
    }
}
