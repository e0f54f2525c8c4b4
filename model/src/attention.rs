//! What needs an operator now, decided from one upstream's state: the dashboard's attention
//! strip (on every admin page) and the user's page ("nothing is polling right now") say it
//! in words; this module only decides, so both sides and the tests agree on one rule.
//!
//! [`Concern::rank`] is the order of urgency: the strip shows the most urgent first.

use serde::{Deserialize, Serialize};

use crate::queue_state::{BreakerInfo, PauseInfo, Stats, WorkerInfo, WorkerMode};

/// How long the oldest ready task may wait before the strip names it, unless configured.
pub const DEFAULT_READY_AGE_MS: i64 = 60_000;

/// The strip's answer: every upstream's concerns, most urgent first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attention {
    pub concerns: Vec<Concern>,
    /// Upstreams configured: with one, the words leave its name out.
    pub upstreams: usize,
    /// Redis's clock at the read.
    pub now_ms: i64,
}

impl Attention {
    /// Something says nothing polls `upstream` (or Redis is unreachable).
    pub fn nothing_polls(&self, upstream: &str) -> bool {
        self.concerns
            .iter()
            .any(|c| c.nothing_polls() && (c.upstream().is_empty() || c.upstream() == upstream))
    }
}

/// One thing wrong with one upstream's queue (or with Redis, for all of them).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Concern {
    /// The dashboard could not read the queue: nothing else can be said.
    RedisUnreachable,
    /// The queue's partitions are being changed (`repoll admin repartition`), or were, since
    /// this process started: it runs the old layout, so it accepts and claims nothing until it
    /// is restarted with the new count.
    Repartition {
        upstream: String,
        /// The partitions this process runs.
        have: u16,
        /// The partitions the queue is moving to (or has).
        now: u16,
    },
    /// No worker has a live heartbeat: nothing polls the upstream.
    NoWorker { upstream: String, ready: u64 },
    /// Workers are there, but every one is quiet or stopping: nothing claims new work.
    AllQuiet {
        upstream: String,
        workers: u32,
        ready: u64,
    },
    /// The circuit breaker is open (or half-open): claims wait for its cool-down.
    BreakerOpen {
        upstream: String,
        breaker: BreakerInfo,
    },
    /// The queue is paused by an admin.
    Paused { upstream: String, pause: PauseInfo },
    /// The oldest ready task has waited longer than the configured age.
    ReadyWaiting {
        upstream: String,
        age_ms: i64,
        ready: u64,
    },
    /// Leases past their deadline (their workers are probably gone); recovered by the reaper.
    StuckLeases { upstream: String, stuck: u64 },
}

impl Concern {
    /// Nothing is polling this upstream: the strip turns red, the user's page says so.
    pub fn nothing_polls(&self) -> bool {
        matches!(
            self,
            Concern::RedisUnreachable
                | Concern::Repartition { .. }
                | Concern::NoWorker { .. }
                | Concern::AllQuiet { .. }
        )
    }

    /// The upstream it is about ("" for Redis, which is every upstream's).
    pub fn upstream(&self) -> &str {
        match self {
            Concern::RedisUnreachable => "",
            Concern::Repartition { upstream, .. }
            | Concern::NoWorker { upstream, .. }
            | Concern::AllQuiet { upstream, .. }
            | Concern::BreakerOpen { upstream, .. }
            | Concern::Paused { upstream, .. }
            | Concern::ReadyWaiting { upstream, .. }
            | Concern::StuckLeases { upstream, .. } => upstream,
        }
    }

    /// Its urgency, most urgent first (the order of the variants).
    pub fn rank(&self) -> u8 {
        match self {
            Concern::RedisUnreachable => 0,
            Concern::Repartition { .. } => 1,
            Concern::NoWorker { .. } => 2,
            Concern::AllQuiet { .. } => 3,
            Concern::BreakerOpen { .. } => 4,
            Concern::Paused { .. } => 5,
            Concern::ReadyWaiting { .. } => 6,
            Concern::StuckLeases { .. } => 7,
        }
    }

    /// A stable name for pages and tests (`data-testid="attention-{key}"`).
    pub fn key(&self) -> &'static str {
        match self {
            Concern::RedisUnreachable => "redis",
            Concern::Repartition { .. } => "repartition",
            Concern::NoWorker { .. } => "no-worker",
            Concern::AllQuiet { .. } => "all-quiet",
            Concern::BreakerOpen { .. } => "breaker",
            Concern::Paused { .. } => "paused",
            Concern::ReadyWaiting { .. } => "ready-waiting",
            Concern::StuckLeases { .. } => "stuck",
        }
    }
}

/// Some worker has a live heartbeat (newer than `gone_after_ms` at `now_ms`) and claims work.
pub fn any_running(workers: &[WorkerInfo], now_ms: i64, gone_after_ms: i64) -> bool {
    workers
        .iter()
        .any(|w| !w.is_gone(now_ms, gone_after_ms) && w.mode == WorkerMode::Running)
}

/// One upstream's state as the dashboard reads it.
#[derive(Clone, Debug)]
pub struct UpstreamState<'a> {
    /// Its name ("default" for the top-level upstream).
    pub upstream: &'a str,
    /// Its counts (no throughput needed).
    pub counts: &'a Stats,
    pub workers: &'a [WorkerInfo],
    pub breaker: Option<&'a BreakerInfo>,
    pub pause: Option<&'a PauseInfo>,
}

/// What is wrong with one upstream: workers whose heartbeat is older than `gone_after_ms`
/// count as absent; a ready task older than `ready_age_ms` is named (unless nothing polls,
/// which says more, or the queue is paused or the breaker open, which say why).
pub fn concerns(s: &UpstreamState<'_>, gone_after_ms: i64, ready_age_ms: i64) -> Vec<Concern> {
    let now = s.counts.now_ms;
    let upstream = s.upstream.to_string();
    let ready = s.counts.ready;
    let live: Vec<&WorkerInfo> = s
        .workers
        .iter()
        .filter(|w| !w.is_gone(now, gone_after_ms))
        .collect();
    let mut out = Vec::new();
    if live.is_empty() {
        out.push(Concern::NoWorker {
            upstream: upstream.clone(),
            ready,
        });
    } else if live.iter().all(|w| w.mode != WorkerMode::Running) {
        out.push(Concern::AllQuiet {
            upstream: upstream.clone(),
            workers: u32::try_from(live.len()).unwrap_or(u32::MAX),
            ready,
        });
    }
    if let Some(breaker) = s.breaker {
        out.push(Concern::BreakerOpen {
            upstream: upstream.clone(),
            breaker: breaker.clone(),
        });
    }
    if let Some(pause) = s
        .pause
        .cloned()
        .or_else(|| s.counts.paused.then(PauseInfo::default))
    {
        out.push(Concern::Paused {
            upstream: upstream.clone(),
            pause,
        });
    }
    let explained = !out.is_empty();
    if !explained && ready > 0 && s.counts.oldest_ready_age_ms > ready_age_ms {
        out.push(Concern::ReadyWaiting {
            upstream: upstream.clone(),
            age_ms: s.counts.oldest_ready_age_ms,
            ready,
        });
    }
    if s.counts.stuck > 0 {
        out.push(Concern::StuckLeases {
            upstream,
            stuck: s.counts.stuck,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_000_000;

    fn worker(id: &str, seen_ago_ms: i64, mode: WorkerMode) -> WorkerInfo {
        WorkerInfo {
            id: id.into(),
            host: "h".into(),
            pid: 1,
            started_ms: 0,
            in_flight: 0,
            completed: 0,
            dead: 0,
            last_seen_ms: NOW - seen_ago_ms,
            rss_bytes: None,
            mode,
            command: None,
        }
    }

    fn counts(ready: u64, oldest_ms: i64, stuck: u64) -> Stats {
        Stats {
            ready,
            oldest_ready_age_ms: oldest_ms,
            stuck,
            now_ms: NOW,
            ..Stats::default()
        }
    }

    fn keys(s: &UpstreamState<'_>) -> Vec<&'static str> {
        concerns(s, 10_000, 60_000)
            .iter()
            .map(Concern::key)
            .collect()
    }

    #[test]
    fn a_healthy_queue_has_nothing_to_say() {
        let c = counts(3, 2_000, 0);
        let w = [worker("a", 1_000, WorkerMode::Running)];
        let s = UpstreamState {
            upstream: "default",
            counts: &c,
            workers: &w,
            breaker: None,
            pause: None,
        };
        assert!(keys(&s).is_empty());
    }

    #[test]
    fn workers_past_their_heartbeats_count_as_none_and_nothing_polls() {
        let c = counts(4, 90_000, 0);
        let w = [worker("a", 30_000, WorkerMode::Running)];
        let s = UpstreamState {
            upstream: "default",
            counts: &c,
            workers: &w,
            breaker: None,
            pause: None,
        };
        let all = concerns(&s, 10_000, 60_000);
        assert_eq!(
            all,
            [Concern::NoWorker {
                upstream: "default".into(),
                ready: 4
            }]
        );
        assert!(all[0].nothing_polls());
    }

    #[test]
    fn every_live_worker_quiet_is_nothing_claiming() {
        let c = counts(0, 0, 0);
        let w = [
            worker("a", 1_000, WorkerMode::Quiet),
            worker("b", 1_000, WorkerMode::Stopping),
            worker("c", 60_000, WorkerMode::Running),
        ];
        let s = UpstreamState {
            upstream: "reports",
            counts: &c,
            workers: &w,
            breaker: None,
            pause: None,
        };
        assert_eq!(keys(&s), ["all-quiet"]);
        assert!(concerns(&s, 10_000, 60_000)[0].nothing_polls());
    }

    #[test]
    fn an_old_ready_task_is_named_only_when_nothing_else_explains_it() {
        let c = counts(2, 61_000, 1);
        let w = [worker("a", 1_000, WorkerMode::Running)];
        let mut s = UpstreamState {
            upstream: "default",
            counts: &c,
            workers: &w,
            breaker: None,
            pause: None,
        };
        assert_eq!(keys(&s), ["ready-waiting", "stuck"]);
        let pause = PauseInfo {
            at_ms: NOW - 5_000,
            who: "admin".into(),
        };
        s.pause = Some(&pause);
        assert_eq!(keys(&s), ["paused", "stuck"]);
        let young = counts(2, 59_000, 0);
        s.counts = &young;
        s.pause = None;
        assert!(keys(&s).is_empty());
    }

    #[test]
    fn rank_puts_what_stops_all_work_first() {
        let mut all = [
            Concern::StuckLeases {
                upstream: "a".into(),
                stuck: 1,
            },
            Concern::RedisUnreachable,
            Concern::BreakerOpen {
                upstream: "a".into(),
                breaker: BreakerInfo {
                    state: crate::queue_state::BreakerState::Open,
                    since_ms: 0,
                    until_ms: 0,
                    reason: "HTTP 503".into(),
                    by: "auto".into(),
                    probe: None,
                },
            },
            Concern::NoWorker {
                upstream: "b".into(),
                ready: 0,
            },
        ];
        all.sort_by_key(Concern::rank);
        let keys: Vec<_> = all.iter().map(Concern::key).collect();
        assert_eq!(keys, ["redis", "no-worker", "breaker", "stuck"]);
    }
}
