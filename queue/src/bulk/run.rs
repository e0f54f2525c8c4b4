//! A bulk run: begun under the queue's one run lock, worked through chunk by chunk with its
//! progress in Redis, stoppable from any web process.

use std::future::Future;

use redis::AsyncCommands;

use crate::error::Result;
use crate::model::TaskId;
use crate::queue::Queue;

use super::{BulkAction, BulkFilter, BulkJob, BulkProgress, BulkRefused, BulkState};
use super::{BULK_CHUNK, BULK_SCAN_MAX, KEEP_MS, LOCK_MS};

impl Queue {
    /// The current or last run's progress and stop request (a hash in the control slot).
    fn bulk_key(&self) -> String {
        format!("{}bulk", self.keys().prefix)
    }

    /// The lock that keeps runs one at a time (its value: `<run id> <action> <who>`, so a
    /// start refused while another run still selects can say what is running).
    fn bulk_lock_key(&self) -> String {
        format!("{}bulk:lock", self.keys().prefix)
    }

    /// A stop request for the run holding the lock with the value stored here: kept apart
    /// from `{q}:bulk`, which a run still selecting has not written yet.
    fn bulk_stop_key(&self) -> String {
        format!("{}bulk:stop", self.keys().prefix)
    }

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
        self.bulk_begin_with(action, filter, who, limit, confirmed, || async {})
            .await
    }

    /// As [`Queue::bulk_begin`], awaiting `selecting` once the run holds the lock, before its
    /// tasks are selected (tests use it to send a Stop while the run selects).
    pub async fn bulk_begin_with<F, Fut>(
        &self,
        action: BulkAction,
        filter: &BulkFilter,
        who: &str,
        limit: u64,
        confirmed: Option<u64>,
        selecting: F,
    ) -> Result<std::result::Result<BulkJob, BulkRefused>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = ()>,
    {
        if !action.applies_to(filter.state) {
            return Ok(Err(BulkRefused::NotApplicable));
        }
        // The lock first: a selection can take seconds, and a Stop sent meanwhile must find
        // the run (before, it answered "no bulk action is running" and the run went on).
        let run = format!("{:016x}", rand_u64());
        let lock = format!("{run} {} {who}", action.as_str());
        let mut c = self.conn.clone();
        let locked: Option<String> = redis::cmd("SET")
            .arg(self.bulk_lock_key())
            .arg(&lock)
            .arg("NX")
            .arg("PX")
            .arg(LOCK_MS)
            .query_async(&mut c)
            .await?;
        if locked.is_none() {
            return Ok(Err(BulkRefused::Busy(Box::new(self.bulk_current().await?))));
        }
        let selected = async {
            selecting().await;
            let keep = usize::try_from(limit).unwrap_or(usize::MAX);
            let sel = self.bulk_select(filter, keep).await?;
            let stop: Option<String> = self.conn.clone().get(self.bulk_stop_key()).await?;
            Ok::<_, crate::error::QueueError>((sel, stop.as_deref() == Some(lock.as_str())))
        }
        .await;
        let refused = match &selected {
            Err(_) => None,
            Ok((sel, _)) if sel.matched > limit => Some(BulkRefused::OverLimit {
                matched: sel.matched,
                limit,
            }),
            Ok((sel, _)) if confirmed.is_some_and(|c| sel.matched > c) => {
                Some(BulkRefused::CountGrew {
                    confirmed: confirmed.unwrap_or_default(),
                    matched: sel.matched,
                })
            }
            Ok((sel, _)) if sel.ids.is_empty() => Some(BulkRefused::Nothing),
            Ok(_) => None,
        };
        if selected.is_err() || refused.is_some() {
            self.bulk_release(&lock).await;
        }
        if let Some(refused) = refused {
            return Ok(Err(refused));
        }
        let (sel, stop_requested) = selected?;
        let mut filter_text = filter.describe_with(sel.sample.as_ref());
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
            // Asked while selecting: the run ends at its first stop check, having acted on
            // nothing.
            stop_requested,
        };
        self.bulk_write(&progress, true).await?;
        Ok(Ok(BulkJob {
            queue: self.clone(),
            lock,
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

    /// What a start refused as busy reports: the running run's progress, or (while the lock's
    /// holder still selects its tasks, its progress not written yet) what its lock says.
    async fn bulk_current(&self) -> Result<BulkProgress> {
        let current = self.bulk_progress().await?.unwrap_or_default();
        let holder: Option<String> = self.conn.clone().get(self.bulk_lock_key()).await?;
        match holder {
            Some(h) if !(current.running() && h.starts_with(&current.run)) => {
                let mut parts = h.splitn(3, ' ');
                Ok(BulkProgress {
                    run: parts.next().unwrap_or_default().into(),
                    action: parts.next().unwrap_or_default().into(),
                    who: parts.next().unwrap_or_default().into(),
                    filter: "selecting its tasks".into(),
                    state: "running".into(),
                    ..BulkProgress::default()
                })
            }
            _ => Ok(current),
        }
    }

    /// Frees the lock and its stop request if they are still `lock`'s (either may have
    /// expired and been taken by another run).
    async fn bulk_release(&self, lock: &str) {
        let mut c = self.conn.clone();
        for key in [self.bulk_lock_key(), self.bulk_stop_key()] {
            let holder: Option<String> = c.get(&key).await.unwrap_or(None);
            if holder.as_deref() == Some(lock) {
                let _: redis::RedisResult<()> = c.del(&key).await;
            }
        }
    }

    /// Asks the current run to stop before its next chunk; false when none is running. A run
    /// still selecting its tasks counts: it holds the lock, and the request (naming that
    /// lock) ends it before it acts on anything.
    pub async fn bulk_stop(&self) -> Result<bool> {
        let mut c = self.conn.clone();
        let holder: Option<String> = c.get(self.bulk_lock_key()).await?;
        let running = self.bulk_progress().await?.is_some_and(|p| p.running());
        if holder.is_none() && !running {
            return Ok(false);
        }
        let mut pipe = redis::pipe();
        if let Some(lock) = &holder {
            pipe.cmd("SET")
                .arg(self.bulk_stop_key())
                .arg(lock)
                .arg("PX")
                .arg(LOCK_MS)
                .ignore();
        }
        if running {
            pipe.hset(self.bulk_key(), "stop", "1").ignore();
        }
        pipe.query_async::<()>(&mut c).await?;
        Ok(true)
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
        if p.stop_requested {
            pipe.hset(&key, "stop", "1").ignore();
        }
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
        q.bulk_release(&self.lock).await;
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
            let (stop, holder, stop_for): (Option<String>, Option<String>, Option<String>) =
                redis::pipe()
                    .hget(q.bulk_key(), "stop")
                    .get(q.bulk_lock_key())
                    .get(q.bulk_stop_key())
                    .query_async(&mut c)
                    .await?;
            let mine = Some(self.lock.as_str());
            if stop.is_some() || stop_for.as_deref() == mine || holder.as_deref() != mine {
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
