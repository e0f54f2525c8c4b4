//! Poll, deadline and error policies: pure functions from a task's counters, the clock and one
//! random number to the next step, so every rule is unit tested without Redis or HTTP.
//!
//! - **Poll policy** ("still processing"): first interval × multiplier^(n-1), capped at the
//!   maximum interval, ± jitter; at most `max_polls` calls answer processing.
//! - **Whole-life deadline**: set at enqueue (`EnqueuePolicy::deadline_ms`); a delay never
//!   reaches past it, and a task still not done when it passes goes dead with "deadline"
//!   (decided by the queue's scripts, see [`fit_deadline`]).
//! - **Error policy**: exponential backoff with full jitter (AWS's "Exponential Backoff and
//!   Jitter": `random(0, min(cap, base × 2^(n-1)))`), dead after `max_attempts` failures
//!   (the queue's `fail` script counts attempts the same way and names the reason
//!   "max_attempts"), or at once on a permanent error (a 4xx that retrying cannot fix).
//! - A `Retry-After` from the upstream wins when it is longer than the computed delay.
//!
//! No backoff crate fits: they drive a retry loop in one process, while here each retry is a
//! separate claim, possibly by another worker, so the step must be a function of stored counters.

use std::time::Duration;

use crate::upstream::UpstreamError;

/// Policy settings; the deadline and maximum attempts are stamped on each task at enqueue.
#[derive(clap::Args, Clone, Debug, PartialEq)]
pub struct PolicyArgs {
    /// First poll interval after a "processing" answer, in ms.
    #[arg(
        long = "poll-interval-ms",
        env = "REPOLL_POLL_INTERVAL_MS",
        default_value_t = 250
    )]
    pub poll_interval_ms: u64,
    /// Each further interval is the previous one times this.
    #[arg(
        long = "poll-multiplier",
        env = "REPOLL_POLL_MULTIPLIER",
        default_value_t = 1.5
    )]
    pub poll_multiplier: f64,
    /// Longest poll interval, in ms.
    #[arg(
        long = "poll-max-interval-ms",
        env = "REPOLL_POLL_MAX_INTERVAL_MS",
        default_value_t = 10_000
    )]
    pub poll_max_interval_ms: u64,
    /// Random spread of a poll interval, as a fraction (0.1 = ±10%), so polls started together
    /// do not stay in lockstep.
    #[arg(
        long = "poll-jitter",
        env = "REPOLL_POLL_JITTER",
        default_value_t = 0.1
    )]
    pub poll_jitter: f64,
    /// Most polls answering "processing" before the task goes dead (0 = no limit).
    #[arg(long = "max-polls", env = "REPOLL_MAX_POLLS", default_value_t = 200)]
    pub max_polls: u32,
    /// Whole-life deadline of a task from its creation, in ms (0 = none).
    #[arg(
        long = "deadline-ms",
        env = "REPOLL_DEADLINE_MS",
        default_value_t = 600_000
    )]
    pub deadline_ms: u64,
    /// Failed calls (timeouts, connection errors, HTTP errors, bad bodies) before a task is dead
    /// (0 = unlimited).
    #[arg(
        long = "max-attempts",
        env = "REPOLL_MAX_ATTEMPTS",
        default_value_t = 5
    )]
    pub max_attempts: u32,
    /// Backoff base after a failed call, in ms.
    #[arg(
        long = "backoff-base-ms",
        env = "REPOLL_BACKOFF_BASE_MS",
        default_value_t = 500
    )]
    pub backoff_base_ms: u64,
    /// Backoff cap, in ms.
    #[arg(
        long = "backoff-max-ms",
        env = "REPOLL_BACKOFF_MAX_MS",
        default_value_t = 30_000
    )]
    pub backoff_max_ms: u64,
}

impl Default for PolicyArgs {
    /// The flags' defaults (their `#[arg]` attributes are the one place a default is written), without reading the environment.
    fn default() -> Self {
        crate::clap_defaults()
    }
}

/// What to do with a task after a call.
#[derive(Clone, Debug, PartialEq)]
pub enum Next {
    /// Call again after this delay.
    Again(Duration),
    /// Give up: the task goes dead with this reason.
    Dead(String),
}

impl PolicyArgs {
    /// The per-task part of the policy, for `Queue::enqueue`.
    pub fn enqueue_policy(&self) -> queue::EnqueuePolicy {
        queue::EnqueuePolicy {
            deadline_ms: self.deadline_ms,
            max_attempts: self.max_attempts,
            ..queue::EnqueuePolicy::default()
        }
    }

    /// Interval after the `poll`-th call (1-based) answered processing, before jitter and
    /// `Retry-After`: `first × multiplier^(poll-1)`, capped.
    pub fn poll_interval(&self, poll: u32) -> Duration {
        let mult = if self.poll_multiplier.is_finite() {
            self.poll_multiplier.max(1.0)
        } else {
            1.0
        };
        let exp = i32::try_from(poll.saturating_sub(1)).unwrap_or(i32::MAX);
        let ms = self.poll_interval_ms as f64 * mult.powi(exp);
        let cap = self.poll_max_interval_ms.max(self.poll_interval_ms) as f64;
        Duration::from_millis(ms.min(cap) as u64)
    }

    /// Delay after the `poll`-th call answered processing: [`Self::poll_interval`] spread by
    /// ± jitter using `unit` (uniform in 0..1), then `retry_after` if longer.
    pub fn poll_delay(&self, poll: u32, retry_after: Option<Duration>, unit: f64) -> Duration {
        let jitter = if self.poll_jitter.is_finite() {
            self.poll_jitter.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let factor = 1.0 + jitter * (2.0 * unit.clamp(0.0, 1.0) - 1.0);
        let d = self.poll_interval(poll).mul_f64(factor);
        longest(d, retry_after)
    }

    /// Delay after the `failure`-th failed call (1-based): full jitter over
    /// `min(cap, base × 2^(failure-1))`, then `retry_after` if longer.
    pub fn backoff_delay(
        &self,
        failure: u32,
        retry_after: Option<Duration>,
        unit: f64,
    ) -> Duration {
        let exp = failure.saturating_sub(1).min(62);
        let ceiling = self
            .backoff_base_ms
            .saturating_mul(1u64 << exp)
            .min(self.backoff_max_ms.max(self.backoff_base_ms));
        let d = Duration::from_millis((ceiling as f64 * unit.clamp(0.0, 1.0)) as u64);
        longest(d, retry_after)
    }

    /// After a "processing" answer. `polls_before` = calls that answered processing before this
    /// one; times are ms since the epoch (Redis time), `deadline_ms` 0 = none. Dead only when
    /// the poll budget is spent; the deadline is applied by [`fit_deadline`].
    pub fn after_processing(
        &self,
        polls_before: u32,
        now_ms: i64,
        deadline_ms: i64,
        retry_after: Option<Duration>,
        unit: f64,
    ) -> Next {
        let poll = polls_before.saturating_add(1);
        if self.max_polls > 0 && poll >= self.max_polls {
            return Next::Dead(model::failure::max_polls(self.max_polls));
        }
        Next::Again(fit_deadline(
            self.poll_delay(poll, retry_after, unit),
            now_ms,
            deadline_ms,
        ))
    }

    /// After a failed call. `failures_before` = failed calls before this one; `max_attempts` is
    /// the task's own (stamped at enqueue; 0 = unlimited, as in the queue). Dead, with the
    /// error as reason, when the error is permanent or the attempts are spent.
    pub fn after_error(
        &self,
        failures_before: u32,
        max_attempts: u32,
        err: &UpstreamError,
        now_ms: i64,
        deadline_ms: i64,
        unit: f64,
    ) -> Next {
        let failure = failures_before.saturating_add(1);
        if err.is_permanent() || (max_attempts > 0 && failure >= max_attempts) {
            return Next::Dead(err.to_string());
        }
        Next::Again(fit_deadline(
            self.backoff_delay(failure, err.retry_after(), unit),
            now_ms,
            deadline_ms,
        ))
    }

    /// Checks the settings once at start-up.
    pub fn validate(&self) -> Result<(), String> {
        if self.poll_interval_ms == 0 {
            return Err("the poll interval must be > 0".into());
        }
        if !(self.poll_multiplier.is_finite() && self.poll_multiplier >= 1.0) {
            return Err("the poll multiplier must be >= 1".into());
        }
        if !(0.0..=1.0).contains(&self.poll_jitter) {
            return Err("the poll jitter must be within 0..=1".into());
        }
        Ok(())
    }
}

/// Fits a delay to the whole-life deadline (`deadline_ms` 0 = none). Before the deadline the
/// next call happens no later than it (one last look before giving up); once it has passed the
/// delay is at least 1 ms, so the next due time lies past the deadline and the queue's
/// `reschedule` / `fail` scripts turn the task dead with reason "deadline", atomically.
pub fn fit_deadline(delay: Duration, now_ms: i64, deadline_ms: i64) -> Duration {
    if deadline_ms <= 0 {
        return delay;
    }
    if now_ms < deadline_ms {
        let left = u64::try_from(deadline_ms - now_ms).unwrap_or(0);
        return delay.min(Duration::from_millis(left));
    }
    delay.max(Duration::from_millis(1))
}

fn longest(d: Duration, retry_after: Option<Duration>) -> Duration {
    retry_after.map_or(d, |r| r.max(d))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn p() -> PolicyArgs {
        PolicyArgs {
            poll_interval_ms: 100,
            poll_multiplier: 2.0,
            poll_max_interval_ms: 1000,
            poll_jitter: 0.0,
            max_polls: 10,
            deadline_ms: 0,
            max_attempts: 3,
            backoff_base_ms: 100,
            backoff_max_ms: 500,
        }
    }

    #[test]
    fn poll_intervals_grow_and_cap() {
        let got: Vec<_> = (1..=6).map(|n| p().poll_interval(n)).collect();
        assert_eq!(
            got,
            [ms(100), ms(200), ms(400), ms(800), ms(1000), ms(1000)]
        );
        assert_eq!(p().poll_interval(u32::MAX), ms(1000));
    }

    #[test]
    fn poll_jitter_stays_within_the_fraction() {
        let pol = PolicyArgs {
            poll_jitter: 0.2,
            ..p()
        };
        assert_eq!(pol.poll_delay(1, None, 0.0), ms(80));
        assert_eq!(pol.poll_delay(1, None, 0.5), ms(100));
        assert_eq!(pol.poll_delay(1, None, 1.0), ms(120));
    }

    #[test]
    fn retry_after_wins_only_when_longer() {
        assert_eq!(p().poll_delay(1, Some(ms(2000)), 0.5), ms(2000));
        assert_eq!(p().poll_delay(3, Some(ms(10)), 0.5), ms(400));
        assert_eq!(p().backoff_delay(1, Some(ms(3000)), 1.0), ms(3000));
    }

    #[test]
    fn backoff_is_full_jitter_under_a_capped_ceiling() {
        assert_eq!(p().backoff_delay(1, None, 1.0), ms(100));
        assert_eq!(p().backoff_delay(2, None, 1.0), ms(200));
        assert_eq!(p().backoff_delay(3, None, 0.5), ms(200));
        assert_eq!(p().backoff_delay(9, None, 1.0), ms(500));
        assert_eq!(p().backoff_delay(200, None, 1.0), ms(500));
        assert_eq!(p().backoff_delay(4, None, 0.0), ms(0));
    }

    #[test]
    fn max_polls_counts_processing_answers() {
        // 10 allowed: the 10th processing answer is the last straw.
        assert!(matches!(
            p().after_processing(8, 0, 0, None, 0.5),
            Next::Again(_)
        ));
        assert_eq!(
            p().after_processing(9, 0, 0, None, 0.5),
            Next::Dead("max polls (10) reached".into())
        );
        let unlimited = PolicyArgs {
            max_polls: 0,
            ..p()
        };
        assert!(matches!(
            unlimited.after_processing(1_000_000, 0, 0, None, 0.5),
            Next::Again(_)
        ));
    }

    #[test]
    fn deadline_clamps_then_passes_the_verdict_to_the_queue() {
        assert_eq!(
            p().after_processing(0, 1_000, 1_050, None, 0.5),
            Next::Again(ms(50))
        );
        assert_eq!(
            p().after_processing(0, 1_000, 0, None, 0.5),
            Next::Again(ms(100))
        );
        assert_eq!(fit_deadline(ms(0), 1_050, 1_050), ms(1));
        assert_eq!(fit_deadline(ms(300), 2_000, 1_050), ms(300));
        let err = UpstreamError::Connect("x".into());
        assert_eq!(
            p().after_error(0, 3, &err, 990, 1_000, 1.0),
            Next::Again(ms(10))
        );
    }

    #[test]
    fn errors_retry_then_die_with_the_last_error() {
        let err = UpstreamError::Status {
            code: 503,
            retry_after: None,
            message: None,
            body: String::new(),
        };
        assert!(matches!(p().after_error(0, 3, &err, 0, 0, 1.0), Next::Again(d) if d == ms(100)));
        assert!(matches!(p().after_error(1, 3, &err, 0, 0, 1.0), Next::Again(d) if d == ms(200)));
        assert_eq!(
            p().after_error(2, 3, &err, 0, 0, 1.0),
            Next::Dead("HTTP 503".into())
        );
        let gone = UpstreamError::Status {
            code: 404,
            retry_after: None,
            message: None,
            body: String::new(),
        };
        assert_eq!(
            p().after_error(0, 3, &gone, 0, 0, 1.0),
            Next::Dead("HTTP 404".into())
        );
        // 0 = unlimited, as in the queue.
        assert!(matches!(
            p().after_error(99, 0, &err, 0, 0, 1.0),
            Next::Again(_)
        ));
    }

    #[test]
    fn validation() {
        assert!(PolicyArgs::default().validate().is_ok());
        assert!(PolicyArgs {
            poll_multiplier: 0.5,
            ..p()
        }
        .validate()
        .is_err());
        assert!(PolicyArgs {
            poll_jitter: 2.0,
            ..p()
        }
        .validate()
        .is_err());
    }
}
