//! One task in detail (record, result, history), a stored result, and the leases near or
//! past their deadline.

use redis::{AsyncCommands, Value};

use crate::decode::{self, array, parse_i64, string};
use crate::error::{corrupt, Result};
use crate::model::{HistoryEntry, HistoryLevel, LeaseInfo, StoredResult, TaskDetail, TaskState};
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

    /// Leases past their deadline or within `within_ms` of it, soonest deadline first.
    /// At most `limit` (1 to [`MAX_PAGE`]), over all slots.
    pub async fn stuck_leases(&self, within_ms: u64, limit: usize) -> Result<Vec<LeaseInfo>> {
        let all = self
            .fan(|s| async move { s.stuck_leases(within_ms, limit).await })
            .await?;
        Ok(merge::stuck_leases(all, limit.clamp(1, MAX_PAGE)))
    }
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
        let task = decode::maybe_fields(t)?
            .map(|f| decode::task(id, &f, decode::opt_string(&p)?, score))
            .transpose()?;
        let packed = r.map(|s| decode::packed_result(id, &s)).transpose()?;
        if task.is_none() && packed.is_none() && h.is_empty() {
            return Ok(None);
        }
        let full = self.config().history == HistoryLevel::Full;
        // (entry, rank): among entries of the same millisecond, the derived enqueue sorts
        // oldest and the derived completion newest; stored entries keep their list order.
        let mut all: Vec<(HistoryEntry, i8)> = h
            .iter()
            .map(|s| decode::history(s).map(|e| (e, 0)))
            .collect::<Result<_>>()?;
        let mut derive = |at_ms: i64, kind: &str, detail: String, rank: i8| {
            let dup = all.iter().any(|(e, _)| e.at_ms == at_ms && e.kind == kind);
            if !dup {
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
        if let Some(t) = &task {
            derive(t.created_ms, "enqueued", "due now".into(), -1);
            if t.state == TaskState::Leased && !full {
                let w = t.worker.clone().unwrap_or_default();
                derive(
                    t.updated_ms,
                    "claimed",
                    format!("by {w} token {}", t.token),
                    0,
                );
            }
        }
        if let Some(p) = &packed {
            if task.is_none() {
                derive(p.result.created_ms, "enqueued", "due now".into(), -1);
            }
            if !full {
                derive(
                    p.result.completed_ms,
                    "completed",
                    format!("by {} token {} in {} ms", p.worker, p.token, p.latency_ms),
                    1,
                );
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
            result: packed.map(|p| p.result),
            history,
        }))
    }

    /// [`Queue::result_by_id`] in this slot.
    pub(crate) async fn result_by_id(&self, id: &str) -> Result<Option<StoredResult>> {
        let mut c = self.conn.clone();
        let v: Option<String> = c.get(self.keys().result(id)).await?;
        v.map(|s| decode::packed_result(id, &s).map(|p| p.result))
            .transpose()
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
