//! What the claim loop, the tasks and the upkeep loops of one worker share: the queue, the
//! upstream, the settings, the counters behind [`crate::WorkerReport`], and the leases held
//! (so shutdown can give them back).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Mutex;

use queue::Queue;

use crate::callback::Callbacks;
use crate::policy::PolicyArgs;
use crate::upstream::Upstream;

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub claimed: AtomicU64,
    pub completed: AtomicU64,
    pub rescheduled: AtomicU64,
    pub retried: AtomicU64,
    pub dead: AtomicU64,
    pub stale: AtomicU64,
    pub renewed: AtomicU64,
}

/// What the claim loop, the tasks and the upkeep loops share.
pub(crate) struct Ctx {
    pub queue: Queue,
    /// The `upstream` label of this worker's metrics: its queue's upstream, or `default`. A
    /// process runs a worker per upstream, and their series must not mix.
    pub label: String,
    pub upstream: Upstream,
    /// Signs each call's callback URL where the upstream's template asks for one.
    pub callbacks: Option<Callbacks>,
    pub policy: PolicyArgs,
    pub id: String,
    pub lease_ms: u64,
    /// Redis `TIME` minus the local clock, measured at start: task times are Redis times.
    pub clock_offset_ms: i64,
    pub counters: Counters,
    /// Set when shutdown begins: finishing tasks stop asking for their next one.
    pub stopping: AtomicBool,
    /// The process's quiet / stop switch, shared by its workers.
    pub control: crate::control::Control,
    /// Leases this worker holds: task id -> token, for release on shutdown.
    pub(crate) leases: Mutex<HashMap<String, u64>>,
}

impl Ctx {
    /// Now, in Redis time.
    pub fn now_ms(&self) -> i64 {
        local_ms() + self.clock_offset_ms
    }

    /// Whether this worker may take more work: not stopping, not quiet.
    pub fn claims_more(&self) -> bool {
        !self.stopping.load(std::sync::atomic::Ordering::Relaxed) && self.control.claims()
    }

    /// What the heartbeat says it is doing.
    pub fn mode(&self) -> queue::WorkerMode {
        match self.stopping.load(std::sync::atomic::Ordering::Relaxed) {
            true => queue::WorkerMode::Stopping,
            false => self.control.mode(),
        }
    }

    pub fn hold(&self, id: &str, token: u64) {
        self.lock().insert(id.to_string(), token);
    }

    pub fn forget(&self, id: &str) {
        self.lock().remove(id);
    }

    pub fn in_flight(&self) -> usize {
        self.lock().len()
    }

    pub fn take_all(&self) -> Vec<(String, u64)> {
        self.lock().drain().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, u64>> {
        self.leases.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub(crate) use queue::local_ms;

/// This host's name, as the process registries show it ("" when it has none). Here, beside what
/// the loops share, because both the runtime (the default worker id) and the heartbeat use it.
pub fn host_name() -> String {
    gethostname::gethostname().to_string_lossy().into_owned()
}
