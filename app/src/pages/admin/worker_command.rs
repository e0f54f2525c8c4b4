//! A command (quiet, stop) sent to a worker process through Redis, for the admin action that
//! does it (`actions::act`). Server only. Its own module, not the Workers table's: the table
//! offers the action's buttons and the action sends the command, so keeping the command with
//! the table would make the two name each other.

use model::WorkerCommand;

/// Sends `command` to the worker `id` in every upstream's registry where it is (a process's
/// workers share one switch, so reaching any of its entries reaches them all; with
/// `--worker-id` they share the id too). Answers the audit target, how many entries were
/// written and the sentence for the admin.
pub(super) async fn send_command(
    ctx: &crate::context::AppContext,
    id: &str,
    command: WorkerCommand,
) -> Result<(String, u64, String), queue::QueueError> {
    let mut sent = 0u64;
    let mut stopping = false;
    for (_, q) in ctx.queues() {
        match q.command_worker(id, command).await? {
            queue::CommandSent::Sent => sent += 1,
            queue::CommandSent::AlreadyStopping => stopping = true,
            queue::CommandSent::NoSuchWorker => {}
        }
    }
    let message = match (sent, stopping, command) {
        (0, true, _) => format!("worker {id} is already stopping"),
        (0, false, _) => {
            format!("no worker {id}: it has stopped, or missed its heartbeats and was dropped")
        }
        (_, _, WorkerCommand::Quiet) => format!(
            "worker {id} told to go quiet: it claims nothing new and finishes what it holds"
        ),
        (_, _, WorkerCommand::Stop) => format!(
            "worker {id} told to stop: it finishes or releases its calls within its grace, then leaves"
        ),
    };
    Ok((format!("worker:{id}"), sent, message))
}

/// The longest worker id a command names (ids are `host-pid-random`, or `--worker-id`).
pub(super) const MAX_WORKER_ID: usize = 256;
