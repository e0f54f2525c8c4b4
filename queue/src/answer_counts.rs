//! The answers a queue handle gave, by kind and partition, counted in this process's memory
//! and added to each partition's per-minute counters (`{q}:tp`, the dashboard's "answers by
//! freshness") about once a second by `count_answers.lua`.
//!
//! Why not in the enqueue script, as before: that was one more write in every enqueue, a
//! fresh hit's included (issue 42 gives it back), and a fresh hit answered from memory
//! (`hot_results`) runs no script at all. What it costs: a process that ends without its
//! last flush loses at most its last second of counts — never an answer; a handle flushes
//! when asked ([`crate::Queue::flush_answer_counts`]: shutdown, tests).
//! `ahead` (refreshes ahead started) stays in the script, which reads it for its limit.

use crate::model::Enqueued;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// How often the counts are written.
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// The kinds of answer, in count_answers.lua's argument order.
pub(crate) const KINDS: usize = 4;

/// Which counter an enqueue's answer goes to: `fresh`, `stale`, `miss` (a task created or
/// joined, or nothing cached for an only-if-cached ask), `negative`.
pub(crate) fn kind_of(answer: &Enqueued) -> usize {
    match answer {
        Enqueued::Stored(_) => 0,
        Enqueued::Stale { .. } => 1,
        Enqueued::Created(_) | Enqueued::Joined(_) | Enqueued::NotCached => 2,
        Enqueued::Negative(_) => 3,
    }
}

/// One handle's counts not yet written, per partition.
pub(crate) struct AnswerCounts {
    counts: Vec<[AtomicU64; KINDS]>,
    /// Whether the flushing task was started (on the first count, inside the runtime).
    pub flusher: AtomicBool,
}

impl AnswerCounts {
    pub(crate) fn new(partitions: usize) -> AnswerCounts {
        AnswerCounts {
            counts: (0..partitions.max(1))
                .map(|_| std::array::from_fn(|_| AtomicU64::new(0)))
                .collect(),
            flusher: AtomicBool::new(false),
        }
    }

    pub(crate) fn add(&self, partition: usize, kind: usize) {
        if let Some(c) = self.counts.get(partition).and_then(|c| c.get(kind)) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Partition `p`'s counts, taken (a failed write gives them back).
    pub(crate) fn take(&self, p: usize) -> [u64; KINDS] {
        std::array::from_fn(|k| self.counts[p][k].swap(0, Ordering::AcqRel))
    }

    pub(crate) fn give_back(&self, p: usize, n: [u64; KINDS]) {
        for (c, n) in self.counts[p].iter().zip(n) {
            c.fetch_add(n, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_taken_once_and_given_back_whole() {
        let c = AnswerCounts::new(2);
        c.add(1, 0);
        c.add(1, 0);
        c.add(1, 3);
        c.add(7, 0); // no such partition: nothing, no panic
        assert_eq!(c.take(0), [0; KINDS]);
        let taken = c.take(1);
        assert_eq!(taken, [2, 0, 0, 1]);
        assert_eq!(c.take(1), [0; KINDS]);
        c.give_back(1, taken);
        c.add(1, 2);
        assert_eq!(c.take(1), [2, 0, 1, 1]);
    }
}
