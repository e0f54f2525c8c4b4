//! Small formatting helpers shared by the admin pages. Times are shown relative to the
//! server's clock (`now_ms` of the data), so the server render and the hydrated page agree.

use leptos::prelude::ServerFnError;

/// The message of a server-function error, without the framework's prefix.
pub fn error_text(e: &ServerFnError) -> String {
    match e {
        ServerFnError::ServerError(m) => m.clone(),
        _ => "request failed".into(),
    }
}

/// A duration as "850ms", "12.3s", "4m 05s", "2h 03m".
pub fn duration(ms: i64) -> String {
    let a = ms.unsigned_abs();
    if a < 1000 {
        format!("{a}ms")
    } else if a < 60_000 {
        format!("{:.1}s", a as f64 / 1000.0)
    } else if a < 3_600_000 {
        format!("{}m {:02}s", a / 60_000, (a / 1000) % 60)
    } else {
        format!("{}h {:02}m", a / 3_600_000, (a / 60_000) % 60)
    }
}

/// "12.3s ago" / "in 4.0s" relative to `now`; "—" for 0 (unset).
pub fn relative(now: i64, at: i64) -> String {
    if at == 0 {
        "—".into()
    } else if at <= now {
        format!("{} ago", duration(now - at))
    } else {
        format!("in {}", duration(at - now))
    }
}

/// `s`, or "—" when empty. Every text the admin pages render goes through this or is never
/// empty: an empty text node does not survive the HTML round trip, and hydration then finds
/// something else where it expects text.
pub fn or_dash(s: impl Into<String>) -> String {
    let s = s.into();
    if s.is_empty() {
        "—".into()
    } else {
        s
    }
}

/// The first 12 characters of an id, enough to tell tasks apart in a table.
pub fn short(id: &str) -> String {
    id.chars().take(12).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(duration(850), "850ms");
        assert_eq!(duration(12_340), "12.3s");
        assert_eq!(duration(245_000), "4m 05s");
        assert_eq!(relative(10_000, 7_000), "3.0s ago");
        assert_eq!(relative(10_000, 0), "—");
        assert_eq!(short("0123456789abcdef"), "0123456789ab");
    }
}
