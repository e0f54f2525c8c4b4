//! The trace context a task carries — only while the process traces (issue 27). The queue
//! knows nothing of OpenTelemetry: the process that traces installs a [`Source`] that renders
//! the current span's W3C `traceparent`; with none installed (tracing off) nothing is asked,
//! no span is made and nothing is stored in the task record.
//!
//! What the record keeps (enqueue.lua): `tc`, the `traceparent` of the `create` span that
//! made the task; `tl`, those of the callers who joined it, space-separated, at most
//! [`MAX_LINKS`] (the worker links its `process` spans to all of them). A claim hands both to
//! the worker ([`crate::Claimed::trace`]), a read to the dashboard ([`model::TaskTrace`]).

use std::sync::OnceLock;

/// The `traceparent` of the current span, or `None` when it is not sampled or not traced.
pub type Source = fn() -> Option<String>;

static SOURCE: OnceLock<Source> = OnceLock::new();

/// The joiners' contexts a task keeps as links: bounded, so a hot query joined by thousands
/// of callers does not grow its record (the first joiners are kept).
pub const MAX_LINKS: usize = 8;

/// The length of a version-00 `traceparent`: `00-<32 hex>-<16 hex>-<2 hex>`.
pub const TRACEPARENT_LEN: usize = 55;

/// Turns trace contexts on for this process (once; a second call is ignored).
pub fn install(source: Source) {
    let _ = SOURCE.set(source);
}

/// Whether this process stores trace contexts in the tasks it makes.
pub fn enabled() -> bool {
    SOURCE.get().is_some()
}

/// The current span's `traceparent` when tracing is on and it is valid; "" otherwise (what
/// enqueue.lua takes for "none").
pub(crate) fn current() -> String {
    SOURCE
        .get()
        .and_then(|source| source())
        .filter(|tp| is_traceparent(tp))
        .unwrap_or_default()
}

/// A version-00 W3C `traceparent` with lower-case hex (the only form the record keeps; the
/// script checks the same).
pub fn is_traceparent(s: &str) -> bool {
    let b = s.as_bytes();
    let hex = |r: std::ops::Range<usize>| {
        b[r].iter()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
    };
    b.len() == TRACEPARENT_LEN
        && b.starts_with(b"00-")
        && b[35] == b'-'
        && b[52] == b'-'
        && hex(3..35)
        && hex(36..52)
        && hex(53..55)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_form() {
        let ok = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert!(is_traceparent(ok));
        assert!(!is_traceparent(&ok.to_uppercase()));
        assert!(!is_traceparent(&ok[1..]));
        assert!(!is_traceparent(&ok.replace("00-4b", "01-4b")));
        assert!(!is_traceparent(&ok.replace("-00f0", "x00f0")));
        assert!(!is_traceparent(""));
    }
}
