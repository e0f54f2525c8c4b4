//! What the overview shows: the answer of its server function (`overview::overview`), read by
//! the page and by its actions panel (`queue_actions`). Its own module, below both, so the panel
//! need not name the page that holds it.

use serde::{Deserialize, Serialize};

use super::chart::{Marker, Plot, Window};
use super::workers::WorkerRow;
use model::{AuditEntry, BreakerInfo, PauseInfo, Stats};

/// What the overview shows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverviewData {
    pub stats: Stats,
    pub workers: Vec<WorkerRow>,
    pub audit: Vec<AuditEntry>,
    /// The queue's pause, if paused.
    pub paused: Option<PauseInfo>,
    /// The upstream's circuit breaker, unless closed.
    pub breaker: Option<BreakerInfo>,
    /// What the charts cover; their points are `stats.throughput`.
    pub window: Window,
    /// What the throughput chart plots (the `plot` parameter).
    pub plot: Plot,
    /// Pauses, resumes and process starts inside the window.
    pub markers: Vec<Marker>,
    /// The upstream shown ("" = the default one; its queue-wide actions are on this page,
    /// a named one's on the Upstreams page).
    pub upstream: String,
    /// Every upstream's name (more than one: the page offers the choice).
    pub upstreams: Vec<String>,
}
