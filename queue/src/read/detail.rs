//! One task in detail (record, result, history), a stored result, and the leases near or
//! past their deadline.

use redis::{AsyncCommands, Value};

use crate::decode::{self, array, parse_i64, string};
use crate::error::{corrupt, Result};
use crate::model::{
    HistoryEntry, HistoryLevel, LeaseInfo, PollSummary, ResultStory, StoredResult, TaskDetail,
    TaskState,
};
use crate::queue::clamp_ms;
use crate::slot::Slot;
use crate::Queue;

use super::{merge, MAX_PAGE};

impl Queue {
    /// The live task and/or stored result of an id, with its history (newest first): the
    /// stored entries plus those derived from the record and the result (the enqueue, the
    /// live lease, the completion), which the scripts do not write (prelude.lua).
    /// None when the id has neither a live task, nor a result, nor a history. Errors: Redis,
    /// or a record that does not decode (`Corrupt`); `LayoutChanged` once this process knows
    /// the queue was repartitioned under it (the id would be looked for in the old layout:
    /// "not found" for a query the queue has).
    pub async fn get(&self, id: &str) -> Result<Option<TaskDetail>> {
        if let Some(e) = self.layout_changed() {
            return Err(e);
        }
        self.slot_of(id).get(id).await
    }

    /// The stored result of an id, if still fresh.
    /// None when there is none (or it expired). Errors: Redis, or a result that does not
    /// decode (`Corrupt`).
    pub async fn result_by_id(&self, id: &str) -> Result<Option<StoredResult>> {
        self.slot_of(id).result_by_id(id).await
    }

    /// The trace contexts task `id` keeps (empty when it is gone or was made while tracing
    /// was off): one HMGET, for the spans of what happens to a task outside a worker's
    /// `process` span (a lease the reaper takes back).
    pub async fn trace_of(&self, id: &str) -> Result<model::TaskTrace> {
        self.slot_of(id).trace_of(id).await
    }

    /// Leases past their deadline or within `within_ms` of it, soonest deadline first.
    /// At most `limit` (1 to [`MAX_PAGE`]), over all slots.
    pub async fn stuck_leases(&self, within_ms: u64, limit: usize) -> Result<Vec<LeaseInfo>> {
        let all = self
            .fan(|s| async move { s.stuck_leases(within_ms, limit).await })
            .await?;
        Ok(merge::stuck_leases(all, limit.clamp(1, MAX_PAGE)))
    }
}

/// A claim's detail, as claim_apply writes it at the 'full' level.
fn claim_detail(worker: &str, token: u64) -> String {
    format!("by {worker} token {token}")
}

/// The polls summed up, as the task page's history tells them: "46 polls, every ~8123 ms, the
/// first at <ms>" (the page turns the numbers into durations and times).
fn polls_detail(p: &PollSummary) -> String {
    let n = if p.count == 1 {
        "1 poll".to_string()
    } else {
        format!("{} polls", p.count)
    };
    match p.every_ms() {
        Some(every) => format!("{n}, every ~{every} ms, the first at {}", p.first_ms),
        None => n,
    }
}

/// A completion's detail, as complete.lua writes it at the 'full' level (prelude/history.lua
/// `completed_detail`): the time to result counted from the task's creation, then the last
/// call's own latency.
fn completed_detail(r: &StoredResult, story: &ResultStory) -> String {
    format!(
        "by {} token {}: result {} ms after the enqueue (last call {} ms)",
        story.worker,
        story.token,
        (r.completed_ms - r.created_ms).max(0),
        story.latency_ms
    )
}

impl Slot {
    /// [`Queue::get`] in this slot.
    pub(crate) async fn get(&self, id: &str) -> Result<Option<TaskDetail>> {
        let k = self.keys();
        let mut c = self.conn.clone();
        let (t, p, r, h, score): (Value, Value, Option<String>, Vec<String>, Option<String>) =
            redis::pipe()
                .hgetall(k.task(id))
                .get(k.partial(id))
                .get(k.result(id))
                .lrange(k.hist(id), 0, -1)
                .zscore(&k.due, id)
                .query_async(&mut c)
                .await?;
        let score = score.as_deref().map(parse_i64).transpose()?;
        let fields = decode::maybe_fields(t)?;
        let task = fields
            .as_ref()
            .map(|f| decode::task(id, f, decode::opt_string(&p)?, score))
            .transpose()?;
        let packed = r.map(|s| decode::packed_result(id, &s)).transpose()?;
        if task.is_none() && packed.is_none() && h.is_empty() {
            return Ok(None);
        }
        let (polls, last_claim, last_call) = match &fields {
            Some(f) => (
                decode::record_polls(f)?,
                decode::record_last_claim(f)?,
                decode::record_failed_call(f)?,
            ),
            None => (None, None, None),
        };
        let full = self.config().history == HistoryLevel::Full;
        // (entry, rank): among entries of the same millisecond, the derived enqueue sorts
        // oldest, then the stored entries in their list order (and the polls summed up), then
        // the live or completing claim, then the completion.
        let mut all: Vec<(HistoryEntry, i8)> = h
            .iter()
            .map(|s| decode::history(s).map(|e| (e, 0)))
            .collect::<Result<_>>()?;
        let mut derive = |at_ms: i64, kind: &str, detail: String, rank: i8| {
            // The same entry stored (the 'full' level, or a claim a transition wrote).
            let dup = all
                .iter()
                .any(|(e, _)| e.at_ms == at_ms && e.kind == kind && e.detail == detail);
            if !dup && at_ms > 0 {
                all.push((
                    HistoryEntry {
                        at_ms,
                        kind: kind.into(),
                        detail,
                    },
                    rank,
                ));
            }
        };
        // Below 'full' the claims and polls are not stored one by one: the record and the
        // result keep the live lease, the last claim that ended, the claim that completed the
        // task and the polls summed up (reschedule.lua, complete.lua), shown from there.
        if let Some(t) = &task {
            derive(t.created_ms, "enqueued", "due now".into(), -1);
            if !full {
                if t.state == TaskState::Leased {
                    let w = t.worker.clone().unwrap_or_default();
                    derive(t.updated_ms, "claimed", claim_detail(&w, t.token), 1);
                }
                // The polls first: of one millisecond, the entry derived first shows as the
                // newer, and a poll's answer ends the claim before it.
                if let Some(p) = &polls {
                    derive(p.last_ms, "polled", polls_detail(p), 0);
                }
                if let (false, Some((at, w, token))) = (t.state == TaskState::Leased, &last_claim) {
                    derive(*at, "claimed", claim_detail(w, *token), 0);
                }
            }
        }
        if let Some(p) = &packed {
            let (r, story) = (&p.result, &p.story);
            if task.is_none() {
                derive(r.created_ms, "enqueued", "due now".into(), -1);
            }
            if !full {
                let claim = claim_detail(&story.worker, story.token);
                derive(story.claimed_ms, "claimed", claim, 1);
                if let Some(polls) = &story.polls {
                    derive(polls.last_ms, "polled", polls_detail(polls), 0);
                }
                derive(r.completed_ms, "completed", completed_detail(r, story), 2);
            }
        }
        // Newest first; stable, so stored entries of one millisecond keep their order.
        all.sort_by_key(|(e, rank)| std::cmp::Reverse((e.at_ms, *rank)));
        let history = all
            .into_iter()
            .take(self.config().history_cap as usize)
            .map(|(e, _)| e)
            .collect();
        Ok(Some(TaskDetail {
            task,
            history,
            polls,
            last_call,
            result_story: packed.as_ref().map(|p| p.story.clone()),
            result: packed.map(|p| p.result),
        }))
    }

    /// [`Queue::result_by_id`] in this slot.
    pub(crate) async fn result_by_id(&self, id: &str) -> Result<Option<StoredResult>> {
        let mut c = self.conn.clone();
        let v: Option<String> = c.get(self.keys().result(id)).await?;
        v.map(|s| decode::packed_result(id, &s).map(|p| p.result))
            .transpose()
    }

    /// [`Queue::trace_of`] in this slot.
    pub(crate) async fn trace_of(&self, id: &str) -> Result<model::TaskTrace> {
        let mut c = self.conn.clone();
        let (tc, tl): (Option<String>, Option<String>) =
            c.hmget(self.keys().task(id), &["tc", "tl"]).await?;
        Ok(model::TaskTrace::from_fields(tc.as_deref(), tl.as_deref()))
    }

    /// [`Queue::stuck_leases`] of this slot, soonest deadline first.
    pub(crate) async fn stuck_leases(
        &self,
        within_ms: u64,
        limit: usize,
    ) -> Result<Vec<LeaseInfo>> {
        let k = self.keys();
        let now = self.now_ms().await?;
        let mut c = self.conn.clone();
        let upto = now.saturating_add(clamp_ms(within_ms) as i64);
        let v: Value = redis::cmd("ZRANGEBYSCORE")
            .arg(&k.lease)
            .arg("-inf")
            .arg(upto)
            .arg("WITHSCORES")
            .arg("LIMIT")
            .arg(0)
            .arg(limit.clamp(1, MAX_PAGE))
            .query_async(&mut c)
            .await?;
        let flat = array(v)?;
        if flat.len() % 2 != 0 {
            return Err(corrupt("stuck_leases: odd reply"));
        }
        let mut pipe = redis::pipe();
        let mut pairs = Vec::new();
        for p in flat.chunks(2) {
            let id = decode::task_id(&p[0])?;
            let deadline = parse_i64(&string(&p[1])?)?;
            pipe.cmd("HMGET")
                .arg(k.task(&id))
                .arg("q")
                .arg("w")
                .arg("tk");
            pairs.push((id, deadline));
        }
        if pairs.is_empty() {
            return Ok(Vec::new());
        }
        let rows: Vec<Vec<Option<String>>> = pipe.query_async(&mut c).await?;
        let mut out = Vec::new();
        for ((id, deadline), row) in pairs.into_iter().zip(rows) {
            let [Some(query), worker, token] = row.as_slice() else {
                continue; // finished since the range read
            };
            out.push(LeaseInfo {
                id,
                query: query.clone(),
                worker: worker.clone().unwrap_or_default(),
                token: token
                    .as_deref()
                    .map(parse_i64)
                    .transpose()?
                    .and_then(|t| u64::try_from(t).ok())
                    .unwrap_or(0),
                deadline_ms: deadline,
                overdue_ms: now - deadline,
            });
        }
        Ok(out)
    }
}
