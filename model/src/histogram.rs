//! Log-scale histograms of whole numbers (milliseconds, poll counts), the shape the queue's
//! scripts count in Redis: one counter per bucket per minute, so a percentile over any span
//! is the sum of its minutes' buckets — mergeable, unlike stored percentiles, and bounded in
//! size whatever the traffic.
//!
//! Buckets: every value below 16 has its own; above, each doubling is cut in four (16–19,
//! 20–23, 24–27, 28–31, 32–39, …), so a bucket is at most 25% of its lower bound wide and a
//! percentile read from buckets is within about 12% of the exact one (we report the bucket's
//! middle). `queue/lua/prelude/counters.lua` (`hbucket`) computes the same index; a queue test checks
//! that they agree at every bucket edge.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Values at or above this share the last bucket (2^50 ms is 35,000 years).
pub const MAX_VALUE: u64 = (1 << 50) - 1;

/// The bucket of `v`.
pub fn bucket_of(v: u64) -> u32 {
    let v = v.min(MAX_VALUE);
    if v < 16 {
        return v as u32;
    }
    let e = 63 - v.leading_zeros(); // floor(log2 v), >= 4
    let base = 1u64 << e;
    16 + (e - 4) * 4 + ((v - base) / (base / 4)) as u32
}

/// The values of bucket `k`: `[low, high]`, both included.
pub fn bucket_range(k: u32) -> (u64, u64) {
    if k < 16 {
        return (u64::from(k), u64::from(k));
    }
    let e = 4 + (k - 16) / 4;
    let quarter = 1u64 << (e - 2);
    let low = (1u64 << e) + u64::from((k - 16) % 4) * quarter;
    (low, low + quarter - 1)
}

/// What a bucket stands for in a percentile: its middle (exact below 16).
pub fn bucket_value(k: u32) -> u64 {
    let (low, high) = bucket_range(k);
    low + (high - low) / 2
}

/// Counts per bucket.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Histogram(BTreeMap<u32, u64>);

impl Histogram {
    pub fn add(&mut self, bucket: u32, count: u64) {
        if count > 0 {
            *self.0.entry(bucket).or_default() += count;
        }
    }

    pub fn merge(&mut self, other: &Histogram) {
        for (k, n) in &other.0 {
            self.add(*k, *n);
        }
    }

    pub fn count(&self) -> u64 {
        self.0.values().sum()
    }

    /// The value below which a fraction `q` (0 < q ≤ 1) of the counted values fall (nearest
    /// rank), as its bucket's middle; None when nothing was counted.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (k, n) in &self.0 {
            seen += n;
            if seen >= rank {
                return Some(bucket_value(*k));
            }
        }
        self.0.keys().next_back().map(|k| bucket_value(*k))
    }

    /// p50, p95 and p99, or None when nothing was counted.
    pub fn percentiles(&self) -> Option<Percentiles> {
        Some(Percentiles {
            p50: self.quantile(0.50)?,
            p95: self.quantile(0.95)?,
            p99: self.quantile(0.99)?,
            count: self.count(),
        })
    }
}

/// Percentiles of a span, read from its histogram (each within a bucket's width).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Percentiles {
    pub p50: u64,
    pub p95: u64,
    pub p99: u64,
    /// How many values they are taken from.
    pub count: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_exact_below_16_then_quarters_of_each_doubling() {
        for v in 0..16 {
            assert_eq!(bucket_of(v), v as u32);
            assert_eq!(bucket_range(v as u32), (v, v));
        }
        assert_eq!(bucket_of(16), 16);
        assert_eq!(bucket_of(19), 16);
        assert_eq!(bucket_of(20), 17);
        assert_eq!(bucket_of(31), 19);
        assert_eq!(bucket_of(32), 20);
        assert_eq!(bucket_of(39), 20);
        assert_eq!(bucket_of(40), 21);
        assert_eq!(bucket_range(20), (32, 39));
        assert_eq!(bucket_of(u64::MAX), bucket_of(MAX_VALUE));
    }

    #[test]
    fn every_value_falls_in_its_own_buckets_range_and_ranges_tile() {
        let mut next = 0;
        for k in 0..=bucket_of(MAX_VALUE) {
            let (low, high) = bucket_range(k);
            assert_eq!(low, next, "bucket {k} starts where {} ended", k.max(1) - 1);
            assert!(high >= low);
            assert_eq!(bucket_of(low), k);
            assert_eq!(bucket_of(high), k);
            if low >= 16 {
                assert!(
                    (high - low + 1) * 4 <= low,
                    "bucket {k} is at most 25% wide"
                );
            }
            next = high + 1;
        }
        assert_eq!(next, MAX_VALUE + 1);
    }

    #[test]
    fn percentiles_by_nearest_rank_within_a_bucket() {
        let mut h = Histogram::default();
        assert_eq!(h.percentiles(), None);
        for v in 1..=100u64 {
            h.add(bucket_of(v), 1);
        }
        let p = h.percentiles().unwrap();
        assert_eq!(p.count, 100);
        let near = |got: u64, exact: u64| {
            let (low, high) = bucket_range(bucket_of(exact));
            assert!(
                (low..=high).contains(&got),
                "{got} in the bucket of {exact}"
            );
        };
        near(p.p50, 50);
        near(p.p95, 95);
        near(p.p99, 99);
        // Merging two halves gives the whole.
        let (mut a, mut b) = (Histogram::default(), Histogram::default());
        for v in 1..=100u64 {
            if v % 2 == 0 { &mut a } else { &mut b }.add(bucket_of(v), 1);
        }
        a.merge(&b);
        assert_eq!(a, h);
        // One value: every percentile is it.
        let mut one = Histogram::default();
        one.add(bucket_of(7), 3);
        assert_eq!(
            one.percentiles(),
            Some(Percentiles {
                p50: 7,
                p95: 7,
                p99: 7,
                count: 3
            })
        );
    }
}
