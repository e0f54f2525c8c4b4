//! A task's last error: the forms the worker stores it in, and [`public_reason`], the one
//! function that turns a dead task's reason and stored error into what the public sees.
//!
//! Two audiences, two texts. The dashboard shows the stored error as it is (bounded where it
//! enters: an upstream's own message is cut to 200 characters): the call that failed
//! (`GET http://10.0.0.5:8080/v1/jobs/…`), the HTTP status and the upstream's message, which
//! an operator needs. The query page and the public API show only what a user can act on:
//! which side gave up and why, in words — never an internal URL (scheme, host, port, path, and
//! with `{key}` in the path, the query) nor an HTTP error's body. An upstream's "failed" answer
//! is its verdict on this query, so its own short message is shown; anything this function
//! does not recognise shows no detail at all, so a new error form cannot leak by default.

use crate::task::DeadReason;

/// The stored error of an upstream's "failed" answer starts with this, then its message.
pub const UPSTREAM_FAILED: &str = "upstream failed: ";

/// The stored error of a final answer too large to keep starts with this.
pub const RESULT_TOO_LARGE: &str = "result too large: ";

/// The stored error of an upstream's "failed" answer.
pub fn upstream_failed(message: &str) -> String {
    format!("{UPSTREAM_FAILED}{message}")
}

/// The stored error of a final answer of `bytes` bytes, over the `max` kept per task.
pub fn result_too_large(bytes: usize, max: usize) -> String {
    format!(
        "{RESULT_TOO_LARGE}{bytes} bytes, more than the {max} bytes kept \
         (REPOLL_UPSTREAM_MAX_RESULT)"
    )
}

/// The stored error of a task still processing after its `max` polls.
pub fn max_polls(max: u32) -> String {
    format!("max polls ({max}) reached")
}

/// What a stored error says, as far as the public may know it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Cause<'a> {
    /// The upstream answered "failed", with its own (already short) message.
    Failed(&'a str),
    TooLarge,
    MaxPolls(u32),
    /// An HTTP error status from the upstream (its body is not the public's).
    Http(u16),
    Timeout,
    Unreachable,
    Unreadable,
}

impl<'a> Cause<'a> {
    /// Reads the forms the worker writes: the ones above, and an upstream call's error,
    /// `METHOD URL: <error>` or `<error>` alone (worker/src/upstream/answer.rs `UpstreamError`).
    pub(crate) fn of(stored: &'a str) -> Option<Cause<'a>> {
        if let Some(message) = stored.strip_prefix(UPSTREAM_FAILED) {
            return Some(Cause::Failed(message.trim()));
        }
        if stored.starts_with(RESULT_TOO_LARGE) {
            return Some(Cause::TooLarge);
        }
        if let Some(rest) = stored.strip_prefix("max polls (") {
            return rest
                .split_once(')')
                .and_then(|(n, _)| n.parse().ok())
                .map(Cause::MaxPolls);
        }
        let error = without_call(stored);
        if let Some(rest) = error.strip_prefix("HTTP ") {
            let code = rest.get(..3).and_then(|c| c.parse().ok())?;
            return (100..600).contains(&code).then_some(Cause::Http(code));
        }
        if error.starts_with("timeout after ") {
            Some(Cause::Timeout)
        } else if error.starts_with("connection failed") {
            Some(Cause::Unreachable)
        } else if error.starts_with("bad body") {
            Some(Cause::Unreadable)
        } else {
            None
        }
    }

    /// The cause as the end of a sentence ("… Last error: <this>."), when there are words for
    /// it that say nothing internal.
    fn words(&self) -> Option<String> {
        Some(match self {
            Cause::Http(code) => format!("HTTP {code} from the upstream API"),
            Cause::Timeout => "the upstream API did not answer in time".into(),
            Cause::Unreachable => "the upstream API could not be reached".into(),
            Cause::Unreadable => "the upstream API's answer could not be read".into(),
            Cause::Failed(_) | Cause::TooLarge | Cause::MaxPolls(_) => return None,
        })
    }
}

/// The worker's `METHOD URL: error` without its call: the error alone. A URL has no spaces
/// (the worker percent-encodes the query), so the first ": " after it ends it. (A list row
/// shows this; the task page shows the call too.)
pub fn without_call(stored: &str) -> &str {
    let Some((method, rest)) = stored.split_once(' ') else {
        return stored;
    };
    let is_method = !method.is_empty() && method.bytes().all(|b| b.is_ascii_uppercase());
    let is_url = rest.starts_with("http://") || rest.starts_with("https://");
    match rest.split_once(": ") {
        Some((url, error)) if is_method && is_url && !url.contains(' ') => error,
        _ => stored,
    }
}

/// Why a task failed, for the public: the dead reason in plain words, with the cause of its
/// last error where it can be told without anything internal (no URL, no upstream body).
/// `attempts` is the task's count of failed calls.
pub fn public_reason(
    reason: Option<DeadReason>,
    attempts: u32,
    last_error: Option<&str>,
) -> String {
    let cause = last_error.map(str::trim).and_then(Cause::of);
    let last = cause
        .as_ref()
        .and_then(Cause::words)
        .map(|w| format!(" Last error: {w}."))
        .unwrap_or_default();
    match (reason, &cause) {
        (_, Some(Cause::Failed(message))) if !message.is_empty() => {
            format!("The upstream API refused this query; it said: {message}")
        }
        (_, Some(Cause::Failed(_))) => "The upstream API refused this query.".into(),
        (_, Some(Cause::TooLarge)) => {
            "The upstream API's answer is larger than this service keeps, so it was not stored."
                .into()
        }
        (_, Some(Cause::MaxPolls(n))) => {
            format!("The upstream API was still processing after {n} polls; gave up.")
        }
        (Some(DeadReason::Fatal), Some(Cause::Http(code))) => {
            format!("The upstream API refused this query (HTTP {code}).")
        }
        (Some(DeadReason::Fatal), _) => "The upstream API refused this query.".into(),
        (Some(DeadReason::MaxAttempts), _) => {
            let word = if attempts == 1 { "attempt" } else { "attempts" };
            format!("The upstream API kept failing; gave up after {attempts} {word}.{last}")
        }
        (Some(DeadReason::Deadline), _) => {
            format!("The upstream API took too long; gave up at the deadline.{last}")
        }
        (Some(DeadReason::Poison), _) => "Workers kept losing this query; gave up.".into(),
        (None, _) => format!("The query failed.{last}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CALL: &str = "GET http://127.0.0.1:47312/api/query/secret-order";

    /// The public text never carries the call or the upstream's body.
    fn public(reason: DeadReason, stored: &str) -> String {
        let shown = public_reason(Some(reason), 3, Some(stored));
        assert!(!shown.contains("http"), "{shown}");
        assert!(
            !shown.contains("127.0.0.1") && !shown.contains("secret-order"),
            "{shown}"
        );
        shown
    }

    #[test]
    fn http_errors_show_their_status_only() {
        let stored = format!("{CALL}: HTTP 400: items: 4294967295 is out of range 0..=1000");
        assert_eq!(
            public(DeadReason::Fatal, &stored),
            "The upstream API refused this query (HTTP 400)."
        );
        let stored = format!("{CALL}: HTTP 503: simulated outage");
        let shown = public(DeadReason::MaxAttempts, &stored);
        assert_eq!(
            shown,
            "The upstream API kept failing; gave up after 3 attempts. \
             Last error: HTTP 503 from the upstream API."
        );
        assert!(!shown.contains("outage"), "{shown}");
    }

    #[test]
    fn transport_errors_in_words() {
        for (error, words) in [
            ("timeout after 300 ms", "did not answer in time"),
            (
                "connection failed: error sending request: tcp connect error",
                "could not be reached",
            ),
            ("bad body: not JSON: expected value", "could not be read"),
        ] {
            let shown = public(DeadReason::Deadline, &format!("{CALL}: {error}"));
            assert!(shown.ends_with(&format!("{words}.")), "{shown}");
            assert!(!shown.contains("tcp") && !shown.contains("JSON"), "{shown}");
        }
    }

    #[test]
    fn a_failed_answer_shows_its_own_message() {
        assert_eq!(
            public(DeadReason::Fatal, &upstream_failed("no_such_order")),
            "The upstream API refused this query; it said: no_such_order"
        );
        assert_eq!(
            public(DeadReason::Fatal, &upstream_failed("")),
            "The upstream API refused this query."
        );
    }

    #[test]
    fn too_large_and_max_polls_are_told_as_such() {
        assert!(
            public(DeadReason::Fatal, &result_too_large(5 << 20, 1 << 20))
                .contains("larger than this service keeps")
        );
        assert_eq!(
            public(DeadReason::Fatal, &max_polls(200)),
            "The upstream API was still processing after 200 polls; gave up."
        );
    }

    #[test]
    fn anything_unrecognised_shows_no_detail() {
        // A query that cannot be put in the URL, an error of an older worker, an upstream
        // message stored without its prefix: the reason alone.
        for stored in [
            "query '..' cannot be placed in the URL path",
            "no-such-order",
            "POST https://internal.example/v1: something new",
            "HTTP abc",
        ] {
            let shown = public(DeadReason::Fatal, stored);
            assert_eq!(shown, "The upstream API refused this query.", "{stored}");
        }
        assert_eq!(
            public_reason(Some(DeadReason::Poison), 0, None),
            "Workers kept losing this query; gave up."
        );
        assert_eq!(public_reason(None, 0, Some("  ")), "The query failed.");
    }

    #[test]
    fn one_attempt_is_one_attempt() {
        let one = public_reason(Some(DeadReason::MaxAttempts), 1, None);
        assert!(one.contains("after 1 attempt."), "{one}");
        let two = public_reason(Some(DeadReason::MaxAttempts), 2, None);
        assert!(two.contains("after 2 attempts."), "{two}");
    }
}
