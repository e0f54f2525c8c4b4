//! One slot's pages: a sorted set between two bounds (list.lua), the slot's ready work across
//! its places, and the records of listed ids.

use redis::{AsyncCommands, Value};

use crate::decode::{self, array, int, parse_i64, string};
use crate::error::{corrupt, Result};
use crate::keys::Keys;
use crate::model::{Order, Page, StoredResult, Task};
use crate::scripts::SCRIPTS;
use crate::slot::Slot;

use super::list::parse_cursor;
use super::ZPage;
use super::MAX_PAGE;

impl Slot {
    /// Tasks ready now in this partition (both lists, the fair zset, the due-now polls).
    pub(super) async fn ready_count(&self, now: i64) -> Result<u64> {
        let (i, b, z, f) = self.ready_lengths(now).await?;
        Ok(i + b + z + f)
    }

    /// The lengths of the places ready work waits in: the interactive and background lists,
    /// the due-now part of the due zset, the fair zset.
    pub(super) async fn ready_lengths(&self, now: i64) -> Result<(u64, u64, u64, u64)> {
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

    /// This slot's ready work, across its places in `order` (see [`crate::Queue::list`]): the
    /// due-now polls, the tenants' fair queue, the interactive list, the background list.
    pub(super) async fn list_ready(
        &self,
        order: Order,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page> {
        let now = self.now_ms().await?;
        let (ilen, blen, zlen, flen) = self.ready_lengths(now).await?;
        let len_of = |s: &Seg| match s {
            Seg::Z => zlen,
            Seg::F => flen,
            Seg::I => ilen,
            Seg::B => blen,
        };
        let segs = match order {
            Order::OldestFirst => [Seg::Z, Seg::F, Seg::I, Seg::B],
            Order::NewestFirst => [Seg::B, Seg::I, Seg::F, Seg::Z],
        };
        let (start, mut anchor, mut zcursor) = parse_ready_cursor(cursor, segs[0])?;
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
            let got = match seg {
                Seg::I | Seg::B => {
                    let len = len_of(seg) as isize;
                    self.list_slice(*seg, len, anchor.as_deref(), want, order)
                        .await?
                }
                Seg::Z | Seg::F => self.zset_slice(*seg, zcursor.take(), want, order).await?,
            };
            rows.extend(got.rows);
            let later_nonempty = segs[i + 1..].iter().any(|s| len_of(s) > 0);
            // Rows this segment added filled the page: the cursor resumes in it, or at the
            // start of the next segment.
            if rows.len() == limit && (got.more || later_nonempty) {
                page.next_cursor = if got.more {
                    got.last.map(|l| format!("{}:{l}", seg.tag()))
                } else {
                    Some(format!("{}:", segs.get(i + 1).map_or("z", Seg::tag)))
                };
            }
        }
        page.items = self
            .fetch_tasks(&rows)
            .await?
            .into_iter()
            .flatten()
            .collect();
        Ok(page)
    }

    /// Up to `want` rows of a ready zset (Z: due now, with their due time; F: the tenants'
    /// fair queue, members `"<tenant>|<id>"`) after `cursor`.
    async fn zset_slice(
        &self,
        seg: Seg,
        cursor: Option<(i64, String)>,
        want: usize,
        order: Order,
    ) -> Result<SegPage> {
        let k = self.keys();
        let (key, max) = match seg {
            Seg::Z => (&k.due, "now"),
            _ => (&k.fair, "+inf"),
        };
        let z = self.zpage(key, "-inf", max, cursor, want, order).await?;
        let last = z.last_cursor();
        let rows = match seg {
            Seg::Z => z.rows.into_iter().map(|(id, s)| (id, Some(s))).collect(),
            _ => z
                .rows
                .into_iter()
                .map(|(m, _)| (Keys::split_fair_member(&m).1.to_string(), None))
                .collect(),
        };
        Ok(SegPage {
            rows,
            more: z.more,
            last,
        })
    }

    /// Up to `want` ids of a ready list (I or B, `len` long) after the id `anchor`, found
    /// again with LPOS so a task removed before it shifts nothing. If that id has left its
    /// list (claimed, which takes from the head), oldest-first restarts the list (repeating
    /// rather than skipping) and newest-first moves on (everything older left before it).
    async fn list_slice(
        &self,
        seg: Seg,
        len: isize,
        anchor: Option<&str>,
        want: usize,
        order: Order,
    ) -> Result<SegPage> {
        let k = self.keys();
        let key = if seg == Seg::I { &k.ready } else { &k.ready_bg };
        let mut c = self.conn.clone();
        let pos: Option<isize> = match anchor {
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
                let hi = match (anchor, pos) {
                    (None, _) => len - 1,
                    (Some(_), Some(p)) => p - 1,
                    (Some(_), None) => -1,
                };
                ((hi - n + 1).max(0), hi)
            }
        };
        if lo > hi || hi < 0 {
            return Ok(SegPage::default());
        }
        let mut ids: Vec<String> = c.lrange(key, lo, hi).await?;
        let more = match order {
            Order::OldestFirst => hi < len - 1,
            Order::NewestFirst => lo > 0,
        };
        if order == Order::NewestFirst {
            ids.reverse();
        }
        Ok(SegPage {
            last: ids.last().cloned(),
            rows: ids.into_iter().map(|id| (id, None)).collect(),
            more,
        })
    }

    /// One page of a sorted set between two bounds (list.lua).
    pub(super) async fn zpage(
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
        inv.given("zset", zset)
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

    /// The records of `ids` (with their due score where known), one per id: None for an id
    /// whose record vanished since it was listed.
    pub(super) async fn fetch_tasks(
        &self,
        ids: &[(String, Option<i64>)],
    ) -> Result<Vec<Option<Task>>> {
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
            let task = match decode::maybe_fields(pair[0].clone())? {
                Some(f) => Some(decode::task(id, &f, decode::opt_string(&pair[1])?, *score)?),
                None => None,
            };
            out.push(task);
        }
        Ok(out)
    }

    /// The stored results of `ids`, one per id: None for one expired since it was listed.
    pub(super) async fn fetch_results(
        &self,
        ids: &[(String, i64)],
    ) -> Result<Vec<Option<StoredResult>>> {
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
        ids.iter()
            .zip(rows)
            .map(|((id, _), row)| {
                row.map(|s| decode::packed_result(id, &s).map(|p| p.result))
                    .transpose()
            })
            .collect()
    }
}

/// The places ready work waits in, each a segment of a ready page: Z the due-now part of the
/// due zset (polls and retries), F the tenants' fair queue (prelude/fair.lua), I and B the
/// interactive and background lists.
#[derive(Clone, Copy, PartialEq)]
enum Seg {
    Z,
    F,
    I,
    B,
}

impl Seg {
    /// The segment's name in a cursor ("z:…", "f:…", "i:…", "b:…").
    fn tag(&self) -> &'static str {
        match self {
            Seg::Z => "z",
            Seg::F => "f",
            Seg::I => "i",
            Seg::B => "b",
        }
    }
}

/// What one segment gave a page: its rows (id, due time where known), whether it holds more
/// after them, and the cursor of its last row within it.
#[derive(Default)]
struct SegPage {
    rows: Vec<(String, Option<i64>)>,
    more: bool,
    last: Option<String>,
}

/// A sorted-set cursor: the (score, member) of the last row listed.
type ZCursor = (i64, String);

/// Where a slot's ready cursor resumes: the segment, the list anchor (`"i:<id>"` / `"b:<id>"`: the
/// last id listed) or the zset cursor (`"z:<score>:<id>"`, `"f:<score>:<member>"`, or a bare
/// `"<score>:<id>"`); no cursor starts at `first`.
fn parse_ready_cursor(
    cursor: Option<&str>,
    first: Seg,
) -> Result<(Seg, Option<String>, Option<ZCursor>)> {
    Ok(match cursor {
        None | Some("") => (first, None, None),
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
    })
}
