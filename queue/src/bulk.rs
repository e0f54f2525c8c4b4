//! Bulk actions by filter: pick the tasks of one state whose last error, query text and age
//! match, count them, then retry / cancel / purge them chunk by chunk in the background, with
//! progress in Redis and a way to stop.
//!
//! No new script: selection is plain reads (pages of the state's zset or lists, then one
//! pipelined HMGET of the short record fields per page), and each chunk goes through the
//! per-task admin scripts (retry.lua, cancel.lua, purge.lua), which re-check every task's
//! state, so a task that moved on since it was selected is left alone. The filter's text
//! parts are therefore evaluated once, when the run starts (a snapshot of ids, at most the
//! per-action limit); the state is re-checked per task when it is acted on.
//!
//! One run at a time per queue: `{q}:bulk:lock` (SET NX with a TTL renewed every chunk, so a
//! web process that dies mid-run frees it within [`LOCK_MS`]); `{q}:bulk` holds the current or
//! last run's progress (a hash, kept [`KEEP_MS`] after the end) and its stop request, so any
//! web process can show the progress bar and stop the run.

use std::future::Future;

use redis::AsyncCommands;
use serde::{Deserialize, Serialize};

use crate::decode::{self, array};
use crate::error::Result;
use crate::keys::Keys;
use crate::model::TaskId;
use crate::queue::Queue;
use crate::slot::Slot;

/// Tasks one bulk action may touch unless configured otherwise (`REPOLL_BULK_LIMIT`).
pub const DEFAULT_BULK_LIMIT: u64 = 10_000;
/// Tasks per chunk: one retry/purge script call (or this many cancel calls) between two
/// progress updates and stop checks.
pub const BULK_CHUNK: usize = 100;
/// Candidates (members of the state's set) a selection looks at, at most. Past it the count is
/// a lower bound and says so ([`BulkSelection::complete`] is false).
pub const BULK_SCAN_MAX: u64 = 200_000;
/// Members read per page while selecting.
const SCAN_PAGE: usize = 500;
/// The run lock's time to live, renewed with every chunk.
pub const LOCK_MS: u64 = 60_000;
/// How long the last run's progress stays readable after it ended.
pub const KEEP_MS: u64 = 24 * 3600 * 1000;

/// The state a bulk action selects from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BulkState {
    #[default]
    Dead,
    /// Due later: waiting for the next poll or a retry (the due zset).
    Waiting,
    /// In a ready list.
    Ready,
    Leased,
}

impl BulkState {
    pub const ALL: [BulkState; 4] = [
        BulkState::Dead,
        BulkState::Waiting,
        BulkState::Ready,
        BulkState::Leased,
    ];

    pub fn parse(s: &str) -> Option<BulkState> {
        BulkState::ALL.into_iter().find(|x| x.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            BulkState::Dead => "dead",
            BulkState::Waiting => "waiting",
            BulkState::Ready => "ready",
            BulkState::Leased => "leased",
        }
    }

    /// The record's `s` field of a task in this state.
    fn record_state(self) -> &'static str {
        match self {
            BulkState::Dead => "dead",
            BulkState::Waiting | BulkState::Ready => "due",
            BulkState::Leased => "leased",
        }
    }
}

/// What a bulk run does to each selected task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BulkAction {
    /// Dead: run again (attempts reset). Waiting: make due now.
    Retry,
    /// Remove a live task for good (its history stays for the result TTL).
    Cancel,
    /// Remove a dead or waiting task with its history.
    Purge,
}

impl BulkAction {
    pub const ALL: [BulkAction; 3] = [BulkAction::Retry, BulkAction::Cancel, BulkAction::Purge];

    pub fn parse(s: &str) -> Option<BulkAction> {
        BulkAction::ALL.into_iter().find(|x| x.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            BulkAction::Retry => "retry",
            BulkAction::Cancel => "cancel",
            BulkAction::Purge => "purge",
        }
    }

    /// Whether the action means anything for tasks in `state` (retry: dead or waiting; purge:
    /// dead or waiting; cancel: every live state).
    pub fn applies_to(self, state: BulkState) -> bool {
        match self {
            BulkAction::Retry | BulkAction::Purge => {
                matches!(state, BulkState::Dead | BulkState::Waiting)
            }
            BulkAction::Cancel => true,
        }
    }
}

/// Which time of a task the window looks at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TimeField {
    /// The last state change (for a dead task: when it died).
    #[default]
    Updated,
    Created,
}

/// Which tasks a bulk action selects. Text matches are case-insensitive substrings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkFilter {
    pub state: BulkState,
    /// Part of the last error's text.
    pub error: Option<String>,
    /// Part of the query text.
    pub query: Option<String>,
    /// Only tasks whose `time_field` lies within this many ms before now.
    pub within_ms: Option<u64>,
    pub time_field: TimeField,
    /// Exactly this tenant (who asked first); `Some("")`: tasks of no tenant.
    #[serde(default)]
    pub tenant: Option<String>,
}

impl BulkFilter {
    /// The filter in words, for the audit log: `dead, error contains "HTTP 503", updated in
    /// the last 2 h`.
    pub fn describe(&self) -> String {
        let mut parts = vec![self.state.as_str().to_string()];
        if let Some(e) = self.error.as_deref().filter(|s| !s.is_empty()) {
            parts.push(format!("error contains {e:?}"));
        }
        if let Some(q) = self.query.as_deref().filter(|s| !s.is_empty()) {
            parts.push(format!("query contains {q:?}"));
        }
        match self.tenant.as_deref() {
            Some("") => parts.push("no tenant".to_string()),
            Some(t) => parts.push(format!("tenant {t:?}")),
            None => {}
        }
        if let Some(ms) = self.within_ms {
            let field = match self.time_field {
                TimeField::Updated => "updated",
                TimeField::Created => "created",
            };
            let span = if ms % 3_600_000 == 0 {
                format!("{} h", ms / 3_600_000)
            } else if ms % 60_000 == 0 {
                format!("{} min", ms / 60_000)
            } else {
                format!("{ms} ms")
            };
            parts.push(format!("{field} in the last {span}"));
        }
        parts.join(", ")
    }

    /// Whether a record (its `q`, `e`, `c`, `u`, `s`, `tn` fields) matches; `cutoff` = now −
    /// window.
    fn matches(&self, f: &[Option<String>], cutoff: Option<i64>) -> bool {
        if let Some(t) = self.tenant.as_deref() {
            if f.get(5).cloned().flatten().unwrap_or_default() != t {
                return false;
            }
        }
        let contains = |field: &Option<String>, needle: &Option<String>| match needle
            .as_deref()
            .filter(|n| !n.is_empty())
        {
            None => true,
            Some(n) => field
                .as_deref()
                .is_some_and(|v| v.to_lowercase().contains(&n.to_lowercase())),
        };
        if !contains(&f[0], &self.query) || !contains(&f[1], &self.error) {
            return false;
        }
        match cutoff {
            None => true,
            Some(cutoff) => {
                let created = f[2].as_deref().and_then(|s| s.parse::<i64>().ok());
                let at = match self.time_field {
                    TimeField::Created => created,
                    // `u` omitted means "never changed since created".
                    TimeField::Updated => f[3]
                        .as_deref()
                        .and_then(|s| s.parse::<i64>().ok())
                        .or(created),
                };
                at.is_some_and(|at| at >= cutoff)
            }
        }
    }
}

/// What a filter selects right now.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkSelection {
    /// The matching ids, at most the `keep` asked for, in the state's order.
    pub ids: Vec<TaskId>,
    /// Matching tasks (all of them, also past `keep`).
    pub matched: u64,
    /// Members of the state's set looked at.
    pub scanned: u64,
    /// Every member was looked at (false past [`BULK_SCAN_MAX`]: `matched` is a lower bound).
    pub complete: bool,
}

/// A run's progress, as stored in `{q}:bulk` and shown by the dashboard.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkProgress {
    /// Random id of the run.
    pub run: String,
    pub action: String,
    /// The filter in words ([`BulkFilter::describe`]).
    pub filter: String,
    pub who: String,
    /// Tasks selected when the run started.
    pub total: u64,
    /// Tasks gone through so far.
    pub done: u64,
    /// Of those, tasks the action changed (the others had moved on meanwhile).
    pub changed: u64,
    /// `running`, `stopped`, `finished` or `failed`.
    pub state: String,
    pub started_ms: i64,
    pub ended_ms: Option<i64>,
    pub stop_requested: bool,
}

impl BulkProgress {
    pub fn running(&self) -> bool {
        self.state == "running"
    }

    /// Share gone through, 0..=100.
    pub fn percent(&self) -> f64 {
        if self.total == 0 {
            100.0
        } else {
            (self.done as f64 * 100.0 / self.total as f64).min(100.0)
        }
    }
}

/// Why [`Queue::bulk_begin`] did not start a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BulkRefused {
    /// The action does not apply to the filter's state (e.g. retry leased tasks).
    NotApplicable,
    /// Nothing matches.
    Nothing,
    /// More tasks match than one action may touch.
    OverLimit { matched: u64, limit: u64 },
    /// More tasks match than the count the operator confirmed.
    CountGrew { confirmed: u64, matched: u64 },
    /// Another run is in progress.
    Busy(Box<BulkProgress>),
}

/// A started run: the selected ids, acted on by [`BulkJob::run`].
#[derive(Debug)]
pub struct BulkJob {
    queue: Queue,
    action: BulkAction,
    state: BulkState,
    ids: Vec<TaskId>,
    progress: BulkProgress,
}

impl Queue {
    fn bulk_key(&self) -> String {
        format!("{}bulk", self.keys().prefix)
    }

    fn bulk_lock_key(&self) -> String {
        format!("{}bulk:lock", self.keys().prefix)
    }

    /// The tasks `filter` selects: counts all matches (up to [`BULK_SCAN_MAX`] candidates
    /// looked at) and keeps the first `keep` ids. Plain reads, page by page.
    pub async fn bulk_select(&self, filter: &BulkFilter, keep: usize) -> Result<BulkSelection> {
        self.select_bounded(filter, keep, BULK_SCAN_MAX).await
    }

    /// [`Queue::bulk_select`] looking at no more than `max_scan` members of the state's set
    /// (the dashboard's search answers within its time budget with a smaller bound).
    pub async fn select_bounded(
        &self,
        filter: &BulkFilter,
        keep: usize,
        max_scan: u64,
    ) -> Result<BulkSelection> {
        // Slot after slot, sharing the one scan budget.
        let mut out = BulkSelection {
            complete: true,
            ..BulkSelection::default()
        };
        for slot in self.slots() {
            let left = max_scan.saturating_sub(out.scanned);
            if left == 0 {
                out.complete = false;
                break;
            }
            let s = slot
                .select_bounded(filter, keep.saturating_sub(out.ids.len()), left)
                .await?;
            out.scanned += s.scanned;
            out.matched += s.matched;
            out.ids.extend(s.ids);
            out.complete &= s.complete;
        }
        Ok(out)
    }
}

impl Slot {
    /// [`Queue::select_bounded`] in this slot: its state's set(s) page by page.
    async fn select_bounded(
        &self,
        filter: &BulkFilter,
        keep: usize,
        max_scan: u64,
    ) -> Result<BulkSelection> {
        let k = self.keys();
        let now = self.now_ms().await?;
        let cutoff = filter
            .within_ms
            .map(|w| now.saturating_sub(i64::try_from(w).unwrap_or(i64::MAX)));
        // (key, is a list): ready work also waits in the fair zset, as "<tenant>|<id>".
        let sources: Vec<(&String, bool)> = match filter.state {
            BulkState::Dead => vec![(&k.dead, false)],
            BulkState::Waiting => vec![(&k.due, false)],
            BulkState::Leased => vec![(&k.lease, false)],
            BulkState::Ready => vec![(&k.fair, false), (&k.ready, true), (&k.ready_bg, true)],
        };
        let mut out = BulkSelection {
            complete: true,
            ..BulkSelection::default()
        };
        let mut c = self.conn.clone();
        'sources: for (src, lists) in sources {
            let mut offset = 0usize;
            loop {
                if out.scanned >= max_scan {
                    out.complete = false;
                    break 'sources;
                }
                let stop = (offset + SCAN_PAGE - 1) as isize;
                let v: redis::Value = if lists {
                    c.lrange(src, offset as isize, stop).await?
                } else {
                    c.zrange(src, offset as isize, stop).await?
                };
                let ids = array(v)?
                    .iter()
                    .map(|m| {
                        let m = decode::string(m)?;
                        decode::parse_id(Keys::split_fair_member(&m).1)
                    })
                    .collect::<Result<Vec<_>>>()?;
                if ids.is_empty() {
                    break;
                }
                offset += ids.len();
                out.scanned += ids.len() as u64;
                let mut p = redis::pipe();
                for id in &ids {
                    p.cmd("HMGET")
                        .arg(k.task(id))
                        .arg("q")
                        .arg("e")
                        .arg("c")
                        .arg("u")
                        .arg("s")
                        .arg("tn");
                }
                let records: Vec<Vec<Option<String>>> = p.query_async(&mut c).await?;
                for (id, f) in ids.into_iter().zip(records) {
                    if f.len() < 5 || f[4].as_deref() != Some(filter.state.record_state()) {
                        continue;
                    }
                    if filter.matches(&f, cutoff) {
                        out.matched += 1;
                        if out.ids.len() < keep {
                            out.ids.push(id);
                        }
                    }
                }
            }
        }
        Ok(out)
    }
}

impl Queue {
    /// Starts a run of `action` on what `filter` selects, if at most `limit` tasks match (and,
    /// with `confirmed`, no more than the operator was shown), and no other run is going.
    /// The returned job does the work ([`BulkJob::run`]); its progress is readable at once.
    pub async fn bulk_begin(
        &self,
        action: BulkAction,
        filter: &BulkFilter,
        who: &str,
        limit: u64,
        confirmed: Option<u64>,
    ) -> Result<std::result::Result<BulkJob, BulkRefused>> {
        if !action.applies_to(filter.state) {
            return Ok(Err(BulkRefused::NotApplicable));
        }
        let keep = usize::try_from(limit).unwrap_or(usize::MAX);
        let sel = self.bulk_select(filter, keep).await?;
        if sel.matched > limit {
            return Ok(Err(BulkRefused::OverLimit {
                matched: sel.matched,
                limit,
            }));
        }
        if let Some(confirmed) = confirmed.filter(|c| sel.matched > *c) {
            return Ok(Err(BulkRefused::CountGrew {
                confirmed,
                matched: sel.matched,
            }));
        }
        if sel.ids.is_empty() {
            return Ok(Err(BulkRefused::Nothing));
        }
        let run = format!("{:016x}", rand_u64());
        let mut c = self.conn.clone();
        let locked: Option<String> = redis::cmd("SET")
            .arg(self.bulk_lock_key())
            .arg(&run)
            .arg("NX")
            .arg("PX")
            .arg(LOCK_MS)
            .query_async(&mut c)
            .await?;
        if locked.is_none() {
            let current = self.bulk_progress().await?.unwrap_or_default();
            return Ok(Err(BulkRefused::Busy(Box::new(current))));
        }
        let mut filter_text = filter.describe();
        if !sel.complete {
            filter_text.push_str(&format!(" (among the first {BULK_SCAN_MAX} looked at)"));
        }
        let progress = BulkProgress {
            run,
            action: action.as_str().into(),
            filter: filter_text,
            who: who.into(),
            total: sel.ids.len() as u64,
            done: 0,
            changed: 0,
            state: "running".into(),
            started_ms: self.now_ms().await?,
            ended_ms: None,
            stop_requested: false,
        };
        self.bulk_write(&progress, true).await?;
        Ok(Ok(BulkJob {
            queue: self.clone(),
            action,
            state: filter.state,
            ids: sel.ids,
            progress,
        }))
    }

    /// The current or last run's progress (kept [`KEEP_MS`] after it ended).
    pub async fn bulk_progress(&self) -> Result<Option<BulkProgress>> {
        let mut c = self.conn.clone();
        let h: std::collections::HashMap<String, String> = c.hgetall(self.bulk_key()).await?;
        if h.is_empty() {
            return Ok(None);
        }
        let num = |f: &str| h.get(f).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        let text = |f: &str| h.get(f).cloned().unwrap_or_default();
        Ok(Some(BulkProgress {
            run: text("run"),
            action: text("action"),
            filter: text("filter"),
            who: text("who"),
            total: num("total"),
            done: num("done"),
            changed: num("changed"),
            state: text("state"),
            started_ms: h.get("started").and_then(|v| v.parse().ok()).unwrap_or(0),
            ended_ms: h.get("ended").and_then(|v| v.parse().ok()),
            stop_requested: h.contains_key("stop"),
        }))
    }

    /// Asks the running run to stop after its current chunk; false when none is running.
    pub async fn bulk_stop(&self) -> Result<bool> {
        match self.bulk_progress().await? {
            Some(p) if p.running() => {
                let mut c = self.conn.clone();
                let _: () = c.hset(self.bulk_key(), "stop", "1").await?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn bulk_write(&self, p: &BulkProgress, fresh: bool) -> Result<()> {
        let key = self.bulk_key();
        let mut pipe = redis::pipe();
        if fresh {
            pipe.del(&key).ignore();
        }
        pipe.hset_multiple(
            &key,
            &[
                ("run", p.run.clone()),
                ("action", p.action.clone()),
                ("filter", p.filter.clone()),
                ("who", p.who.clone()),
                ("total", p.total.to_string()),
                ("done", p.done.to_string()),
                ("changed", p.changed.to_string()),
                ("state", p.state.clone()),
                ("started", p.started_ms.to_string()),
            ],
        )
        .ignore();
        if let Some(end) = p.ended_ms {
            pipe.hset(&key, "ended", end).ignore();
            pipe.pexpire(&key, KEEP_MS as i64).ignore();
        } else {
            pipe.persist(&key).ignore();
        }
        let mut c = self.conn.clone();
        pipe.query_async::<()>(&mut c).await?;
        Ok(())
    }

    /// Acts on one chunk; returns how many tasks changed.
    async fn bulk_chunk(
        &self,
        action: BulkAction,
        state: BulkState,
        ids: &[TaskId],
        who: &str,
    ) -> Result<u64> {
        match (action, state) {
            (BulkAction::Retry, BulkState::Dead) => self.retry_ids(ids, who, "dead").await,
            (BulkAction::Retry, _) => self.retry_ids(ids, who, "any").await,
            (BulkAction::Purge, BulkState::Dead) => self.purge_chunk("dead", ids, who).await,
            (BulkAction::Purge, _) => self.purge_chunk("queued", ids, who).await,
            (BulkAction::Cancel, _) => {
                // One script per task (cancel.lua), sent together on the multiplexed
                // connection.
                let done =
                    futures::future::join_all(ids.iter().map(|id| self.cancel(id, who))).await;
                let mut n = 0;
                for d in done {
                    n += u64::from(d?);
                }
                Ok(n)
            }
        }
    }
}

impl BulkJob {
    /// The run's progress as it started.
    pub fn progress(&self) -> &BulkProgress {
        &self.progress
    }

    /// Works through the selected ids chunk by chunk until done or stopped; returns the final
    /// progress (also stored). On a Redis error the run is marked `failed` (when Redis
    /// allows) and the error returned.
    pub async fn run(self) -> Result<BulkProgress> {
        self.run_with(|_| async {}).await
    }

    /// As [`BulkJob::run`], calling `after_chunk` with the progress after every chunk (tests
    /// use it to stop a run at a known point).
    pub async fn run_with<F, Fut>(mut self, mut after_chunk: F) -> Result<BulkProgress>
    where
        F: FnMut(BulkProgress) -> Fut,
        Fut: Future<Output = ()>,
    {
        let q = self.queue.clone();
        let result = self.work(&mut after_chunk).await;
        self.progress.ended_ms = Some(q.now_ms().await.unwrap_or_default());
        if let Err(e) = &result {
            tracing::error!(error = %e, run = %self.progress.run, "bulk run failed");
            self.progress.state = "failed".into();
        }
        let written = q.bulk_write(&self.progress, false).await;
        // Free the slot only if it is still ours (it may have expired and been taken).
        let mut c = q.conn.clone();
        let holder: Option<String> = c.get(q.bulk_lock_key()).await.unwrap_or(None);
        if holder.as_deref() == Some(self.progress.run.as_str()) {
            let _: redis::RedisResult<()> = c.del(q.bulk_lock_key()).await;
        }
        result?;
        written?;
        Ok(self.progress)
    }

    async fn work<F, Fut>(&mut self, after_chunk: &mut F) -> Result<()>
    where
        F: FnMut(BulkProgress) -> Fut,
        Fut: Future<Output = ()>,
    {
        let q = self.queue.clone();
        let who = self.progress.who.clone();
        let ids = std::mem::take(&mut self.ids);
        for chunk in ids.chunks(BULK_CHUNK) {
            let mut c = q.conn.clone();
            let (stop, holder): (Option<String>, Option<String>) = redis::pipe()
                .hget(q.bulk_key(), "stop")
                .get(q.bulk_lock_key())
                .query_async(&mut c)
                .await?;
            if stop.is_some() || holder.as_deref() != Some(self.progress.run.as_str()) {
                self.progress.stop_requested = true;
                self.progress.state = "stopped".into();
                return Ok(());
            }
            let changed = q.bulk_chunk(self.action, self.state, chunk, &who).await?;
            self.progress.done += chunk.len() as u64;
            self.progress.changed += changed;
            let _: () = redis::pipe()
                .hset(q.bulk_key(), "done", self.progress.done)
                .ignore()
                .hset(q.bulk_key(), "changed", self.progress.changed)
                .ignore()
                .pexpire(q.bulk_lock_key(), LOCK_MS as i64)
                .ignore()
                .query_async(&mut c)
                .await?;
            after_chunk(self.progress.clone()).await;
        }
        self.progress.state = "finished".into();
        Ok(())
    }
}

/// A random id for a run (no extra dependency: the std hasher's random keys).
fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(q: &str, e: Option<&str>, c: i64, u: Option<i64>) -> Vec<Option<String>> {
        vec![
            Some(q.into()),
            e.map(String::from),
            Some(c.to_string()),
            u.map(|u| u.to_string()),
            Some("dead".into()),
        ]
    }

    #[test]
    fn filter_matches_text_case_insensitively_and_the_window() {
        let f = BulkFilter {
            error: Some("http 503".into()),
            query: Some("Order-".into()),
            within_ms: Some(3_600_000),
            ..BulkFilter::default()
        };
        let cutoff = Some(1_000_000);
        assert!(f.matches(
            &rec("order-7", Some("HTTP 503 x"), 0, Some(1_000_000)),
            cutoff
        ));
        assert!(!f.matches(
            &rec("order-7", Some("HTTP 500"), 0, Some(2_000_000)),
            cutoff
        ));
        assert!(!f.matches(&rec("report", Some("HTTP 503"), 0, Some(2_000_000)), cutoff));
        assert!(!f.matches(&rec("order-7", Some("HTTP 503"), 0, Some(999_999)), cutoff));
        assert!(!f.matches(&rec("order-7", None, 0, Some(2_000_000)), cutoff));
        // `u` omitted: the creation time counts.
        assert!(f.matches(&rec("order-7", Some("HTTP 503"), 1_500_000, None), cutoff));
        let created = BulkFilter {
            time_field: TimeField::Created,
            ..f.clone()
        };
        assert!(!created.matches(
            &rec("order-7", Some("HTTP 503"), 0, Some(2_000_000)),
            cutoff
        ));
        assert!(BulkFilter::default().matches(&rec("x", None, 0, None), None));
    }

    #[test]
    fn describe_and_applies() {
        let f = BulkFilter {
            error: Some("HTTP 503".into()),
            within_ms: Some(7_200_000),
            ..BulkFilter::default()
        };
        assert_eq!(
            f.describe(),
            "dead, error contains \"HTTP 503\", updated in the last 2 h"
        );
        assert!(BulkAction::Retry.applies_to(BulkState::Dead));
        assert!(!BulkAction::Retry.applies_to(BulkState::Leased));
        assert!(BulkAction::Cancel.applies_to(BulkState::Ready));
        assert!(!BulkAction::Purge.applies_to(BulkState::Ready));
        assert_eq!(BulkState::parse("waiting"), Some(BulkState::Waiting));
        assert_eq!(BulkAction::parse("nope"), None);
    }
}
