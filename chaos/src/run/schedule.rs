//! What happens during a chaos run, and when: the query mix, the fault schedule (a worker
//! SIGKILLed every 2 s, one Redis restart, one stall), the supervisor that replaces workers
//! that exit by themselves, and the submitter that sends the queries as a client would.

use std::{
    collections::BTreeMap,
    sync::Arc,
    time::{Duration, Instant},
};

use rand::{rngs::StdRng, Rng, SeedableRng};
use tokio::{
    sync::{Mutex, Semaphore},
    task::JoinHandle,
};

use super::{epoch_ms, stack::Workers, View, KILL_EVERY, WORKERS};

/// When the faults happen, relative to the first submit.
pub(super) struct Schedule {
    /// Workers are killed until then.
    pub(super) kill_until: Duration,
    pub(super) restart_at: Duration,
    pub(super) stall_at: Duration,
}

impl Schedule {
    /// `--short`: fixed times within a 20 s run; else spread over the submitting time.
    pub(super) fn new(n: usize, rate: f64, short: bool) -> Schedule {
        let submit_for = Duration::from_secs_f64(n as f64 / rate);
        let kill_until = if short {
            Duration::from_secs(20)
        } else {
            submit_for
        };
        let restart_at = if short {
            Duration::from_secs(8)
        } else {
            submit_for.mul_f64(0.4)
        };
        let stall_at = if short {
            Duration::from_secs(14)
        } else {
            submit_for.mul_f64(0.7)
        };
        Schedule {
            kill_until,
            restart_at,
            stall_at,
        }
    }
}

/// The queries of a run, in order.
pub(super) struct QueryPlan {
    pub(super) queries: Vec<String>,
    /// Distinct queries among them.
    pub(super) distinct: usize,
    /// Distinct queries the simulator answers "failed".
    pub(super) failing: usize,
}

/// The query mix: new queries, `repeat` of them repeats of earlier ones, `failing` of the new
/// ones answered "failed" by the simulator (override in the key itself). Seeded: a run is
/// repeatable.
pub(super) fn query_plan(n: usize, seed: u64, repeat: f64, failing_rate: f64) -> QueryPlan {
    let mut rng = StdRng::seed_from_u64(seed);
    let tag = format!("{:06x}", seed & 0xff_ffff);
    let mut distinct: Vec<String> = Vec::new();
    let mut failing = 0usize;
    let queries: Vec<String> = (0..n)
        .map(|_| {
            if !distinct.is_empty() && rng.gen_bool(repeat.clamp(0.0, 1.0)) {
                return distinct[rng.gen_range(0..distinct.len())].clone();
            }
            let mut q = format!("chaos-{tag}-{}", distinct.len());
            if rng.gen_bool(failing_rate.clamp(0.0, 1.0)) {
                q.push_str(" status=failed");
                failing += 1;
            }
            distinct.push(q.clone());
            q
        })
        .collect();
    QueryPlan {
        queries,
        distinct: distinct.len(),
        failing,
    }
}

/// Replaces workers that exit by themselves, every 200 ms, until aborted.
pub(super) fn spawn_supervisor(workers: Arc<Mutex<Workers>>) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if let Err(e) = workers.lock().await.respawn_exited() {
                eprintln!("chaos: {e}");
            }
        }
    })
}

/// SIGKILLs a worker every [`KILL_EVERY`] (round robin over the slots) until `kill_until`,
/// replacing each at once, and records every kill.
pub(super) fn spawn_killer(
    workers: Arc<Mutex<Workers>>,
    kills: Arc<Mutex<Vec<Kill>>>,
    t0: Instant,
    kill_until: Duration,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut k = 0usize;
        loop {
            let at = KILL_EVERY * (k as u32 + 1);
            if at > kill_until {
                break;
            }
            tokio::time::sleep_until((t0 + at).into()).await;
            let slot = k % WORKERS;
            k += 1;
            let victim = workers.lock().await.slots[slot].take();
            let Some((proc, id)) = victim else { continue };
            let at_ms = epoch_ms();
            let at = t0.elapsed();
            proc.kill().await;
            if let Err(e) = workers.lock().await.spawn(slot) {
                eprintln!("chaos: restart after kill: {e}");
            }
            kills.lock().await.push(Kill {
                n: k,
                at,
                at_ms,
                worker: id,
            });
        }
    })
}

/// Where the submitter puts what it learns: per query its acceptance, and the counts.
#[derive(Clone, Default)]
pub(super) struct Submissions {
    pub(super) accepted: Arc<Mutex<Vec<Option<Accepted>>>>,
    pub(super) stats: Arc<Mutex<SubmitStats>>,
}

/// Submits `queries` at `rate` per second, at most `concurrency` at once, each retried as a
/// client would (see [`submit`]).
pub(super) fn spawn_submitter(
    http: reqwest::Client,
    base: String,
    queries: Vec<String>,
    rate: f64,
    concurrency: usize,
    out: Submissions,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let sem = Arc::new(Semaphore::new(concurrency));
        let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut tasks = Vec::with_capacity(queries.len());
        for (i, q) in queries.into_iter().enumerate() {
            tick.tick().await;
            let Ok(permit) = sem.clone().acquire_owned().await else {
                break;
            };
            let http = http.clone();
            let base = base.clone();
            let out = out.clone();
            tasks.push(tokio::spawn(async move {
                let r = submit(&http, &base, &q, &out.stats).await;
                drop(permit);
                let mut s = out.stats.lock().await;
                match r {
                    Some(a) => {
                        s.accepted += 1;
                        out.accepted.lock().await[i] = Some(a);
                    }
                    None => s.rejected += 1,
                }
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
    })
}

/// What the API said when it accepted a submit.
#[derive(Debug, Clone)]
pub(super) struct Accepted {
    pub(super) id: String,
    /// The normalised query: the simulator's key.
    pub(super) query: String,
}

#[derive(Default)]
pub(super) struct SubmitStats {
    pub(super) accepted: u64,
    pub(super) rejected: u64,
    /// Answers that were retried, by kind (429, 503, transport error, ...).
    pub(super) retried: BTreeMap<String, u64>,
    /// Same query, different id: would break joining.
    pub(super) id_mismatch: u64,
}

/// One worker kill.
#[derive(Debug, Clone)]
pub(super) struct Kill {
    pub(super) n: usize,
    /// Since the first submit.
    pub(super) at: Duration,
    /// Wall clock in ms since the epoch: the same clock as Redis `TIME` on this host, which
    /// stamps the task histories the recovery is read from.
    pub(super) at_ms: i64,
    pub(super) worker: String,
}

/// Submits one query as a client would: retries 429 (after its Retry-After), 5xx and transport
/// errors for up to 60 s. None when it was never accepted.
pub(super) async fn submit(
    http: &reqwest::Client,
    base: &str,
    query: &str,
    stats: &Mutex<SubmitStats>,
) -> Option<Accepted> {
    let started = Instant::now();
    let mut backoff = Duration::from_millis(100);
    // Two queries in three ask as one of four tenants (chosen by the text, so a duplicate asks
    // as the same one), the rest as nobody: the fair-share path (the fair zset, promotions of
    // polls, lease counts) goes through the same kills and restarts as the untenanted one.
    let tenant = match query.bytes().map(u64::from).sum::<u64>() % 6 {
        0 | 1 => None,
        n => Some(format!("chaos-t{n}")),
    };
    let body = match &tenant {
        Some(t) => serde_json::json!({ "query": query, "tenant": t }),
        None => serde_json::json!({ "query": query }),
    };
    loop {
        let r = http
            .post(format!("{base}/api/v1/queries"))
            .json(&body)
            .send()
            .await;
        let (kind, wait) = match r {
            Ok(r) if r.status().is_success() => match r.json::<View>().await {
                Ok(v) => {
                    return Some(Accepted {
                        id: v.id,
                        query: v.query,
                    })
                }
                Err(_) => ("unreadable 2xx".to_string(), backoff),
            },
            Ok(r) if r.status().as_u16() == 429 || r.status().is_server_error() => {
                let after = r
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<u64>().ok())
                    .map(Duration::from_secs);
                (r.status().as_u16().to_string(), after.unwrap_or(backoff))
            }
            Ok(r) => {
                eprintln!("chaos: {query:?} refused: {}", r.status());
                return None;
            }
            Err(e) if e.is_timeout() => ("timeout".to_string(), backoff),
            Err(_) => ("connection".to_string(), backoff),
        };
        *stats.lock().await.retried.entry(kind).or_default() += 1;
        if started.elapsed() > Duration::from_secs(60) {
            return None;
        }
        tokio::time::sleep(wait).await;
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}
