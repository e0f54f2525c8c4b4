//! The checks after a chaos run: every accepted query final, read through the public API;
//! dead ones by reason; "completed twice" only within a task's lease losses; and per kill,
//! when the killed worker's tasks were reaped and claimed again (from the task histories,
//! stamped by Redis `TIME`).

use std::{
    collections::{BTreeMap, HashMap},
    time::{Duration, Instant},
};

use futures::{stream, StreamExt};
use redis::aio::ConnectionManager;
use serde::Deserialize;

use super::schedule::{Accepted, SubmitStats};
use super::{View, PARTITIONS};

/// The queue name: the default, so the keys are `{repoll}:...` as in ARCHITECTURE.md.
const QUEUE_NAME: &str = "repoll";

/// Key `kind` (`t` record, `r` result, `h` history) of task `id`: under `{repoll}`, or its
/// partition's tag in a partitioned queue.
pub(super) fn task_key(kind: &str, id: &str) -> String {
    let p = PARTITIONS.get().copied().unwrap_or(1);
    format!(
        "{}:{kind}:{id}",
        queue::partition::task_tag(QUEUE_NAME, id, p)
    )
}

#[derive(Deserialize)]
pub(super) struct SimStats {
    pub(super) calls: u64,
    pub(super) keys: BTreeMap<String, KeyStats>,
}

#[derive(Deserialize, Default)]
pub(super) struct KeyStats {
    pub(super) done: u64,
}

/// The simulator's jobs (`/_sim/jobs`): how many it made, and each one's query.
#[derive(Deserialize)]
pub(super) struct SimJobs {
    pub(super) created: u64,
    pub(super) submits: u64,
    pub(super) jobs: Vec<SimJob>,
}

#[derive(Deserialize)]
pub(super) struct SimJob {
    pub(super) id: String,
    pub(super) key: String,
}

impl SimStats {
    /// These counts with each job's line (keyed by its id) counted under its query instead.
    pub(super) fn by_query_of(self, jobs: &SimJobs) -> SimStats {
        let query_of: HashMap<&str, &str> = jobs
            .jobs
            .iter()
            .map(|j| (j.id.as_str(), j.key.as_str()))
            .collect();
        let mut keys: BTreeMap<String, KeyStats> = BTreeMap::new();
        for (key, ks) in self.keys {
            let key = query_of.get(key.as_str()).map_or(key, |q| q.to_string());
            keys.entry(key).or_default().done += ks.done;
        }
        SimStats {
            calls: self.calls,
            keys,
        }
    }
}

/// Jobs paid for twice: a query with more jobs than its task had lives (a new life — a re-run
/// after death — submits a new job; a worker killed between the submit and the store must
/// not, with the idempotency key).
#[derive(Debug, Default)]
pub(super) struct JobsPaid {
    pub(super) created: u64,
    pub(super) submits: u64,
    pub(super) queries: usize,
    /// Jobs beyond the first of a query, each within its task's lives.
    pub(super) new_lives: u64,
    pub(super) unexcused: Vec<String>,
}

pub(super) async fn sim_jobs(http: &reqwest::Client, sim_url: &str) -> Result<SimJobs, String> {
    http.get(format!("{sim_url}/_sim/jobs"))
        .send()
        .await
        .map_err(|e| format!("sim jobs: {e}"))?
        .json()
        .await
        .map_err(|e| format!("sim jobs: {e}"))
}

pub(super) fn jobs_paid(
    jobs: &SimJobs,
    histories: &Histories,
    by_query: &HashMap<String, String>,
) -> JobsPaid {
    let mut per_query: BTreeMap<&str, u64> = BTreeMap::new();
    for j in &jobs.jobs {
        *per_query.entry(j.key.as_str()).or_default() += 1;
    }
    let mut paid = JobsPaid {
        created: jobs.created,
        submits: jobs.submits,
        queries: per_query.len(),
        ..JobsPaid::default()
    };
    for (query, n) in per_query {
        let lives = by_query.get(query).map_or(1, |id| histories.lives(id));
        if n <= lives {
            paid.new_lives += n - 1;
        } else {
            paid.unexcused.push(format!(
                "{query}: {n} jobs for {lives} life/lives of its task"
            ));
        }
    }
    paid
}

/// What the task histories say about one kill (see [`Histories::recovery`]).
#[derive(Debug, Default)]
pub(super) struct Recovery {
    /// Tasks the worker held when it died: their lease expired from it after the kill.
    pub(super) held: usize,
    /// Kill → the last of them reaped.
    pub(super) reaped_ms: Option<i64>,
    /// Kill → the last of them claimed again or dead; None when one never was.
    pub(super) recovered_ms: Option<i64>,
}

/// Every accepted id once, with the id of each query; a query accepted under two ids counts
/// as an `id_mismatch` (it would break joining).
pub(super) fn unique_ids(
    accepted: &[Accepted],
    stats: &mut SubmitStats,
) -> (HashMap<String, String>, Vec<String>) {
    let mut by_query: HashMap<String, String> = HashMap::new();
    let mut ids: Vec<String> = Vec::new();
    for a in accepted {
        match by_query.get(&a.query) {
            Some(id) if *id != a.id => stats.id_mismatch += 1,
            Some(_) => {}
            None => {
                by_query.insert(a.query.clone(), a.id.clone());
                ids.push(a.id.clone());
            }
        }
    }
    (by_query, ids)
}

/// Waits (up to `drain`) until every id is done or dead; returns how long that took.
pub(super) async fn wait_until_final(
    con: &mut ConnectionManager,
    ids: &[String],
    drain: Duration,
) -> Duration {
    let drain_started = Instant::now();
    let mut pending: Vec<String> = ids.to_vec();
    while !pending.is_empty() && drain_started.elapsed() < drain {
        match unfinished(con, &pending).await {
            Ok(left) => pending = left,
            Err(e) => eprintln!("chaos: reading states: {e}"),
        }
        if pending.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    drain_started.elapsed()
}

/// The verdict on every accepted id, as the public API tells it.
pub(super) struct Finals {
    pub(super) done: u64,
    /// Ids neither done nor dead with a record: the failures of the run.
    pub(super) lost: Vec<String>,
    pub(super) dead: usize,
    /// Dead tasks by their recorded reason.
    pub(super) dead_by: BTreeMap<String, u64>,
}

/// Reads every id through the API (16 at once) and sorts them into done, dead and lost.
pub(super) async fn read_finals(
    http: &reqwest::Client,
    base: &str,
    con: &mut ConnectionManager,
    ids: &[String],
) -> Finals {
    let finals: Vec<(String, Result<View, String>)> = stream::iter(ids.to_vec())
        .map(|id| {
            let http = http.clone();
            let base = base.to_string();
            async move {
                let r = read_view(&http, &base, &id).await;
                (id, r)
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let mut done = 0u64;
    let mut lost: Vec<String> = Vec::new();
    let mut dead_ids: Vec<(String, Option<String>)> = Vec::new();
    for (id, r) in finals {
        match r {
            Ok(v) if v.id == id && v.status == "done" => done += 1,
            // A record must exist: "failed" with nothing but history left means it vanished.
            Ok(v) if v.status == "failed" && !v.query.is_empty() => dead_ids.push((id, v.error)),
            Ok(v) => lost.push(format!("{id}: {} {:?}", v.status, v.error)),
            Err(e) => lost.push(format!("{id}: {e}")),
        }
    }
    let mut dead_by: BTreeMap<String, u64> = BTreeMap::new();
    for (id, error) in &dead_ids {
        let reason: Option<String> = redis::cmd("HGET")
            .arg(task_key("t", id))
            .arg("dr")
            .query_async(con)
            .await
            .ok()
            .flatten();
        let reason = reason.unwrap_or_else(|| format!("? ({})", error.as_deref().unwrap_or("")));
        *dead_by.entry(reason).or_default() += 1;
    }
    Finals {
        done,
        lost,
        dead: dead_ids.len(),
        dead_by,
    }
}

/// Keys the upstream answered `done` more than once, against each task's lease losses.
#[derive(Default)]
pub(super) struct Twice {
    pub(super) twice: u64,
    /// Within the task's lease losses.
    pub(super) excused: u64,
    /// Beyond them (or no such query): the failures of the run.
    pub(super) unexcused: Vec<String>,
    pub(super) unknown_keys: u64,
}

/// Completed twice: the simulator's per-key done counts against each task's lease losses.
pub(super) fn completed_twice(
    sim_stats: &SimStats,
    histories: &Histories,
    by_query: &HashMap<String, String>,
) -> Twice {
    let mut t = Twice::default();
    for (key, ks) in &sim_stats.keys {
        if ks.done <= 1 {
            continue;
        }
        t.twice += 1;
        let Some(id) = by_query.get(key) else {
            t.unknown_keys += 1;
            t.unexcused
                .push(format!("{key}: done {} (no such query)", ks.done));
            continue;
        };
        let losses = histories.lease_losses(id);
        if ks.done <= 1 + losses {
            t.excused += 1;
        } else {
            t.unexcused.push(format!(
                "{key} ({id}): done {} times, {losses} lease losses",
                ks.done
            ));
        }
    }
    t
}

/// The simulator's counts: calls, and per key how often it answered `done`.
pub(super) async fn sim_stats(http: &reqwest::Client, sim_url: &str) -> Result<SimStats, String> {
    http.get(format!("{sim_url}/_sim/stats"))
        .send()
        .await
        .map_err(|e| format!("sim stats: {e}"))?
        .json()
        .await
        .map_err(|e| format!("sim stats: {e}"))
}

pub(super) async fn read_view(
    http: &reqwest::Client,
    base: &str,
    id: &str,
) -> Result<View, String> {
    for _ in 0..5 {
        match http.get(format!("{base}/api/v1/queries/{id}")).send().await {
            Ok(r) if r.status().is_success() => return r.json().await.map_err(|e| e.to_string()),
            Ok(r) if r.status().as_u16() == 404 => return Err("404 unknown id".into()),
            Ok(_) | Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
    Err("no answer".into())
}

/// The ids among `ids` that are neither done (result stored) nor dead.
pub(super) async fn unfinished(
    con: &mut ConnectionManager,
    ids: &[String],
) -> Result<Vec<String>, String> {
    let mut left = Vec::new();
    for chunk in ids.chunks(500) {
        let mut p = redis::pipe();
        for id in chunk {
            p.cmd("EXISTS").arg(task_key("r", id));
            p.cmd("HGET").arg(task_key("t", id)).arg("s");
        }
        let answers: Vec<redis::Value> = p.query_async(con).await.map_err(|e| e.to_string())?;
        for (i, id) in chunk.iter().enumerate() {
            let result = matches!(answers.get(2 * i), Some(redis::Value::Int(1)));
            let state: Option<String> = answers
                .get(2 * i + 1)
                .and_then(|v| redis::from_redis_value(v.clone()).ok());
            if !(result || state.as_deref() == Some("dead")) {
                left.push(id.clone());
            }
        }
    }
    Ok(left)
}

/// One history entry, `at|kind|detail`.
pub(super) struct Entry {
    pub(super) at: i64,
    pub(super) kind: String,
    pub(super) detail: String,
}

/// Every task's history (`{q}:h:<id>`, kept for the result TTL after the task finished),
/// oldest entry first.
///
/// Recovery is read from here rather than by watching leases live: a SIGKILLed worker never
/// ends a lease itself, so exactly the tasks it held when it died carry a `lease_expired
/// from <worker>` entry stamped after the kill, followed by the next `claimed` (or `dead`).
/// That needs no snapshot racing the reaper, and works through a Redis stall at kill time.
pub(super) struct Histories(HashMap<String, Vec<Entry>>);

impl Histories {
    pub(super) async fn read(
        con: &mut ConnectionManager,
        ids: &[String],
    ) -> Result<Histories, String> {
        let mut all = HashMap::new();
        for chunk in ids.chunks(500) {
            let mut p = redis::pipe();
            for id in chunk {
                p.cmd("LRANGE").arg(task_key("h", id)).arg(0).arg(-1);
            }
            let lists: Vec<Vec<String>> = p
                .query_async(con)
                .await
                .map_err(|e| format!("reading histories: {e}"))?;
            for (id, list) in chunk.iter().zip(lists) {
                all.insert(id.clone(), parse_history(&list));
            }
        }
        Ok(Histories(all))
    }

    /// How many lives the task had: its first, and one per re-run after death.
    pub(super) fn lives(&self, id: &str) -> u64 {
        1 + self.0.get(id).map_or(0, |h| {
            h.iter()
                .filter(|e| e.kind == "enqueued" && e.detail.starts_with("re-enqueued"))
                .count() as u64
        })
    }

    pub(super) fn lease_losses(&self, id: &str) -> u64 {
        self.0.get(id).map_or(0, |h| {
            h.iter().filter(|e| e.kind == "lease_expired").count() as u64
        })
    }

    /// The tasks `worker` held when it was killed at `kill_ms`, and when they came back.
    pub(super) fn recovery(&self, worker: &str, kill_ms: i64) -> Recovery {
        let from = format!("from {worker} ");
        let mut r = Recovery::default();
        let mut all_back = true;
        let mut latest_back = 0i64;
        let mut latest_reap = 0i64;
        for h in self.0.values() {
            for (i, e) in h.iter().enumerate() {
                if e.kind != "lease_expired" || e.at < kill_ms || !e.detail.starts_with(&from) {
                    continue;
                }
                r.held += 1;
                latest_reap = latest_reap.max(e.at - kill_ms);
                match h[i + 1..]
                    .iter()
                    .find(|n| n.kind == "claimed" || n.kind == "dead")
                {
                    Some(n) => latest_back = latest_back.max(n.at - kill_ms),
                    None => all_back = false,
                }
            }
        }
        if r.held > 0 {
            r.reaped_ms = Some(latest_reap);
            r.recovered_ms = all_back.then_some(latest_back);
        }
        r
    }
}

/// A history list as stored (newest first, `at|kind|detail`) into entries, oldest first.
pub(super) fn parse_history(list: &[String]) -> Vec<Entry> {
    let mut entries: Vec<Entry> = list
        .iter()
        .filter_map(|e| {
            let mut parts = e.splitn(3, '|');
            Some(Entry {
                at: parts.next()?.parse().ok()?,
                kind: parts.next()?.to_string(),
                detail: parts.next().unwrap_or_default().to_string(),
            })
        })
        .collect();
    entries.reverse();
    entries
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history(newest_first: &[&str]) -> Vec<Entry> {
        parse_history(
            &newest_first
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>(),
        )
    }

    #[test]
    fn recovery_is_the_next_claim_after_the_expiry_from_the_killed_worker() {
        let mut h = HashMap::new();
        // Held by w0-g1 at its kill (t=1000), reaped at 3900, claimed again at 4000.
        h.insert(
            "a".to_string(),
            history(&[
                "4100|completed|",
                "4000|claimed|by w1-g1 token 9",
                "3900|lease_expired|from w0-g1 token 7",
                "900|claimed|by w0-g1 token 7",
                "800|enqueued|",
            ]),
        );
        // Expired from w0-g1 *before* the kill (a stall): not the kill's doing.
        h.insert(
            "b".to_string(),
            history(&[
                "700|claimed|by w2-g1 token 5",
                "600|lease_expired|from w0-g1 token 3",
                "100|claimed|by w0-g1 token 3",
            ]),
        );
        // Held by w0-g1 at its kill and dead as poison in the same reap.
        h.insert(
            "c".to_string(),
            history(&[
                "4500|dead|poison: 3 lease losses",
                "4500|lease_expired|from w0-g1 token 8",
                "950|claimed|by w0-g1 token 8",
            ]),
        );
        // Same worker name as a prefix of another: w0-g10 must not count for w0-g1.
        h.insert(
            "d".to_string(),
            history(&["5000|lease_expired|from w0-g10 token 4"]),
        );
        let hs = Histories(h);
        let r = hs.recovery("w0-g1", 1000);
        assert_eq!(r.held, 2);
        assert_eq!(r.reaped_ms, Some(3500));
        assert_eq!(r.recovered_ms, Some(3500));
        assert_eq!(hs.lease_losses("b"), 1);
        assert_eq!(hs.recovery("w9", 0).held, 0);
    }

    #[test]
    fn a_held_task_never_claimed_again_is_not_recovered() {
        let mut h = HashMap::new();
        h.insert(
            "a".to_string(),
            history(&["3900|lease_expired|from w0-g1 token 7"]),
        );
        let r = Histories(h).recovery("w0-g1", 1000);
        assert_eq!((r.held, r.recovered_ms), (1, None));
    }
}
