//! `Retry-After`: delay-seconds or an HTTP date.

use std::time::Duration;

/// `Retry-After` as delay-seconds or as an HTTP date (RFC 9110 allows both; a date in the
/// past means "now"). Anything else is ignored.
pub fn parse_retry_after(v: &str) -> Option<Duration> {
    parse_retry_after_at(v, std::time::SystemTime::now())
}

/// [`parse_retry_after`] against a given clock (for tests). The date is compared with this
/// host's clock: the upstream's clock is all an HTTP date can be measured against.
pub fn parse_retry_after_at(v: &str, now: std::time::SystemTime) -> Option<Duration> {
    let v = v.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}
