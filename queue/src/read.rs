//! Read-only operations for the dashboard and the API. Counts come from one read-only script
//! (consistent snapshot, O(log n) each); pages and details are pipelined plain reads.

use crate::decode::{self, array, int, parse_i64, string};
use crate::error::{corrupt, Result};
use crate::keys::Keys;
use crate::model::{
    BreakerInfo, BreakerState, Event, Histogram, HistoryEntry, HistoryLevel, LeaseInfo, ListState,
    Order, Page, PauseInfo, Stats, StoredResult, Task, TaskDetail, TaskId, TaskState, TenantCount,
    ThroughputBucket, WorkerInfo,
};
use crate::queue::{clamp_ms, Queue};
use crate::scripts::SCRIPTS;
use redis::{AsyncCommands, Value};

/// Minutes of throughput returned by stats().
pub const STATS_BUCKETS: usize = 60;
/// Most fair-zset members [`Queue::tenants`] counts.
pub const TENANT_SCAN_MAX: usize = 10_000;
/// Largest page list() returns.
pub const MAX_PAGE: usize = 1000;

impl Queue {
    /// Counts per state, oldest ready age, stuck leases and the last hour of throughput.
    pub async fn stats(&self) -> Result<Stats> {
        if let Some(parts) = self.parts() {
            let all = Queue::fan(parts, |p| async move { p.stats_one().await }).await?;
            return Ok(merge_stats(all));
        }
        self.stats_one().await
    }

    /// [`Queue::stats`] on this partition alone (or the whole queue of one partition).
    async fn stats_one(&self) -> Result<Stats> {
        let k = self.keys();
        let mut inv = self.invocation(&SCRIPTS.stats);
        inv.key(&k.ready)
            .key(&k.ready_bg)
            .key(&k.due)
            .key(&k.lease)
            .key(&k.dead)
            .key(&k.retry)
            .key(&k.results)
            .key(&k.paused)
            .key(&k.tp)
            .key(&k.fair)
            .arg(clamp_ms(self.config().result_ttl_ms))
            .arg(STATS_BUCKETS);
        let a = array(self.run(&inv).await?)?;
        if a.len() < 11 {
            return Err(corrupt("stats: short reply"));
        }
        let u = |i: usize| -> Result<u64> {
            u64::try_from(int(&a[i])?).map_err(|_| corrupt("stats: negative count"))
        };
        let now = int(&a[9])?;
        let oldest = int(&a[7])?;
        let mut throughput = Vec::with_capacity(STATS_BUCKETS);
        for b in &a[11..] {
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
                ..ThroughputBucket::default()
            });
        }
        Ok(Stats {
            ready: u(0)?,
            ready_background: u(10)?,
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

    /// One page of tasks (or results) in a state, in `order`. For the sorted sets, by
    /// (score, id): due time for Waiting, lease deadline for Leased, time of death for Dead,
    /// completion for Results; the cursor is "score:id" of the last item, so paging is stable
    /// while tasks come and go (nothing is skipped or repeated that stayed put). Ready work is
    /// the due-now part of the due zset (polls and retries, by due time), then the interactive
    /// ready list, then the background one (each oldest first); there the cursor names the
    /// last id listed ("i:<id>"), found again with LPOS (O(n) in the list: a dashboard read,
    /// never a worker's). Pass the cursor back with the same order.
    pub async fn list(
        &self,
        state: ListState,
        order: Order,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page> {
        let limit = limit.clamp(1, MAX_PAGE);
        if let Some(parts) = self.parts() {
            return self
                .list_partitioned(parts, state, order, cursor, limit)
                .await;
        }
        // A partitioned queue's ready cursor ("<partition>/<cursor>") is read as its cursor.
        let cursor = cursor.map(|c| c.split_once('/').map_or(c, |(_, rest)| rest));
        let k = self.keys();
        let (zset, min, max) = match state {
            ListState::Ready => return self.list_ready(order, cursor, limit).await,
            ListState::Waiting => (&k.due, "after_now", "+inf"),
            ListState::Leased => (&k.lease, "-inf", "+inf"),
            ListState::Dead => (&k.dead, "-inf", "+inf"),
            ListState::Results => (&k.results, "-inf", "+inf"),
        };
        let z = self
            .zpage(zset, min, max, parse_cursor(cursor)?, limit, order)
            .await?;
        self.page_of(state, z).await
    }

    /// The page of a sorted set's rows: their records (or results), the cursor after them.
    async fn page_of(&self, state: ListState, z: ZPage) -> Result<Page> {
        let mut page = Page {
            total: z.total,
            next_cursor: if z.more { z.last_cursor() } else { None },
            ..Page::default()
        };
        if state == ListState::Results {
            page.results = self.fetch_results(&z.rows).await?;
        } else {
            let rows: Vec<(String, Option<i64>)> = z
                .rows
                .into_iter()
                .map(|(id, score)| (id, (state == ListState::Waiting).then_some(score)))
                .collect();
            page.items = self.fetch_tasks(&rows).await?;
        }
        Ok(page)
    }

    /// [`Queue::list`] of a partitioned queue. Sorted sets: the same (score, id) cursor to
    /// every partition, their pages merged by (score, id), so order and paging are exactly
    /// those of one set. Ready work: partition after partition, the cursor
    /// "<partition>/<that partition's ready cursor>".
    async fn list_partitioned(
        &self,
        parts: &[Queue],
        state: ListState,
        order: Order,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page> {
        if state == ListState::Ready {
            return self
                .list_ready_partitioned(parts, order, cursor, limit)
                .await;
        }
        let cursor = cursor.map(|c| c.split_once('/').map_or(c, |(_, rest)| rest));
        let (min, max) = match state {
            ListState::Waiting => ("after_now", "+inf"),
            _ => ("-inf", "+inf"),
        };
        let parsed = parse_cursor(cursor)?;
        let pages = Queue::fan(parts, |p| {
            let parsed = parsed.clone();
            async move {
                let k = p.keys();
                let zset = match state {
                    ListState::Waiting => &k.due,
                    ListState::Leased => &k.lease,
                    ListState::Dead => &k.dead,
                    _ => &k.results,
                };
                p.zpage(zset, min, max, parsed, limit, order).await
            }
        })
        .await?;
        let total = pages.iter().map(|z| z.total).sum();
        let any_more = pages.iter().any(|z| z.more);
        let mut rows: Vec<(String, i64)> = pages.into_iter().flat_map(|z| z.rows).collect();
        rows.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
        if order == Order::NewestFirst {
            rows.reverse();
        }
        let more = any_more || rows.len() > limit;
        rows.truncate(limit);
        self.page_of(state, ZPage { total, more, rows }).await
    }

    /// Ready work of a partitioned queue (see [`Queue::list_partitioned`]).
    async fn list_ready_partitioned(
        &self,
        parts: &[Queue],
        order: Order,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page> {
        let now = self.now_ms().await?;
        let counts = Queue::fan(parts, |p| async move { p.ready_count(now).await }).await?;
        let seq: Vec<usize> = match order {
            Order::OldestFirst => (0..parts.len()).collect(),
            Order::NewestFirst => (0..parts.len()).rev().collect(),
        };
        let (first, mut inner) = match cursor {
            None | Some("") => (seq[0], None),
            // A cursor of one partition's shape starts at the first partition.
            Some(c) => match c.split_once('/') {
                None => (seq[0], Some(c.to_string())),
                Some((p, rest)) => {
                    let p: usize = p.parse().map_err(|_| bad_cursor(c))?;
                    if p >= parts.len() {
                        return Err(bad_cursor(c));
                    }
                    (p, Some(rest.to_string()))
                }
            },
        };
        let mut page = Page {
            total: counts.iter().sum(),
            ..Page::default()
        };
        let start = seq.iter().position(|p| *p == first).unwrap_or(0);
        for (n, &p) in seq.iter().enumerate().skip(start) {
            let want = limit - page.items.len();
            if want == 0 {
                break;
            }
            if counts[p] == 0 && inner.is_none() {
                continue;
            }
            let got = parts[p]
                .list_ready(order, inner.take().as_deref(), want)
                .await?;
            page.items.extend(got.items);
            if page.items.len() >= limit {
                page.next_cursor = match got.next_cursor {
                    Some(c) => Some(format!("{p}/{c}")),
                    None => seq[n + 1..]
                        .iter()
                        .find(|q| counts[**q] > 0)
                        .map(|q| format!("{q}/")),
                };
            }
        }
        Ok(page)
    }

    /// Tasks ready now in this partition (both lists, the fair zset, the due-now polls).
    async fn ready_count(&self, now: i64) -> Result<u64> {
        let (i, b, z, f) = self.ready_lengths(now).await?;
        Ok(i + b + z + f)
    }

    /// The lengths of the places ready work waits in: the interactive and background lists,
    /// the due-now part of the due zset, the fair zset.
    async fn ready_lengths(&self, now: i64) -> Result<(u64, u64, u64, u64)> {
        let k = self.keys();
        let mut c = self.conn.clone();
        Ok(redis::pipe()
            .llen(&k.ready)
            .llen(&k.ready_bg)
            .zcount(&k.due, "-inf", now)
            .zcard(&k.fair)
            .query_async(&mut c)
            .await?)
    }

    /// Ready work, across its three places (see [`Queue::list`]).
    async fn list_ready(&self, order: Order, cursor: Option<&str>, limit: usize) -> Result<Page> {
        let k = self.keys();
        let now = self.now_ms().await?;
        let (ilen, blen, zlen, flen) = self.ready_lengths(now).await?;
        let mut c = self.conn.clone();
        // Segments in this order's sequence, and where the cursor resumes.
        #[derive(Clone, Copy, PartialEq)]
        enum Seg {
            Z,
            F,
            I,
            B,
        }
        // F: the tenants' ready tasks, in their fair-share order (prelude.lua).
        let segs = match order {
            Order::OldestFirst => [Seg::Z, Seg::F, Seg::I, Seg::B],
            Order::NewestFirst => [Seg::B, Seg::I, Seg::F, Seg::Z],
        };
        // A list cursor is "i:<id>" / "b:<id>": the last id listed, found again with LPOS so a
        // task removed before it shifts nothing. If that id has left its list (claimed, which
        // takes from the head), oldest-first restarts the list (repeating rather than skipping)
        // and newest-first moves on (everything older left before it).
        let (start, mut anchor, mut zcursor) = match cursor {
            None | Some("") => (segs[0], None, None),
            Some(c) => match c.split_once(':') {
                Some(("i", "")) => (Seg::I, None, None),
                Some(("b", "")) => (Seg::B, None, None),
                Some(("i", id)) => (Seg::I, Some(id.to_string()), None),
                Some(("b", id)) => (Seg::B, Some(id.to_string()), None),
                Some(("z", "")) => (Seg::Z, None, None),
                Some(("f", "")) => (Seg::F, None, None),
                Some(("f", rest)) => (Seg::F, None, parse_cursor(Some(rest))?),
                Some(("z", rest)) => (Seg::Z, None, parse_cursor(Some(rest))?),
                _ => (Seg::Z, None, parse_cursor(Some(c))?),
            },
        };
        let mut page = Page {
            total: ilen + blen + zlen + flen,
            ..Page::default()
        };
        let mut rows: Vec<(String, Option<i64>)> = Vec::new();
        let first = segs.iter().position(|s| *s == start).unwrap_or(0);
        for (i, seg) in segs.iter().enumerate().skip(first) {
            let want = limit - rows.len();
            if want == 0 {
                break;
            }
            if i > first {
                anchor = None;
                zcursor = None;
            }
            let later_nonempty = segs[i + 1..].iter().any(|s| match s {
                Seg::Z => zlen > 0,
                Seg::F => flen > 0,
                Seg::I => ilen > 0,
                Seg::B => blen > 0,
            });
            let next_seg = || match segs.get(i + 1) {
                Some(Seg::I) => "i:".to_string(),
                Some(Seg::B) => "b:".to_string(),
                Some(Seg::F) => "f:".to_string(),
                _ => "z:".to_string(),
            };
            match seg {
                Seg::Z => {
                    let z = self
                        .zpage(&k.due, "-inf", "now", zcursor.take(), want, order)
                        .await?;
                    let more = z.more;
                    let last = z.last_cursor();
                    rows.extend(z.rows.into_iter().map(|(id, s)| (id, Some(s))));
                    if rows.len() == limit && (more || later_nonempty) {
                        page.next_cursor = if more {
                            last.map(|l| format!("z:{l}"))
                        } else {
                            Some(next_seg())
                        };
                    }
                }
                Seg::F => {
                    let z = self
                        .zpage(&k.fair, "-inf", "+inf", zcursor.take(), want, order)
                        .await?;
                    let more = z.more;
                    let last = z.last_cursor();
                    // Members are "<tenant>|<id>".
                    rows.extend(
                        z.rows
                            .into_iter()
                            .map(|(m, _)| (Keys::split_fair_member(&m).1.to_string(), None)),
                    );
                    if rows.len() == limit && (more || later_nonempty) {
                        page.next_cursor = if more {
                            last.map(|l| format!("f:{l}"))
                        } else {
                            Some(next_seg())
                        };
                    }
                }
                Seg::I | Seg::B => {
                    let (key, len, tag) = if *seg == Seg::I {
                        (&k.ready, ilen as isize, "i")
                    } else {
                        (&k.ready_bg, blen as isize, "b")
                    };
                    let pos: Option<isize> = match &anchor {
                        Some(id) => {
                            redis::cmd("LPOS")
                                .arg(key)
                                .arg(id)
                                .query_async(&mut c)
                                .await?
                        }
                        None => None,
                    };
                    let n = want as isize;
                    // [lo, hi] in head-based indices.
                    let (lo, hi) = match order {
                        Order::OldestFirst => {
                            let lo = pos.map_or(0, |p| p + 1);
                            (lo, (lo + n - 1).min(len - 1))
                        }
                        Order::NewestFirst => {
                            let hi = match (&anchor, pos) {
                                (None, _) => len - 1,
                                (Some(_), Some(p)) => p - 1,
                                (Some(_), None) => -1,
                            };
                            ((hi - n + 1).max(0), hi)
                        }
                    };
                    if lo > hi || hi < 0 {
                        continue;
                    }
                    let mut ids: Vec<String> = c.lrange(key, lo, hi).await?;
                    let more_here = match order {
                        Order::OldestFirst => hi < len - 1,
                        Order::NewestFirst => lo > 0,
                    };
                    if order == Order::NewestFirst {
                        ids.reverse();
                    }
                    let last = ids.last().cloned();
                    rows.extend(ids.into_iter().map(|id| (id, None)));
                    if rows.len() == limit && (more_here || later_nonempty) {
                        page.next_cursor = Some(match (more_here, last) {
                            (true, Some(id)) => format!("{tag}:{id}"),
                            _ => next_seg(),
                        });
                    }
                }
            }
        }
        page.items = self.fetch_tasks(&rows).await?;
        Ok(page)
    }

    /// One page of a sorted set between two bounds (list.lua).
    async fn zpage(
        &self,
        zset: &str,
        min: &str,
        max: &str,
        cursor: Option<(i64, String)>,
        limit: usize,
        order: Order,
    ) -> Result<ZPage> {
        let (cscore, cid) = match cursor {
            Some((s, id)) => (s.to_string(), id),
            None => (String::new(), String::new()),
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
        let rows = a[2..]
            .chunks(2)
            .map(|p| Ok((string(&p[0])?, parse_i64(&string(&p[1])?)?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(ZPage { total, more, rows })
    }

    /// Records of `ids` (with their due score where known), skipping ids whose record vanished
    /// since they were listed.
    async fn fetch_tasks(&self, ids: &[(String, Option<i64>)]) -> Result<Vec<Task>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        if let Some(parts) = self.parts() {
            let names: Vec<&str> = ids.iter().map(|(id, _)| id.as_str()).collect();
            let groups = self.group_by_part(&names);
            let found = futures::future::try_join_all(groups.iter().map(|(p, idx)| {
                let sub: Vec<(String, Option<i64>)> = idx.iter().map(|&i| ids[i].clone()).collect();
                async move { parts[*p].fetch_tasks(&sub).await }
            }))
            .await?;
            return Ok(in_order(&names, found.into_iter().flatten(), |t| {
                t.id.to_string()
            }));
        }
        self.fetch_tasks_one(ids).await
    }

    /// [`Queue::fetch_tasks`] on this partition alone (or the whole queue of one partition).
    async fn fetch_tasks_one(&self, ids: &[(String, Option<i64>)]) -> Result<Vec<Task>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }

        let k = self.keys();
        let mut pipe = redis::pipe();
        for (id, _) in ids {
            pipe.hgetall(k.task(id)).get(k.partial(id));
        }
        let mut c = self.conn.clone();
        let rows: Vec<Value> = pipe.query_async(&mut c).await?;
        let mut out = Vec::with_capacity(ids.len());
        for ((id, score), pair) in ids.iter().zip(rows.chunks(2)) {
            if let Some(f) = decode::maybe_fields(pair[0].clone())? {
                let partial = opt_str(&pair[1])?;
                out.push(decode::task(id, &f, partial, *score)?);
            }
        }
        Ok(out)
    }

    async fn fetch_results(&self, ids: &[(String, i64)]) -> Result<Vec<StoredResult>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        if let Some(parts) = self.parts() {
            let names: Vec<&str> = ids.iter().map(|(id, _)| id.as_str()).collect();
            let groups = self.group_by_part(&names);
            let found = futures::future::try_join_all(groups.iter().map(|(p, idx)| {
                let sub: Vec<(String, i64)> = idx.iter().map(|&i| ids[i].clone()).collect();
                async move { parts[*p].fetch_results(&sub).await }
            }))
            .await?;
            return Ok(in_order(&names, found.into_iter().flatten(), |r| {
                r.id.to_string()
            }));
        }
        self.fetch_results_one(ids).await
    }

    /// [`Queue::fetch_results`] on this partition alone (or the whole queue of one partition).
    async fn fetch_results_one(&self, ids: &[(String, i64)]) -> Result<Vec<StoredResult>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }

        let k = self.keys();
        let mut pipe = redis::pipe();
        for (id, _) in ids {
            pipe.get(k.result(id));
        }
        let mut c = self.conn.clone();
        let rows: Vec<Option<String>> = pipe.query_async(&mut c).await?;
        let mut out = Vec::new();
        for ((id, _), row) in ids.iter().zip(rows) {
            if let Some(s) = row {
                out.push(decode::packed_result(id, &s)?.result);
            }
        }
        Ok(out)
    }

    /// The live task and/or stored result of an id, with its history (newest first): the
    /// stored entries plus those derived from the record and the result (the enqueue, the
    /// live lease, the completion), which the scripts do not write (prelude.lua).
    pub async fn get(&self, id: &str) -> Result<Option<TaskDetail>> {
        if let Some(p) = self.part_for(id) {
            return (p.get_one(id)).await;
        }
        self.get_one(id).await
    }

    /// [`Queue::get`] on this partition alone (or the whole queue of one partition).
    async fn get_one(&self, id: &str) -> Result<Option<TaskDetail>> {
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
            .map(|f| decode::task(id, &f, opt_str(&p)?, score))
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

    /// The stored result of an id, if still fresh.
    pub async fn result_by_id(&self, id: &str) -> Result<Option<StoredResult>> {
        if let Some(p) = self.part_for(id) {
            return (p.result_by_id_one(id)).await;
        }
        self.result_by_id_one(id).await
    }

    /// [`Queue::result_by_id`] on this partition alone (or the whole queue of one partition).
    async fn result_by_id_one(&self, id: &str) -> Result<Option<StoredResult>> {
        let mut c = self.conn.clone();
        let v: Option<String> = c.get(self.keys().result(id)).await?;
        v.map(|s| decode::packed_result(id, &s).map(|p| p.result))
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
        if let Some(parts) = self.parts() {
            let all = Queue::fan(parts, |p| async move {
                p.stuck_leases_one(within_ms, limit).await
            })
            .await?;
            let mut out: Vec<LeaseInfo> = all.into_iter().flatten().collect();
            out.sort_by(|a, b| {
                a.deadline_ms
                    .cmp(&b.deadline_ms)
                    .then_with(|| a.id.cmp(&b.id))
            });
            out.truncate(limit.clamp(1, MAX_PAGE));
            return Ok(out);
        }
        self.stuck_leases_one(within_ms, limit).await
    }

    /// [`Queue::stuck_leases`] on this partition alone (or the whole queue of one partition).
    async fn stuck_leases_one(&self, within_ms: u64, limit: usize) -> Result<Vec<LeaseInfo>> {
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

    /// Ids of live tasks and stored results that start with `prefix` (1 to 31 lowercase hex
    /// characters; anything else finds nothing), at most `max` of them, found by a key scan
    /// of at most `scan_calls` `SCAN` calls of ~1000 keys each. The flag is false when the
    /// budget ran out before the whole keyspace was seen (a longer prefix narrows it).
    ///
    /// Why a scan: ids are hashes, so no index orders them; the budget keeps the dashboard's
    /// "find by id prefix" bounded on a large Redis.
    pub async fn ids_with_prefix(
        &self,
        prefix: &str,
        max: usize,
        scan_calls: usize,
    ) -> Result<(Vec<TaskId>, bool)> {
        let hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
        if prefix.is_empty() || prefix.len() >= 32 || !prefix.bytes().all(hex) {
            return Ok((Vec::new(), true));
        }
        // One pattern for all partitions' keys ("{name#<i>}:..."), so one scan of the
        // keyspace finds them all.
        let pattern = if self.parts().is_some() {
            self.keys().any_partition_task_or_result_pattern(prefix)
        } else {
            self.keys().task_or_result_pattern(prefix)
        };
        let mut c = self.conn.clone();
        let mut cursor: u64 = 0;
        let mut found = std::collections::BTreeSet::new();
        for _ in 0..scan_calls.max(1) {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut c)
                .await?;
            found.extend(
                keys.iter()
                    .filter_map(|k| k.rsplit(':').next())
                    .filter_map(|id| TaskId::parse(id).ok()),
            );
            if next == 0 || found.len() >= max {
                return Ok((found.into_iter().take(max).collect(), true));
            }
            cursor = next;
        }
        Ok((found.into_iter().take(max).collect(), false))
    }

    /// Throughput of the last `minutes` (up to a week), oldest first, in points of `per`
    /// minutes aligned on the clock (quarter hours start at :00, :15, …; hours at :00): each
    /// point sums its minutes' counters and merges their histograms into the point's
    /// percentiles of time to result, polls per task and upstream latency.
    ///
    /// The last day is read from the per-minute counters; a longer window also reads the
    /// hourly roll-up reap makes of older minutes (a minute is counted in one or the other,
    /// never both, so the sum is exact). Which minutes and histogram buckets exist is read from
    /// their index zsets (scored by time), then their fields with HMGET in chunks of 1,000: a
    /// day costs a dozen round trips and no scan, a week a few more.
    pub async fn throughput(&self, minutes: usize, per: usize) -> Result<Vec<ThroughputBucket>> {
        let (mut out, hists) = match self.parts() {
            Some(parts) => {
                let all = Queue::fan(
                    parts,
                    |p| async move { p.throughput_raw(minutes, per).await },
                )
                .await?;
                let mut it = all.into_iter();
                let (mut out, mut hists) = it.next().unwrap_or_default();
                for (o, h) in it {
                    for (b, hs) in o.into_iter().zip(h) {
                        // Nodes' clocks may disagree on the current minute: match by time.
                        let Ok(i) = out.binary_search_by_key(&b.minute_ms, |x| x.minute_ms) else {
                            continue;
                        };
                        let t = &mut out[i];
                        t.completed += b.completed;
                        t.failed += b.failed;
                        t.polled += b.polled;
                        t.ttr_sum_ms += b.ttr_sum_ms;
                        t.ttr_count += b.ttr_count;
                        for (mine, theirs) in hists[i].iter_mut().zip(hs.iter()) {
                            mine.merge(theirs);
                        }
                    }
                }
                (out, hists)
            }
            None => self.throughput_raw(minutes, per).await?,
        };
        for (b, [ttr, polls, latency]) in out.iter_mut().zip(hists) {
            b.ttr = ttr.percentiles();
            b.polls = polls.percentiles();
            b.latency = latency.percentiles();
        }
        Ok(out)
    }

    /// [`Queue::throughput`] of this partition, its histograms not yet made percentiles.
    async fn throughput_raw(
        &self,
        minutes: usize,
        per: usize,
    ) -> Result<(Vec<ThroughputBucket>, Vec<[Histogram; 3]>)> {
        const FIELDS: [&str; 4] = ["completed", "failed", "polled", "ttr_sum"];
        const HOUR: i64 = 3_600_000;
        let day = crate::THROUGHPUT_RETENTION_MS / 60_000;
        let week = (crate::THROUGHPUT_HOURLY_RETENTION_MS / 60_000).saturating_sub(60);
        let minutes = minutes.clamp(1, usize::try_from(week).unwrap_or(10_080));
        let per = per.clamp(1, minutes) as i64;
        let now = self.now_ms().await?;
        let last = now - now.rem_euclid(60_000);
        let first = last - (minutes as i64 - 1) * 60_000;
        let step = per * 60_000;
        let point_of = |m: i64| m - m.rem_euclid(step);
        // Every point, zero-filled, so idle spans are drawn as zeros and gaps.
        let mut out: Vec<ThroughputBucket> = Vec::new();
        let mut t = point_of(first);
        while t <= last {
            out.push(ThroughputBucket {
                minute_ms: t,
                ..ThroughputBucket::default()
            });
            t += step;
        }
        let k = self.keys();
        let mut sources = vec![(&k.tp, &k.tpmin, first)];
        if minutes as u64 > day {
            sources.push((&k.tphour, &k.tphourix, first - first.rem_euclid(HOUR)));
        }
        // [time to result, polls, latency] per point.
        let mut hists: Vec<[Histogram; 3]> = vec![Default::default(); out.len()];
        let mut c = self.conn.clone();
        for (hash, index, from) in sources {
            // Members: "<ms>" (a minute or hour with counters) and "<ms>:<t|p|l><bucket>"
            // (a histogram field, named as in the hash).
            let members: Vec<String> = c.zrangebyscore(index, from, last).await?;
            // What each field read is, and the index of its point.
            enum Field {
                Counter(usize),
                Bucket(usize, u32),
            }
            let mut fields: Vec<String> = Vec::new();
            let mut what: Vec<(usize, Field)> = Vec::new();
            for m in &members {
                let at = |ms: i64| {
                    out.binary_search_by_key(&point_of(ms), |b| b.minute_ms)
                        .ok()
                };
                if let Some((ms, kind, bucket)) = parse_hist_field(m) {
                    if let Some(i) = at(ms) {
                        fields.push(m.clone());
                        what.push((i, Field::Bucket(kind, bucket)));
                    }
                } else if let Some(i) = m.parse::<i64>().ok().and_then(at) {
                    for (j, f) in FIELDS.iter().enumerate() {
                        fields.push(format!("{m}:{f}"));
                        what.push((i, Field::Counter(j)));
                    }
                }
            }
            let mut values: Vec<Option<u64>> = Vec::with_capacity(fields.len());
            for chunk in fields.chunks(1000) {
                let v: Vec<Option<u64>> = redis::cmd("HMGET")
                    .arg(hash)
                    .arg(chunk)
                    .query_async(&mut c)
                    .await?;
                values.extend(v);
            }
            for ((i, w), v) in what.into_iter().zip(values) {
                let v = v.unwrap_or(0);
                let b = &mut out[i];
                match w {
                    Field::Counter(0) => {
                        b.completed += v;
                        // Every completion counts its time to result.
                        b.ttr_count += v;
                    }
                    Field::Counter(1) => b.failed += v,
                    Field::Counter(2) => b.polled += v,
                    Field::Counter(_) => b.ttr_sum_ms += v,
                    Field::Bucket(kind, bucket) => hists[i][kind].add(bucket, v),
                }
            }
        }
        Ok((out, hists))
    }

    /// Since when and by whom the queue is paused (the pause script's flag, "at|who"), or
    /// None while it runs. One `GET`, so every dashboard page can show its banner cheaply. A
    /// flag in another shape still means paused.
    pub async fn pause_info(&self) -> Result<Option<PauseInfo>> {
        if let Some(parts) = self.parts() {
            return (parts[0].pause_info_one()).await;
        }
        self.pause_info_one().await
    }

    /// [`Queue::pause_info`] on this partition alone (or the whole queue of one partition).
    async fn pause_info_one(&self) -> Result<Option<PauseInfo>> {
        let mut c = self.conn.clone();
        let flag: Option<String> = c.get(&self.keys().paused).await?;
        Ok(flag.map(|f| parse_pause_flag(&f)))
    }

    /// The busiest tenants (most ready + leased tasks first), at most `top`: ready counts from
    /// the first [`TENANT_SCAN_MAX`] members of the fair zset (so bounded in time; the
    /// counts are exact below that), leases from the per-tenant lease counts.
    pub async fn tenants(&self, top: usize) -> Result<Vec<TenantCount>> {
        if let Some(parts) = self.parts() {
            let all = Queue::fan(parts, |p| async move { p.tenants_one(usize::MAX).await }).await?;
            let mut by: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
            for t in all.into_iter().flatten() {
                let e = by.entry(t.tenant).or_default();
                e.0 += t.ready;
                e.1 += t.leased;
            }
            return Ok(busiest(by, top));
        }
        self.tenants_one(top).await
    }

    /// [`Queue::tenants`] on this partition alone (or the whole queue of one partition).
    async fn tenants_one(&self, top: usize) -> Result<Vec<TenantCount>> {
        let k = self.keys();
        let mut c = self.conn.clone();
        let (members, held): (Vec<String>, Vec<(String, i64)>) = redis::pipe()
            .zrange(&k.fair, 0, TENANT_SCAN_MAX as isize - 1)
            .hgetall(&k.fairc)
            .query_async(&mut c)
            .await?;
        // tenant -> (ready, leased)
        let mut by: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
        for m in &members {
            by.entry(Keys::split_fair_member(m).0.to_string())
                .or_default()
                .0 += 1;
        }
        for (t, n) in held.into_iter().filter(|(_, n)| *n > 0) {
            by.entry(t).or_default().1 = n.unsigned_abs();
        }
        Ok(busiest(by, top))
    }

    /// The upstream's circuit breaker, or None while it is closed. One `HGETALL`.
    ///
    /// A partitioned queue has a breaker per partition (partition.rs): the one most open
    /// (open before half-open, then the one open longest).
    pub async fn breaker(&self) -> Result<Option<BreakerInfo>> {
        if let Some(parts) = self.parts() {
            let all = Queue::fan(parts, |p| async move { p.breaker_one().await }).await?;
            return Ok(all
                .into_iter()
                .flatten()
                .min_by_key(|b| (b.state != BreakerState::Open, b.since_ms)));
        }
        self.breaker_one().await
    }

    /// [`Queue::breaker`] on this partition alone (or the whole queue of one partition).
    pub(crate) async fn breaker_one(&self) -> Result<Option<BreakerInfo>> {
        let mut c = self.conn.clone();
        let h: std::collections::HashMap<String, String> = c.hgetall(&self.keys().breaker).await?;
        let Some(st) = h.get("st") else {
            return Ok(None);
        };
        let n = |f: &str| h.get(f).and_then(|v| v.parse::<i64>().ok()).unwrap_or(0);
        let text = |f: &str| h.get(f).cloned().unwrap_or_default();
        let state = if st == "half" {
            BreakerState::HalfOpen
        } else {
            BreakerState::Open
        };
        Ok(Some(BreakerInfo {
            state,
            since_ms: n("since"),
            until_ms: if state == BreakerState::HalfOpen {
                n("pd")
            } else {
                n("to")
            },
            reason: text("why"),
            by: text("by"),
            probe: h.get("probe").filter(|p| !p.is_empty()).cloned(),
        }))
    }

    /// Which Redis this is: its version, key count and clock (the dashboard's Redis panel).
    pub async fn server_info(&self) -> Result<ServerInfo> {
        let mut c = self.conn.clone();
        let (info, keys, time): (String, u64, (i64, i64)) = redis::pipe()
            .cmd("INFO")
            .arg("server")
            .cmd("DBSIZE")
            .cmd("TIME")
            .query_async(&mut c)
            .await?;
        let version = info
            .lines()
            .find_map(|l| l.strip_prefix("redis_version:"))
            .unwrap_or("unknown")
            .trim()
            .to_string();
        Ok(ServerInfo {
            version,
            keys,
            now_ms: time.0 * 1000 + time.1 / 1000,
        })
    }

    /// Newest `count` entries of the global event stream, newest first.
    pub async fn events(&self, count: usize) -> Result<Vec<Event>> {
        if let Some(parts) = self.parts() {
            let all = Queue::fan(parts, |p| async move { p.events_one(count).await }).await?;
            let mut out: Vec<Event> = all.into_iter().flatten().collect();
            // Stream ids are "<ms>-<seq>" (Redis time of the partition's node).
            let key = |e: &Event| {
                let (ms, seq) = e.stream_id.split_once('-').unwrap_or((&e.stream_id, "0"));
                (
                    ms.parse::<u64>().unwrap_or(0),
                    seq.parse::<u64>().unwrap_or(0),
                )
            };
            out.sort_by_key(|e| std::cmp::Reverse(key(e)));
            out.truncate(count.clamp(1, 10_000));
            return Ok(out);
        }
        self.events_one(count).await
    }

    /// [`Queue::events`] on this partition alone (or the whole queue of one partition).
    async fn events_one(&self, count: usize) -> Result<Vec<Event>> {
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
                id: match g("id") {
                    id if id.is_empty() => None,
                    id => Some(decode::parse_id(&id)?),
                },
                detail: g("detail"),
            });
        }
        Ok(out)
    }
}

/// One page of a sorted set: its total between the bounds, whether more follow, (id, score)s.
struct ZPage {
    total: u64,
    more: bool,
    rows: Vec<(String, i64)>,
}

impl ZPage {
    fn last_cursor(&self) -> Option<String> {
        self.rows.last().map(|(id, s)| format!("{s}:{id}"))
    }
}

/// The busiest of `by` (tenant -> (ready, leased)): most work first, then by name.
fn busiest(by: std::collections::BTreeMap<String, (u64, u64)>, top: usize) -> Vec<TenantCount> {
    let mut out: Vec<TenantCount> = by
        .into_iter()
        .map(|(tenant, (ready, leased))| TenantCount {
            tenant,
            ready,
            leased,
        })
        .collect();
    out.sort_by(|a, b| {
        (b.ready + b.leased)
            .cmp(&(a.ready + a.leased))
            .then_with(|| a.tenant.cmp(&b.tenant))
    });
    out.truncate(top);
    out
}

/// The items of `found` in the order of `ids` (ids not found are left out).
fn in_order<T>(
    ids: &[&str],
    found: impl Iterator<Item = T>,
    id_of: impl Fn(&T) -> String,
) -> Vec<T> {
    let mut by: std::collections::HashMap<String, T> = found.map(|t| (id_of(&t), t)).collect();
    ids.iter().filter_map(|id| by.remove(*id)).collect()
}

/// The partitions' stats as one: counts summed, the oldest ready age the largest, paused if
/// any partition is, the minutes' counters summed by minute.
fn merge_stats(all: Vec<Stats>) -> Stats {
    let mut it = all.into_iter();
    let mut s = it.next().unwrap_or_default();
    for o in it {
        s.ready += o.ready;
        s.ready_background += o.ready_background;
        s.waiting += o.waiting;
        s.retrying += o.retrying;
        s.leased += o.leased;
        s.stuck += o.stuck;
        s.dead += o.dead;
        s.results += o.results;
        s.oldest_ready_age_ms = s.oldest_ready_age_ms.max(o.oldest_ready_age_ms);
        s.paused |= o.paused;
        s.now_ms = s.now_ms.max(o.now_ms);
        for b in o.throughput {
            if let Some(t) = s.throughput.iter_mut().find(|t| t.minute_ms == b.minute_ms) {
                t.completed += b.completed;
                t.failed += b.failed;
                t.polled += b.polled;
                t.ttr_sum_ms += b.ttr_sum_ms;
                t.ttr_count += b.ttr_count;
            }
        }
    }
    s
}

/// A histogram field's minute, kind (0 time to result, 1 polls, 2 upstream latency) and
/// bucket: "<minute_ms>:<t|p|l><bucket>" (prelude.lua, bump_tally).
fn parse_hist_field(field: &str) -> Option<(i64, usize, u32)> {
    let (minute, rest) = field.split_once(':')?;
    let kind = match rest.as_bytes().first()? {
        b't' => 0,
        b'p' => 1,
        b'l' => 2,
        _ => return None,
    };
    Some((minute.parse().ok()?, kind, rest[1..].parse().ok()?))
}

fn bad_cursor(c: &str) -> crate::error::QueueError {
    corrupt(format!("bad cursor {c:?}"))
}

/// "score:id" (an empty one is the first page).
/// Whether `c` has the shape of a cursor [`Queue::list`] hands out, so a caller can refuse an
/// edited one before asking: `<score>:<id>` in a sorted set; in the ready list's segments
/// `z:<score>:<id>` (due now), `f:<score>:<tenant>|<id>` (the tenants' fair queue),
/// `i:<id>` / `b:<id>` (the two ready lists), or a bare `z:`, `f:`, `i:`, `b:`.
///
/// A partitioned queue's ready cursor is `<partition>/<one of the above, or empty>`.
pub fn is_list_cursor(c: &str) -> bool {
    let scored = |rest: &str| parse_cursor(Some(rest)).is_ok_and(|p| p.is_some());
    if let Some((p, rest)) = c.split_once('/') {
        return p.len() <= 4
            && p.bytes().all(|b| b.is_ascii_digit())
            && !p.is_empty()
            && (rest.is_empty() || (!rest.contains('/') && is_list_cursor(rest)));
    }
    c.len() <= 200
        && match c.split_once(':') {
            Some(("i" | "b", id)) => id.len() <= 64,
            Some(("z" | "f", rest)) => rest.is_empty() || scored(rest),
            _ => scored(c),
        }
}

fn parse_cursor(cursor: Option<&str>) -> Result<Option<(i64, String)>> {
    match cursor {
        None | Some("") => Ok(None),
        Some(c) => {
            let (s, id) = c.split_once(':').ok_or_else(|| bad_cursor(c))?;
            Ok(Some((parse_i64(s)?, id.to_string())))
        }
    }
}

fn opt_str(v: &Value) -> Result<Option<String>> {
    match v {
        Value::Nil => Ok(None),
        other => string(other).map(Some),
    }
}

/// What [`Queue::server_info`] tells about the Redis server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerInfo {
    /// `redis_version` from `INFO server`.
    pub version: String,
    /// `DBSIZE` of the selected database.
    pub keys: u64,
    /// Redis time in ms.
    pub now_ms: i64,
}

/// "at|who" as the pause script writes it.
fn parse_pause_flag(flag: &str) -> PauseInfo {
    let (at, who) = flag.split_once('|').unwrap_or(("0", ""));
    PauseInfo {
        at_ms: at.parse().unwrap_or(0),
        who: who.to_string(),
    }
}

#[cfg(test)]
mod pause_flag_tests {
    #[test]
    fn parses_the_flag() {
        let p = super::parse_pause_flag("1796107267215|admin");
        assert_eq!((p.at_ms, p.who.as_str()), (1_796_107_267_215, "admin"));
        let p = super::parse_pause_flag("1");
        assert_eq!((p.at_ms, p.who.as_str()), (0, ""));
    }
}
