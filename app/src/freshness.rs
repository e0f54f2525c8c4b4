//! Whether a stored result is served, and how it is marked: fresh, or stale and why
//! (ARCHITECTURE.md, "A result's life"). The queue decides whether a task must run (enqueue.lua,
//! with Redis time); this decides what the caller is shown, from the result's age, the
//! queue's windows, the state of the refresh and what the caller accepts (`Cache-Control`
//! request directives, RFC 9111 §5.2.1). Plain data and pure functions, so the page (wasm)
//! and the server agree and the rules are tested without Redis.

use serde::{Deserialize, Serialize};

/// How fresh the stored answer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Freshness {
    /// Within its fresh window: answered as it is, no upstream call.
    Fresh,
    /// Past its fresh window, answered at once while it is refreshed (or while its refresh
    /// cannot run: `stale_reason` says why).
    Stale,
}

/// Why a stale result is served.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum StaleReason {
    /// A refresh runs (or waits its turn); the new result replaces this one when it is done.
    Refreshing,
    /// The last refresh failed (the upstream answered "failed", or gave up after its
    /// retries); a new one may start after the failed window.
    UpstreamFailed,
    /// The upstream's circuit breaker is open: the refresh waits until it closes.
    BreakerOpen,
    /// An operator paused the upstream: the refresh waits until it is resumed.
    Paused,
}

impl StaleReason {
    /// The refresh cannot get a new result now (stale-if-error applies).
    pub fn is_error(self) -> bool {
        !matches!(self, StaleReason::Refreshing)
    }

    /// The word sent in the API and in `Cache-Status`.
    pub fn as_str(self) -> &'static str {
        match self {
            StaleReason::Refreshing => "refreshing",
            StaleReason::UpstreamFailed => "upstream_failed",
            StaleReason::BreakerOpen => "breaker_open",
            StaleReason::Paused => "paused",
        }
    }
}

/// What the caller accepts of a stored result: the request directives of `Cache-Control`
/// (or the same text in the submit's `cache_control` field). Absent = the service's windows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheRequest {
    /// `max-age=N`: no result older than this (ms) is taken as fresh; a refresh starts.
    pub max_age_ms: Option<u64>,
    /// `max-stale[=N]`: a stale result is taken up to N ms past its fresh window (`Some(None)`:
    /// any staleness the service keeps).
    pub max_stale_ms: Option<Option<u64>>,
    /// `no-cache`: nothing stored is taken; a refresh starts now (or the running one is joined).
    pub no_cache: bool,
    /// `only-if-cached`: never start a task; what is stored or running, or nothing.
    pub only_if_cached: bool,
}

/// The longest number of seconds a directive may carry (RFC 9111 §1.2.2 caps delta-seconds at
/// 2^31; larger values are taken as this).
pub const MAX_DELTA_SECONDS: u64 = 2_147_483_648;

impl CacheRequest {
    /// Parses the request directives of a `Cache-Control` value (case-insensitive names,
    /// comma-separated, `"…"` values allowed). Directives it does not know are ignored, as
    /// RFC 9111 asks; a known one with a malformed value is an error (`Err` names it) rather
    /// than a silent default.
    pub fn parse(value: &str) -> Result<CacheRequest, String> {
        let mut out = CacheRequest::default();
        for part in value.split(',') {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let (name, arg) = match part.split_once('=') {
                Some((n, v)) => (n.trim(), Some(v.trim().trim_matches('"'))),
                None => (part, None),
            };
            let seconds = |arg: Option<&str>| -> Result<u64, String> {
                let v = arg.ok_or_else(|| format!("{name} needs a number of seconds"))?;
                if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(format!("{name}={v}: not a whole number of seconds"));
                }
                // Digits only: a parse failure is an overflow, which the RFC caps.
                Ok(v.parse::<u64>().unwrap_or(u64::MAX).min(MAX_DELTA_SECONDS) * 1000)
            };
            match name.to_ascii_lowercase().as_str() {
                "max-age" => out.max_age_ms = Some(seconds(arg)?),
                "max-stale" => {
                    out.max_stale_ms = Some(match arg {
                        None => None,
                        Some(_) => Some(seconds(arg)?),
                    })
                }
                "no-cache" => out.no_cache = true,
                "only-if-cached" => out.only_if_cached = true,
                _ => {}
            }
        }
        Ok(out)
    }

    /// The oldest result taken as fresh (ms), for the queue: `no-cache` is 0.
    pub fn max_age_for_queue(&self) -> Option<u64> {
        if self.no_cache {
            Some(0)
        } else {
            self.max_age_ms
        }
    }

    /// Whether a result this old (ms), past its fresh window by `staleness` ms, is one the
    /// caller takes as it is: the service's windows decide whether it may be served at all
    /// ([`servable`]); this is the caller's side. With `max-age` (or `no-cache`) and no
    /// `max-stale`, nothing older than the max age is taken.
    pub fn accepts(&self, age_ms: u64, staleness_ms: u64) -> bool {
        if let Some(max_age) = self.max_age_for_queue() {
            if age_ms > max_age && self.max_stale_ms.is_none() {
                return false;
            }
        }
        match self.max_stale_ms {
            Some(Some(limit)) => staleness_ms <= limit,
            _ => true,
        }
    }
}

/// The windows of one upstream, as the view needs them (ms).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Windows {
    pub fresh_ms: u64,
    pub stale_ms: u64,
    pub stale_if_error_ms: u64,
}

/// Whether the service may serve a result past its fresh window by `staleness_ms`: within the
/// stale window always; within the stale-if-error window that follows only when its refresh
/// cannot bring a new one (`reason` is an error).
pub fn servable(w: &Windows, staleness_ms: u64, reason: Option<StaleReason>) -> bool {
    staleness_ms < w.stale_ms
        || (reason.is_some_and(StaleReason::is_error)
            && staleness_ms < w.stale_ms.saturating_add(w.stale_if_error_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directives_parse_like_the_rfc_says() {
        let r = CacheRequest::parse("Max-Age=60, max-stale, only-if-cached, x-unknown=1").unwrap();
        assert_eq!(r.max_age_ms, Some(60_000));
        assert_eq!(r.max_stale_ms, Some(None));
        assert!(r.only_if_cached && !r.no_cache);
        let r = CacheRequest::parse("no-cache,max-stale=\"5\"").unwrap();
        assert_eq!(r.max_age_for_queue(), Some(0));
        assert_eq!(r.max_stale_ms, Some(Some(5_000)));
        assert_eq!(
            CacheRequest::parse("max-age=99999999999999999999")
                .unwrap()
                .max_age_ms,
            Some(MAX_DELTA_SECONDS * 1000)
        );
        assert!(CacheRequest::parse("max-age=-1").is_err());
        assert!(CacheRequest::parse("max-age").is_err());
        assert!(CacheRequest::parse("max-stale=soon").is_err());
        assert_eq!(CacheRequest::parse("").unwrap(), CacheRequest::default());
    }

    #[test]
    fn the_caller_and_the_windows_each_have_a_say() {
        let w = Windows {
            fresh_ms: 1_000,
            stale_ms: 500,
            stale_if_error_ms: 2_000,
        };
        assert!(servable(&w, 499, Some(StaleReason::Refreshing)));
        assert!(!servable(&w, 500, Some(StaleReason::Refreshing)));
        assert!(!servable(&w, 500, None));
        assert!(servable(&w, 2_499, Some(StaleReason::BreakerOpen)));
        assert!(!servable(&w, 2_500, Some(StaleReason::UpstreamFailed)));
        let any = CacheRequest::default();
        assert!(any.accepts(1_400, 400));
        let strict = CacheRequest {
            max_age_ms: Some(1_200),
            ..any
        };
        assert!(!strict.accepts(1_400, 400), "older than max-age");
        let lenient = CacheRequest {
            max_stale_ms: Some(Some(450)),
            ..strict
        };
        assert!(lenient.accepts(1_400, 400), "max-stale widens max-age");
        assert!(!lenient.accepts(1_500, 500));
        let no_cache = CacheRequest {
            no_cache: true,
            ..any
        };
        assert!(!no_cache.accepts(1, 0));
    }
}
