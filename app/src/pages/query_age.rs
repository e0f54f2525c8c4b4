//! The query page's freshness line: how old a stored result is and what is being done about
//! it, in words ("as of 12 min ago · refreshing…", "Could not refresh: the upstream failed.
//! Showing the result from 2 h ago."). Pure functions of the view, the page's clock and the
//! pause flag, so the server's render and the hydrated page say the same thing, and the words
//! are tested without a browser.

use crate::query_view::{Freshness, QueryStatus, QueryView, StaleReason};

use super::format::ago;

/// The tone of the line: plain (the result is what the user asked for, or is being replaced)
/// or a warning (it is old and cannot be replaced now).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tone {
    Plain,
    /// A refresh runs: shown as a banner that moves, so the wait is seen (issue 43, row 9).
    Busy,
    Warn,
}

/// What the freshness line says about `v` at `clock` (ms), or `None` when the view is not a
/// stored result: a query's progress, or a failure (a cached failure stays a failure, shown
/// as such). `paused` is the page's latest word on the service's pause (it is checked while
/// the page follows the query): it overrides what the view said when it was read, so a
/// refresh held by a pause says so, and one let go by a resume says "refreshing".
pub fn freshness_line(v: &QueryView, clock: i64, paused: bool) -> Option<(Tone, String)> {
    if v.status != QueryStatus::Done {
        return None;
    }
    let freshness = v.freshness?;
    let age = ago(clock, stored_at(v, clock));
    // "Showing the result from just now" reads oddly (a stale result that young only comes
    // with a very short fresh window).
    let from = if age == "just now" {
        "a moment ago"
    } else {
        age.as_str()
    };
    let reason = match v.stale_reason {
        Some(StaleReason::Refreshing) if paused => Some(StaleReason::Paused),
        Some(StaleReason::Paused) if !paused => Some(StaleReason::Refreshing),
        r => r,
    };
    let refreshing = if v.refreshing {
        " · refreshing…"
    } else {
        ""
    };
    Some(match (freshness, reason) {
        (Freshness::Fresh, _) if v.refreshing => (Tone::Busy, format!("as of {age}{refreshing}")),
        (Freshness::Fresh, _) => (Tone::Plain, format!("as of {age}")),
        (Freshness::Stale, Some(StaleReason::Refreshing)) => {
            (Tone::Busy, format!("as of {age} · refreshing…"))
        }
        (Freshness::Stale, Some(StaleReason::UpstreamFailed)) => (
            Tone::Warn,
            format!("Could not refresh: the upstream failed. Showing the result from {from}."),
        ),
        (Freshness::Stale, Some(StaleReason::BreakerOpen)) => (
            Tone::Warn,
            format!(
                "Could not refresh yet: the upstream is failing, so calls to it are on hold. \
                 Showing the result from {from}; it is refreshed when the upstream recovers."
            ),
        ),
        (Freshness::Stale, Some(StaleReason::Paused)) => (
            Tone::Warn,
            format!(
                "Not refreshed yet: the service is paused. Showing the result from {from}; it is \
                 refreshed when the service resumes."
            ),
        ),
        // Read, not asked: nothing refreshes it until someone asks again.
        (Freshness::Stale, None) => (
            Tone::Warn,
            format!("as of {age} · out of date: ask it again to refresh it"),
        ),
    })
}

/// When the stored answer was made (ms): the read time less its age then. The age then grows
/// with the page's clock, never below what the server said (a browser clock behind the
/// server's would otherwise make it younger).
fn stored_at(v: &QueryView, clock: i64) -> i64 {
    let age = i64::try_from(v.age_ms.unwrap_or(0)).unwrap_or(i64::MAX);
    v.as_of.min(clock).saturating_sub(age)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = 60_000;

    fn stored(freshness: Freshness, reason: Option<StaleReason>, refreshing: bool) -> QueryView {
        QueryView {
            id: "0123456789abcdef0123456789abcdef".parse().unwrap(),
            query: "q".into(),
            upstream: "default".into(),
            status: QueryStatus::Done,
            partial: None,
            result: Some(serde_json::json!({"a": 1})),
            error: None,
            polls: 2,
            next_poll_at: None,
            created_at: 1_000,
            updated_at: 2_000,
            completed_at: Some(2_000),
            as_of: 2_000 + 12 * MIN,
            freshness: Some(freshness),
            age_ms: Some(12 * MIN as u64),
            fresh_until: Some(2_000 + 5 * MIN),
            stale_reason: reason,
            refreshing,
        }
    }

    fn line(v: &QueryView, clock: i64, paused: bool) -> String {
        freshness_line(v, clock, paused).unwrap().1
    }

    #[test]
    fn a_stale_result_says_its_age_and_that_it_is_refreshed() {
        let v = stored(Freshness::Stale, Some(StaleReason::Refreshing), true);
        assert_eq!(line(&v, v.as_of, false), "as of 12 min ago · refreshing…");
        // The age ticks with the page's clock.
        assert_eq!(
            line(&v, v.as_of + 2 * MIN, false),
            "as of 14 min ago · refreshing…"
        );
        // A browser clock behind the server's never makes it younger.
        assert_eq!(
            line(&v, v.as_of - 5 * MIN, false),
            "as of 12 min ago · refreshing…"
        );
        // Shown as a moving banner while it runs (issue 43, row 9); a fresh result at rest is
        // plain text.
        assert_eq!(freshness_line(&v, v.as_of, false).unwrap().0, Tone::Busy);
        let resting = stored(Freshness::Fresh, None, false);
        assert_eq!(
            freshness_line(&resting, resting.as_of, false).unwrap().0,
            Tone::Plain
        );
    }

    #[test]
    fn a_refresh_that_cannot_run_says_why_and_how_old_the_result_is() {
        let mut v = stored(Freshness::Stale, Some(StaleReason::UpstreamFailed), false);
        v.age_ms = Some(120 * MIN as u64);
        assert_eq!(
            freshness_line(&v, v.as_of, false),
            Some((
                Tone::Warn,
                "Could not refresh: the upstream failed. Showing the result from 2 h ago.".into()
            ))
        );
        let breaker = stored(Freshness::Stale, Some(StaleReason::BreakerOpen), true);
        assert!(line(&breaker, breaker.as_of, false).starts_with("Could not refresh yet"));
        let paused = stored(Freshness::Stale, Some(StaleReason::Paused), true);
        assert!(line(&paused, paused.as_of, true).contains("the service is paused"));
        v.age_ms = Some(300);
        assert!(line(&v, v.as_of, false).ends_with("Showing the result from a moment ago."));
        // The page learnt of a resume since the view was read, and the other way round.
        assert_eq!(
            line(&paused, paused.as_of, false),
            "as of 12 min ago · refreshing…"
        );
        let refreshing = stored(Freshness::Stale, Some(StaleReason::Refreshing), true);
        assert!(line(&refreshing, refreshing.as_of, true).contains("the service is paused"));
    }

    #[test]
    fn fresh_results_say_their_age_and_failures_stay_failures() {
        let mut v = stored(Freshness::Fresh, None, false);
        v.age_ms = Some(3 * MIN as u64);
        assert_eq!(line(&v, v.as_of, false), "as of 3 min ago");
        v.refreshing = true;
        assert_eq!(line(&v, v.as_of, false), "as of 3 min ago · refreshing…");
        v.age_ms = Some(0);
        v.refreshing = false;
        assert_eq!(line(&v, v.as_of, false), "as of just now");
        let negative = QueryView {
            status: QueryStatus::Failed,
            result: None,
            error: Some("the upstream failed".into()),
            ..v.clone()
        };
        assert_eq!(freshness_line(&negative, v.as_of, false), None);
        let progress = QueryView {
            status: QueryStatus::Processing,
            freshness: None,
            ..v
        };
        assert_eq!(freshness_line(&progress, 0, false), None);
        let read_only = stored(Freshness::Stale, None, false);
        assert!(
            line(&read_only, read_only.as_of, false).starts_with("as of 12 min ago · out of date")
        );
    }
}
