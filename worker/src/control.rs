//! The quiet / stop switch of a process's workers, and what a heartbeat says of the process.
//!
//! A process runs one [`crate::Worker`] per upstream; they share one [`Control`]
//! ([`crate::Worker::with_control`]), so an admin's command read by any of them (each reads its
//! own registry entry on its heartbeat: `queue::Queue::command_worker`) acts on the whole set,
//! as a signal would: `quiet` — claim nothing new, finish and complete what is held, keep
//! heartbeating; `stop` — shut down gracefully, as on SIGTERM. In `repoll worker` the process
//! then exits; in `repoll serve` its embedded workers stop and the web server serves on.
//!
//! The mode only moves forward (running → quiet → stopping): a command cannot undo a stop.

use std::sync::Arc;

use queue::{WorkerCommand, WorkerMode};
use tokio::sync::watch;

/// Shared by the workers of one process (clones are the same switch).
#[derive(Clone, Debug)]
pub struct Control {
    mode: Arc<watch::Sender<WorkerMode>>,
}

impl Default for Control {
    fn default() -> Self {
        Control::new()
    }
}

impl Control {
    /// A switch in [`WorkerMode::Running`].
    pub fn new() -> Control {
        Control {
            mode: Arc::new(watch::Sender::new(WorkerMode::Running)),
        }
    }

    /// The mode now.
    pub fn mode(&self) -> WorkerMode {
        *self.mode.borrow()
    }

    /// Whether the workers may claim (neither quiet nor stopping).
    pub fn claims(&self) -> bool {
        self.mode() == WorkerMode::Running
    }

    /// Acts on an admin's command (again and again on every heartbeat: only a change counts).
    pub fn apply(&self, command: WorkerCommand) {
        self.advance(command.mode());
    }

    /// Stopping from now on (a shutdown by signal says so too, for the heartbeat).
    pub fn stop(&self) {
        self.advance(WorkerMode::Stopping);
    }

    /// Moves to `to` if it is further along (running < quiet < stopping); tells the
    /// subscribers only of a change.
    fn advance(&self, to: WorkerMode) {
        let changed = self.mode.send_if_modified(|m| {
            let further = to > *m;
            if further {
                *m = to;
            }
            further
        });
        if changed {
            tracing::info!(mode = to.as_str(), "workers switched");
        }
    }

    /// A receiver that sees every later change (`changed()`).
    pub fn subscribe(&self) -> watch::Receiver<WorkerMode> {
        self.mode.subscribe()
    }

    /// Resolves once the workers are told to stop.
    pub async fn stopped(&self) {
        let mut rx = self.subscribe();
        // The sender lives as long as `self`: `wait_for` cannot fail while we wait.
        let _ = rx.wait_for(|m| *m == WorkerMode::Stopping).await;
    }
}

/// This process's resident memory in bytes (Linux: `VmRSS` of `/proc/self/status`); None
/// elsewhere or when it cannot be read. Read by the process itself, so it is right wherever
/// the process runs.
pub fn resident_bytes() -> Option<u64> {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| vm_rss_bytes(&s))
}

/// `VmRSS:   12345 kB` of a `/proc/<pid>/status` text, in bytes.
fn vm_rss_bytes(status: &str) -> Option<u64> {
    let line = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
    let mut parts = line.split_whitespace();
    let n: u64 = parts.next()?.parse().ok()?;
    match parts.next()? {
        "kB" => n.checked_mul(1024),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vm_rss_is_read_in_bytes() {
        let status = "Name:\trepoll\nVmPeak:\t  900 kB\nVmRSS:\t   12345 kB\nThreads:\t4\n";
        assert_eq!(vm_rss_bytes(status), Some(12345 * 1024));
        assert_eq!(vm_rss_bytes("Name:\trepoll\n"), None);
        assert_eq!(vm_rss_bytes("VmRSS:\t12 MB\n"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_has_resident_memory() {
        assert!(resident_bytes().is_some_and(|n| n > 0));
    }

    #[test]
    fn the_mode_only_moves_forward() {
        let c = Control::new();
        let mut rx = c.subscribe();
        assert!(c.claims());
        c.apply(WorkerCommand::Quiet);
        assert_eq!(c.mode(), WorkerMode::Quiet);
        assert!(!c.claims());
        assert!(rx.has_changed().unwrap());
        rx.mark_unchanged();
        // The same command on the next heartbeat is no change.
        c.apply(WorkerCommand::Quiet);
        assert!(!rx.has_changed().unwrap());
        c.apply(WorkerCommand::Stop);
        assert_eq!(c.mode(), WorkerMode::Stopping);
        // A quiet cannot undo a stop.
        c.apply(WorkerCommand::Quiet);
        assert_eq!(c.mode(), WorkerMode::Stopping);
    }
}
