//! Throughput over time: per-minute and hourly counters and histograms, read per slot and
//! summed by point (`merge::throughput`).

use redis::AsyncCommands;

use crate::error::Result;
use crate::model::{Histogram, ThroughputBucket};
use crate::slot::Slot;
use crate::Queue;

use super::merge;

impl Queue {
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
        let all = self
            .fan(|s| async move { s.throughput_raw(minutes, per).await })
            .await?;
        let (mut out, hists) = merge::throughput(all);
        for (b, [ttr, polls, latency]) in out.iter_mut().zip(hists) {
            b.ttr = ttr.percentiles();
            b.polls = polls.percentiles();
            b.latency = latency.percentiles();
        }
        Ok(out)
    }
}

impl Slot {
    /// [`Queue::throughput`] of this slot, its histograms not yet made percentiles.
    pub(super) async fn throughput_raw(
        &self,
        minutes: usize,
        per: usize,
    ) -> Result<(Vec<ThroughputBucket>, Vec<[Histogram; 3]>)> {
        // The counters read, in the order `count` adds them.
        const FIELDS: [&str; 12] = [
            "completed",
            "failed",
            "polled",
            "ttr_sum",
            "fresh",
            "stale",
            "miss",
            "negative",
            "ahead",
            "refresh_failed",
            "dead",
            "breaker_opened",
        ];
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
                    Field::Counter(j) => count(b, j, v),
                    Field::Bucket(kind, bucket) => hists[i][kind].add(bucket, v),
                }
            }
        }
        Ok((out, hists))
    }
}

/// Adds `v` to a point's counter number `j` of `FIELDS` (`Slot::throughput_raw`).
fn count(b: &mut ThroughputBucket, j: usize, v: u64) {
    let c = match j {
        0 => {
            // Every completion counts its time to result.
            b.ttr_count += v;
            &mut b.completed
        }
        1 => &mut b.failed,
        2 => &mut b.polled,
        3 => &mut b.ttr_sum_ms,
        4 => &mut b.fresh,
        5 => &mut b.stale,
        6 => &mut b.miss,
        7 => &mut b.negative,
        8 => &mut b.ahead,
        9 => &mut b.refresh_failed,
        10 => &mut b.dead,
        _ => &mut b.breaker_opened,
    };
    *c += v;
}

/// A histogram field's minute, kind (0 time to result, 1 polls, 2 upstream latency) and
/// bucket: `"<minute_ms>:<t|p|l><bucket>"` (prelude/counters.lua, bump_tally).
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
