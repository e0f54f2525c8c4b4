//! What a refused request may write: a counter always, a log line at most a few a second,
//! and never more than [`TEXT_MAX`] bytes of the client's own text.
//!
//! Why: anyone, signed out, chooses the path, query and headers of a request, and a refusal
//! is cheap to provoke. When every refusal logged its whole path (up to the 64 KiB a request
//! line may hold), a few thousand requests a second wrote hundreds of MiB of log a second
//! (issue 39). So request text is [`clip`]ped wherever it reaches a log line or a span, and
//! refusals are [`refused`]: counted in `repoll_requests_refused_total{reason}` (the
//! operator's real measure), logged through one shared budget of [`LINES_PER_SECOND`]; a line
//! after a quiet spell says how many were left out.

use std::borrow::Cow;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

/// Counter: requests refused before any handler, by reason.
pub const REFUSED_METRIC: &str = "repoll_requests_refused_total";

/// Every reason [`refused`] is called with, so each series exists from 0.
pub const REASONS: [&str; 2] = ["cross_site", "metrics_unauthorized"];

/// The most bytes of a client's text (a path, a header value) put in a log line or a span
/// attribute. Real paths of this site are far shorter; a longer one is an attack or a mistake,
/// and its first 256 bytes say which.
pub const TEXT_MAX: usize = 256;

/// Refusal log lines a second, all reasons together (a burst of as many is allowed).
pub const LINES_PER_SECOND: u32 = 5;

/// `text` cut to at most [`TEXT_MAX`] bytes at a character boundary, with the number of
/// bytes left out, so a reader sees it was cut.
pub fn clip(text: &str) -> Cow<'_, str> {
    clip_to(text, TEXT_MAX)
}

/// [`clip`] with another bound (for values whose own limit is smaller).
pub fn clip_to(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}…(+{} bytes)", &text[..end], text.len() - end))
}

/// Lines of the shared budget; the count of lines left out since the last one written.
struct Budget {
    limiter: DefaultDirectRateLimiter,
    suppressed: AtomicU64,
}

fn budget() -> &'static Budget {
    static BUDGET: OnceLock<Budget> = OnceLock::new();
    BUDGET.get_or_init(|| Budget {
        limiter: RateLimiter::direct(Quota::per_second(
            NonZeroU32::new(LINES_PER_SECOND).expect("non-zero"),
        )),
        suppressed: AtomicU64::new(0),
    })
}

/// Counts a refusal (`reason` is one of [`REASONS`]) and logs it at WARN when the shared
/// budget allows: with the request's path clipped, and how many refusals went unlogged
/// before it.
pub fn refused(reason: &'static str, why: &str, path: &str) {
    metrics::counter!(REFUSED_METRIC, "reason" => reason).increment(1);
    let budget = budget();
    if budget.limiter.check().is_err() {
        budget.suppressed.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let suppressed = budget.suppressed.swap(0, Ordering::Relaxed);
    tracing::warn!(
        reason,
        why,
        path = %clip(path),
        suppressed,
        "request refused"
    );
}

/// Every refusal series at 0, for a dashboard that must see 0 before the first one.
pub fn register_counters() {
    for reason in REASONS {
        metrics::counter!(REFUSED_METRIC, "reason" => reason).increment(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_keeps_short_text_and_cuts_long_text_at_a_character() {
        assert_eq!(clip("/admin"), "/admin");
        let exact = "a".repeat(TEXT_MAX);
        assert!(matches!(clip(&exact), Cow::Borrowed(_)));
        let long = "é".repeat(1000);
        let cut = clip(&long);
        let kept = cut.split('…').next().unwrap();
        assert!(kept.len() <= TEXT_MAX && kept.len() >= TEXT_MAX - 1);
        assert!(cut.ends_with(&format!("(+{} bytes)", long.len() - kept.len())));
    }
}
