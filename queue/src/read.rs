//! Read-only operations for the dashboard and the API. Counts come from one read-only script
//! (consistent snapshot, O(log n) each); pages and details are pipelined plain reads.

use crate::decode::{self, array, int, parse_i64, string};
use crate::error::{corrupt, Result};
use crate::model::{
    Event, LeaseInfo, ListState, Order, Page, Stats, StoredResult, Task, TaskDetail,
    ThroughputBucket, WorkerInfo,
};
use crate::queue::{clamp_ms, Queue};
use crate::scripts::SCRIPTS;
use redis::Value;

/// Minutes of throughput returned by stats().
pub const STATS_BUCKETS: usize = 60;
/// Largest page list() returns.
pub const MAX_PAGE: usize = 1000;

impl Queue {
    /// Counts per state, oldest ready age, stuck leases and the last hour of throughput.
    pub async fn stats(&self) -> Result<Stats> {
        let k = self.keys();
        let mut inv = self.invocation(&SCRIPTS.stats);
        inv.key(&k.due)
            .key(&k.lease)
            .key(&k.dead)
            .key(&k.retry)
            .key(&k.results)
            .key(&k.paused)
            .key(&k.tp)
            .arg(clamp_ms(self.config().result_ttl_ms))
            .arg(STATS_BUCKETS);
        let a = array(self.run(&inv).await?)?;
        if a.len() < 10 {
            return Err(corrupt("stats: short reply"));
        }
        let u = |i: usize| -> Result<u64> {
            u64::try_from(int(&a[i])?).map_err(|_| corrupt("stats: negative count"))
        };
        let now = int(&a[9])?;
        let oldest = int(&a[7])?;
        let mut throughput = Vec::with_capacity(STATS_BUCKETS);
        for b in &a[10..] {
            let row = array(b.clone())?;
            let [m, c, f, p, ts, tc] = row.as_slice() else {
                return Err(corrupt("stats: bad bucket"));
            };
            let n = |v: &Value| -> Result<u64> {
                u64::try_from(int(v)?).map_err(|_| corrupt("stats: negative counter"))
            };
            throughput.push(ThroughputBucket {
                minute_ms: int(m)?,
                completed: n(c)?,
                failed: n(f)?,
                polled: n(p)?,
                ttr_sum_ms: n(ts)?,
                ttr_count: n(tc)?,
            });
        }
        Ok(Stats {
            ready: u(0)?,
            waiting: u(1)?,
            retrying: u(2)?,
            leased: u(3)?,
            stuck: u(4)?,
            dead: u(5)?,
            results: u(6)?,
            oldest_ready_age_ms: if oldest >= 0 && oldest <= now {
                now - oldest
            } else {
                0
            },
            paused: int(&a[8])? == 1,
            now_ms: now,
            throughput,
        })
    }

    /// One page of tasks (or results) in a state, ordered by (score, id) in `order`: due time
    /// for Ready/Waiting, lease deadline for Leased, time of death for Dead, completion for
    /// Results. The cursor is "score:id" of the last item, so paging is stable while tasks
    /// come and go (nothing is skipped or repeated that stayed put); pass it back with the
    /// same order.
    pub async fn list(
        &self,
        state: ListState,
        order: Order,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page> {
        let k = self.keys();
        let (zset, min, max) = match state {
            ListState::Ready => (&k.due, "-inf", "now"),
            ListState::Waiting => (&k.due, "after_now", "+inf"),
            ListState::Leased => (&k.lease, "-inf", "+inf"),
            ListState::Dead => (&k.dead, "-inf", "+inf"),
            ListState::Results => (&k.results, "-inf", "+inf"),
        };
        let (cscore, cid) = match cursor {
            None | Some("") => (String::new(), String::new()),
            Some(c) => {
                let (s, id) = c
                    .split_once(':')
                    .ok_or_else(|| corrupt(format!("bad cursor {c:?}")))?;
                parse_i64(s)?;
                (s.to_string(), id.to_string())
            }
        };
        let mut inv = self.invocation(&SCRIPTS.list);
        inv.key(zset)
            .arg(min)
            .arg(max)
            .arg(&cscore)
            .arg(&cid)
            .arg(limit.clamp(1, MAX_PAGE))
            .arg(match order {
                Order::OldestFirst => "asc",
                Order::NewestFirst => "desc",
            });
        let a = array(self.run(&inv).await?)?;
        if a.len() < 2 || a.len() % 2 != 0 {
            return Err(corrupt("list: bad reply"));
        }
        let total = u64::try_from(int(&a[0])?).map_err(|_| corrupt("list: bad total"))?;
        let more = int(&a[1])? == 1;
        let mut ids = Vec::new();
        let mut last = None;
        for pair in a[2..].chunks(2) {
            let id = string(&pair[0])?;
            let score = parse_i64(&string(&pair[1])?)?;
            last = Some(format!("{score}:{id}"));
            ids.push(id);
        }
        let next_cursor = if more { last } else { None };
        let mut page = Page {
            total,
            next_cursor,
            ..Page::default()
        };
        if ids.is_empty() {
            return Ok(page);
        }
        let mut pipe = redis::pipe();
        for id in &ids {
            if state == ListState::Results {
                pipe.hgetall(k.result(id));
            } else {
                pipe.hgetall(k.task(id));
            }
        }
        let mut c = self.conn.clone();
        let rows: Vec<Value> = pipe.query_async(&mut c).await?;
        for row in rows {
            // A member whose record vanished since the script ran is simply skipped.
            if let Some(f) = decode::maybe_fields(row)? {
                if state == ListState::Results {
                    page.results.push(decode::stored(&f)?);
                } else {
                    page.items.push(decode::task(&f)?);
                }
            }
        }
        Ok(page)
    }

    /// The live task and/or stored result of an id, with its history (newest first).
    pub async fn get(&self, id: &str) -> Result<Option<TaskDetail>> {
        let k = self.keys();
        let mut c = self.conn.clone();
        let (t, r, h): (Value, Value, Vec<String>) = redis::pipe()
            .hgetall(k.task(id))
            .hgetall(k.result(id))
            .lrange(k.hist(id), 0, -1)
            .query_async(&mut c)
            .await?;
        let fields = decode::maybe_fields(t)?;
        // claim.lua defers a leased task's "claimed" history entry to the record's `hpend`
        // field (the script that ends the lease pushes it): show it on top meanwhile.
        let pending = fields
            .as_ref()
            .filter(|f| f.get("state").map(String::as_str) == Some("leased"))
            .and_then(|f| f.get("hpend"))
            .filter(|p| !p.is_empty())
            .cloned();
        let task: Option<Task> = fields.map(|f| decode::task(&f)).transpose()?;
        let result = decode::maybe_fields(r)?
            .map(|f| decode::stored(&f))
            .transpose()?;
        if task.is_none() && result.is_none() && h.is_empty() {
            return Ok(None);
        }
        let history = pending
            .iter()
            .chain(h.iter())
            .take(self.config().history_cap as usize)
            .map(|s| decode::history(s))
            .collect::<Result<Vec<_>>>()?;
        Ok(Some(TaskDetail {
            task,
            result,
            history,
        }))
    }

    /// The stored result of an id, if still fresh.
    pub async fn result_by_id(&self, id: &str) -> Result<Option<StoredResult>> {
        let mut c = self.conn.clone();
        let v: Value = redis::cmd("HGETALL")
            .arg(self.keys().result(id))
            .query_async(&mut c)
            .await?;
        decode::maybe_fields(v)?
            .map(|f| decode::stored(&f))
            .transpose()
    }

    /// Workers with a live heartbeat, most recently seen first. Entries whose heartbeat hash
    /// expired are dropped from the index on the way.
    pub async fn workers(&self) -> Result<Vec<WorkerInfo>> {
        let k = self.keys();
        let mut c = self.conn.clone();
        let ids: Vec<String> = redis::cmd("ZREVRANGE")
            .arg(&k.workers)
            .arg(0)
            .arg(999)
            .query_async(&mut c)
            .await?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for id in &ids {
            pipe.hgetall(k.worker(id));
        }
        let rows: Vec<Value> = pipe.query_async(&mut c).await?;
        let mut out = Vec::new();
        let mut gone = Vec::new();
        for (id, row) in ids.iter().zip(rows) {
            match decode::maybe_fields(row)? {
                Some(f) => out.push(decode::worker(&f)?),
                None => gone.push(id.clone()),
            }
        }
        if !gone.is_empty() {
            redis::cmd("ZREM")
                .arg(&k.workers)
                .arg(&gone)
                .query_async::<()>(&mut c)
                .await?;
        }
        Ok(out)
    }

    /// Leases past their deadline or within `within_ms` of it, soonest deadline first.
    pub async fn stuck_leases(&self, within_ms: u64, limit: usize) -> Result<Vec<LeaseInfo>> {
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
            let id = string(&p[0])?;
            let deadline = parse_i64(&string(&p[1])?)?;
            pipe.cmd("HMGET")
                .arg(k.task(&id))
                .arg("query")
                .arg("worker")
                .arg("token");
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

    /// Newest `count` entries of the global event stream, newest first.
    pub async fn events(&self, count: usize) -> Result<Vec<Event>> {
        let mut c = self.conn.clone();
        let v: Value = redis::cmd("XREVRANGE")
            .arg(&self.keys().events)
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(count.clamp(1, 10_000))
            .query_async(&mut c)
            .await?;
        let mut out = Vec::new();
        for entry in array(v)? {
            let e = array(entry)?;
            let [sid, body] = e.as_slice() else {
                return Err(corrupt("events: bad entry"));
            };
            let f = decode::fields(body.clone())?;
            let g = |n: &str| f.get(n).cloned().unwrap_or_default();
            out.push(Event {
                stream_id: string(sid)?,
                at_ms: parse_i64(&g("at"))?,
                kind: g("kind"),
                id: g("id"),
                detail: g("detail"),
            });
        }
        Ok(out)
    }
}
