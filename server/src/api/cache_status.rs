//! What a query answer says about where it came from, in the headers caches and clients
//! read: `Age` (RFC 9111 §5.1), `Cache-Control` and `Cache-Status` (RFC 9211), from the view
//! the answer carries (`app::freshness` decided it) and how a submit was answered.

use app::query_view::{Answered, Freshness, QueryView, StaleReason};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue};

/// The `Cache-Status` header (RFC 9211).
pub static CACHE_STATUS: HeaderName = HeaderName::from_static("cache-status");

/// The cache's name in `Cache-Status`.
const CACHE_NAME: &str = "repoll";

/// Seconds, rounded down, of a duration in ms (negative stays negative).
fn seconds(ms: i64) -> i64 {
    ms.div_euclid(1000)
}

/// The `Cache-Status` value for `view`; `answered` is how a submit was answered (None for a
/// read). Examples: `repoll; hit; ttl=86399`, `repoll; fwd=stale; fwd-status=202; ttl=-12;
/// collapsed; detail=refreshing`, `repoll; hit; ttl=-90000; detail=upstream_failed` (stale,
/// nothing forwarded), `repoll; fwd=miss; stored`, `repoll; fwd=request; ttl=60; stored` (a
/// fresh result refused by `no-cache`, its refresh back within the first-answer wait).
///
/// RFC 9211: `hit` only when nothing was forwarded for this answer; an ask that started or
/// joined a refresh says `fwd=` whatever the answer turned out to be (the old result, the
/// refresh's progress, or its new result), and `collapsed` only ever stands beside `fwd`.
pub fn cache_status(view: &QueryView, answered: Option<Answered>) -> String {
    let ttl = view.fresh_until.map(|until| seconds(until - view.as_of));
    let mut parts: Vec<String> = vec![CACHE_NAME.into()];
    let collapsed = matches!(
        answered,
        Some(
            Answered::Joined
                | Answered::Stored {
                    collapsed: true,
                    ..
                }
        )
    );
    // Forwarded: a refresh went (or was already going) to the upstream for this answer. A
    // stale answer that sent nothing on (its refresh failed within the failed window, or the
    // caller asked only for what is cached) is a hit, as RFC 9211 has it, with a negative ttl.
    let (forwarded, refreshed, refused) = match answered {
        Some(Answered::Stored {
            refresh_started,
            collapsed,
            refused,
        }) => (refresh_started || collapsed, refresh_started, refused),
        Some(_) => (true, false, false),
        None => (view.refreshing, false, false),
    };
    // Why a submit's refresh was forwarded: the caller refused a fresh result, or it was stale.
    let fwd_refresh = if refused { "fwd=request" } else { "fwd=stale" };
    // A new task or a joined one went to the upstream, even when its result came back within
    // the first-answer wait and is shown as a fresh stored result.
    let asked_upstream = matches!(answered, Some(Answered::Created | Answered::Joined));
    // A submit whose refresh came back within the first-answer wait: the answer is the new
    // result, fresh, and it came from upstream for this ask (the refresh it started or joined).
    let fresh_from_upstream = answered.is_some() && forwarded;
    match view.freshness {
        _ if asked_upstream => parts.push("fwd=miss".into()),
        Some(Freshness::Fresh) if fresh_from_upstream => parts.push(fwd_refresh.into()),
        Some(Freshness::Fresh) => parts.push("hit".into()),
        Some(Freshness::Stale) if !forwarded => parts.push("hit".into()),
        Some(Freshness::Stale) => {
            parts.push(fwd_refresh.into());
            // What the refresh's upstream side says right now, as our API would.
            let status = match view.stale_reason {
                Some(StaleReason::Refreshing) => Some(202),
                Some(StaleReason::UpstreamFailed) => Some(502),
                Some(StaleReason::BreakerOpen | StaleReason::Paused) => Some(503),
                None => None,
            };
            if let Some(s) = status {
                parts.push(format!("fwd-status={s}"));
            }
        }
        None => {
            // A task's progress: a new ask forwarded (the result will be stored), a join, or
            // a result too old for this caller while its refresh runs.
            let stored = matches!(answered, Some(Answered::Stored { .. }));
            parts.push(if stored { fwd_refresh } else { "fwd=miss" }.into());
        }
    }
    if view.freshness.is_some() && !asked_upstream {
        if let Some(t) = ttl {
            parts.push(format!("ttl={t}"));
        }
    }
    // The response this ask had fetched is now stored: a new task's, or the refresh this ask
    // started when its result came within the wait.
    let fresh_result = view.freshness == Some(Freshness::Fresh) && view.result.is_some();
    if matches!(answered, Some(Answered::Created)) || (refreshed && fresh_result) {
        parts.push("stored".into());
    }
    if collapsed {
        parts.push("collapsed".into());
    }
    if let Some(r) = view.stale_reason {
        parts.push(format!("detail={}", r.as_str()));
    } else if view.freshness.is_some() && view.result.is_none() {
        parts.push("detail=negative".into());
    }
    parts.join("; ")
}

/// Puts `Age`, `Cache-Control` and `Cache-Status` on a query answer. A stored answer carries
/// its age and how long it stays fresh (`max-age=0` once stale); a task's progress is not to
/// be kept by anyone (`no-store`): it changes with every poll.
pub fn insert(headers: &mut HeaderMap, view: &QueryView, answered: Option<Answered>) {
    let mut put = |name: HeaderName, value: String| {
        if let Ok(v) = HeaderValue::from_str(&value) {
            headers.insert(name, v);
        }
    };
    match (view.freshness, view.age_ms) {
        (Some(f), Some(age)) => {
            put(header::AGE, (age / 1000).to_string());
            let left = match f {
                Freshness::Fresh => view
                    .fresh_until
                    .map_or(0, |until| seconds(until - view.as_of).max(0)),
                Freshness::Stale => 0,
            };
            put(header::CACHE_CONTROL, format!("max-age={left}"));
        }
        _ => put(header::CACHE_CONTROL, "no-store".into()),
    }
    put(CACHE_STATUS.clone(), cache_status(view, answered));
}

#[cfg(test)]
mod tests {
    use super::*;
    use app::query_view::QueryStatus;

    fn view(
        freshness: Option<Freshness>,
        reason: Option<StaleReason>,
        refreshing: bool,
    ) -> QueryView {
        QueryView {
            id: model::TaskId::of_query("x"),
            query: "x".into(),
            upstream: "default".into(),
            status: QueryStatus::Done,
            partial: None,
            result: Some(serde_json::json!(1)),
            error: None,
            polls: 0,
            next_poll_at: None,
            created_at: 0,
            updated_at: 0,
            completed_at: Some(0),
            as_of: 100_000,
            freshness,
            age_ms: Some(100_000),
            fresh_until: Some(160_000),
            stale_reason: reason,
            refreshing,
        }
    }

    #[test]
    fn each_kind_of_answer_says_where_it_came_from() {
        let fresh = view(Some(Freshness::Fresh), None, false);
        let stored = Answered::Stored {
            refresh_started: false,
            collapsed: false,
            refused: false,
        };
        assert_eq!(cache_status(&fresh, Some(stored)), "repoll; hit; ttl=60");
        // A new task whose result came back within the first-answer wait went upstream.
        assert_eq!(
            cache_status(&fresh, Some(Answered::Created)),
            "repoll; fwd=miss; stored"
        );
        assert_eq!(
            cache_status(&fresh, Some(Answered::Joined)),
            "repoll; fwd=miss; collapsed"
        );
        let failed = view(
            Some(Freshness::Stale),
            Some(StaleReason::UpstreamFailed),
            false,
        );
        let mut stale_failed = failed.clone();
        stale_failed.fresh_until = Some(40_000);
        assert_eq!(
            cache_status(&stale_failed, Some(stored)),
            "repoll; hit; ttl=-60; detail=upstream_failed"
        );
        let joined = Answered::Stored {
            refresh_started: false,
            collapsed: true,
            refused: false,
        };
        let mut held = view(Some(Freshness::Stale), Some(StaleReason::BreakerOpen), true);
        held.fresh_until = Some(40_000);
        assert_eq!(
            cache_status(&held, Some(joined)),
            "repoll; fwd=stale; fwd-status=503; ttl=-60; collapsed; detail=breaker_open"
        );
        // A read of a stale result whose refresh runs: forwarded by an earlier ask.
        assert!(cache_status(&held, None).starts_with("repoll; fwd=stale; fwd-status=503"));
    }

    /// Issue 39 row 4: a fresh result refused by the caller (`no-cache`), its refresh back
    /// within the first-answer wait, went upstream: `fwd=request`, never `hit`; the ask that
    /// joined that refresh says `collapsed` beside the `fwd`.
    #[test]
    fn a_refresh_back_within_the_wait_is_forwarded_not_a_hit() {
        let mut fresh = view(Some(Freshness::Fresh), None, false);
        fresh.age_ms = Some(0);
        let ask = |refresh_started, collapsed, refused| Answered::Stored {
            refresh_started,
            collapsed,
            refused,
        };
        assert_eq!(
            cache_status(&fresh, Some(ask(true, false, true))),
            "repoll; fwd=request; ttl=60; stored"
        );
        assert_eq!(
            cache_status(&fresh, Some(ask(false, true, true))),
            "repoll; fwd=request; ttl=60; collapsed"
        );
        // A result past its windows, refreshed within the wait: forwarded for staleness.
        assert_eq!(
            cache_status(&fresh, Some(ask(true, false, false))),
            "repoll; fwd=stale; ttl=60; stored"
        );
        // The refresh's progress, the fresh result having been refused.
        let mut progress = view(None, None, true);
        progress.result = None;
        assert_eq!(
            cache_status(&progress, Some(ask(true, false, true))),
            "repoll; fwd=request"
        );
        for a in [ask(true, false, true), ask(false, true, false)] {
            let cs = cache_status(&fresh, Some(a));
            assert!(!cs.contains("hit"), "{cs}");
        }
    }
}
