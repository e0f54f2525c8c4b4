//! What kind of failure a task's last error is, for the dashboard's triage (issue 29): the
//! facet counts beside the task list, the dead work grouped by error, and the `class:` and
//! `group:` filters of search and bulk actions all ask [`classify`] and [`group_of`] — the
//! one place that reads a stored error for this. Today it reads the error's text (the forms
//! `failure` knows) and the dead reason; when failures carry structured fields (status,
//! duration, body), this is where they are read instead.

use crate::failure::{without_call, Cause};

/// A failure's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ErrorClass {
    /// An HTTP error status from the upstream.
    Http(u16),
    /// The upstream did not answer in time.
    Timeout,
    /// The upstream could not be reached.
    Unreachable,
    /// The upstream's answer could not be read.
    BadBody,
    /// The upstream answered "failed" for this query.
    UpstreamFailed,
    /// The task's whole-life deadline passed.
    Deadline,
    /// Still processing after the most polls allowed.
    MaxPolls,
    /// The final answer was larger than is kept.
    TooLarge,
    /// Anything else (or no error at all).
    Other,
}

impl ErrorClass {
    /// The class in words, as the dashboard shows it ("HTTP 503", "timeout", …).
    pub fn label(self) -> String {
        match self {
            ErrorClass::Http(code) => format!("HTTP {code}"),
            ErrorClass::Timeout => "timeout".into(),
            ErrorClass::Unreachable => "unreachable".into(),
            ErrorClass::BadBody => "bad body".into(),
            ErrorClass::UpstreamFailed => "upstream said failed".into(),
            ErrorClass::Deadline => "deadline".into(),
            ErrorClass::MaxPolls => "max polls".into(),
            ErrorClass::TooLarge => "result too large".into(),
            ErrorClass::Other => "other".into(),
        }
    }

    /// The class in a search or URL (`class:http-503`): lower case, no spaces.
    pub fn slug(self) -> String {
        match self {
            ErrorClass::Http(code) => format!("http-{code}"),
            ErrorClass::Timeout => "timeout".into(),
            ErrorClass::Unreachable => "unreachable".into(),
            ErrorClass::BadBody => "bad-body".into(),
            ErrorClass::UpstreamFailed => "upstream-failed".into(),
            ErrorClass::Deadline => "deadline".into(),
            ErrorClass::MaxPolls => "max-polls".into(),
            ErrorClass::TooLarge => "too-large".into(),
            ErrorClass::Other => "other".into(),
        }
    }

    /// The class a slug names, or None.
    pub fn parse(slug: &str) -> Option<ErrorClass> {
        if let Some(code) = slug.strip_prefix("http-") {
            let code: u16 = code.parse().ok()?;
            return (100..600).contains(&code).then_some(ErrorClass::Http(code));
        }
        [
            ErrorClass::Timeout,
            ErrorClass::Unreachable,
            ErrorClass::BadBody,
            ErrorClass::UpstreamFailed,
            ErrorClass::Deadline,
            ErrorClass::MaxPolls,
            ErrorClass::TooLarge,
            ErrorClass::Other,
        ]
        .into_iter()
        .find(|c| c.slug() == slug)
    }
}

/// The class of a task's last error (`error`, its stored text) and dead reason (`dead_reason`,
/// its stored name, e.g. "deadline"). A task dead by its deadline is of class deadline,
/// whatever its last call said.
pub fn classify(error: Option<&str>, dead_reason: Option<&str>) -> ErrorClass {
    if dead_reason == Some("deadline") {
        return ErrorClass::Deadline;
    }
    match error.and_then(Cause::of) {
        Some(Cause::Http(code)) => ErrorClass::Http(code),
        Some(Cause::Timeout) => ErrorClass::Timeout,
        Some(Cause::Unreachable) => ErrorClass::Unreachable,
        Some(Cause::Unreadable) => ErrorClass::BadBody,
        Some(Cause::Failed(_)) => ErrorClass::UpstreamFailed,
        Some(Cause::MaxPolls(_)) => ErrorClass::MaxPolls,
        Some(Cause::TooLarge) => ErrorClass::TooLarge,
        None => ErrorClass::Other,
    }
}

/// Longest normalised message kept for a group.
pub const GROUP_MESSAGE_CHARS: usize = 120;

/// The error's message normalised for grouping: without the call (`GET http://…: `), every
/// run of digits as `#` (times, sizes, ids in messages), whitespace runs as one space, cut
/// to [`GROUP_MESSAGE_CHARS`] characters. An HTTP status's digits are its class and stay.
pub fn normalise_message(error: &str) -> String {
    let error = without_call(error.trim());
    // "HTTP 503: …": the status is kept whole, the rest normalised.
    let (keep, rest) = match error.strip_prefix("HTTP ") {
        Some(r) if r.len() >= 3 && r.as_bytes()[..3].iter().all(u8::is_ascii_digit) => {
            error.split_at(8)
        }
        _ => ("", error),
    };
    let mut out = String::from(keep);
    let mut in_digits = false;
    let mut in_space = false;
    for c in rest.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                out.push('#');
            }
            in_digits = true;
            in_space = false;
        } else if c.is_whitespace() {
            if !in_space {
                out.push(' ');
            }
            in_space = true;
            in_digits = false;
        } else {
            out.push(c);
            in_digits = false;
            in_space = false;
        }
        if out.chars().count() >= GROUP_MESSAGE_CHARS {
            break;
        }
    }
    out.trim().to_string()
}

/// A group of failures: the class and the normalised message, and the group's short stable
/// key (16 hex digits, `group:` in a search or URL).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorGroup {
    pub class: ErrorClass,
    pub message: String,
    pub key: String,
}

/// The group of a task's last error and dead reason.
pub fn group_of(error: Option<&str>, dead_reason: Option<&str>) -> ErrorGroup {
    let class = classify(error, dead_reason);
    let message = normalise_message(error.unwrap_or_default());
    // FNV-1a, 64 bits: stable across processes and versions (no random hasher keys).
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in class.slug().bytes().chain([0]).chain(message.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    ErrorGroup {
        class,
        message,
        key: format!("{h:016x}"),
    }
}

/// Whether `s` looks like a group key (16 lower-case hex digits).
pub fn is_group_key(s: &str) -> bool {
    s.len() == 16
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_of_the_forms_the_worker_writes() {
        let c = |e: &str| classify(Some(e), None);
        assert_eq!(
            c("GET http://10.0.0.5/v1/x: HTTP 503: busy"),
            ErrorClass::Http(503)
        );
        assert_eq!(c("HTTP 404"), ErrorClass::Http(404));
        assert_eq!(c("timeout after 5000 ms"), ErrorClass::Timeout);
        assert_eq!(c("connection failed: refused"), ErrorClass::Unreachable);
        assert_eq!(c("bad body: expected value"), ErrorClass::BadBody);
        assert_eq!(
            c("upstream failed: no such order"),
            ErrorClass::UpstreamFailed
        );
        assert_eq!(c("max polls (40) reached"), ErrorClass::MaxPolls);
        assert_eq!(c("boom"), ErrorClass::Other);
        assert_eq!(classify(None, None), ErrorClass::Other);
        assert_eq!(
            classify(Some("HTTP 503"), Some("deadline")),
            ErrorClass::Deadline
        );
        for class in [
            ErrorClass::Http(503),
            ErrorClass::BadBody,
            ErrorClass::Deadline,
        ] {
            assert_eq!(ErrorClass::parse(&class.slug()), Some(class));
        }
        assert_eq!(ErrorClass::parse("http-99"), None);
        assert_eq!(ErrorClass::parse("nope"), None);
    }

    #[test]
    fn groups_ignore_the_call_and_the_numbers() {
        let a = group_of(
            Some("GET http://h/v1/1: HTTP 503: retry in 30 s (req 8812)"),
            None,
        );
        let b = group_of(
            Some("GET http://h/v1/2: HTTP 503: retry in 5 s (req 17)"),
            None,
        );
        assert_eq!(a, b);
        assert_eq!(a.message, "HTTP 503: retry in # s (req #)");
        assert!(is_group_key(&a.key));
        let other = group_of(Some("HTTP 500: retry in 5 s (req 17)"), None);
        assert_ne!(a.key, other.key);
        assert_eq!(
            normalise_message("timeout after 5000 ms"),
            "timeout after # ms"
        );
        let long = "x".repeat(500);
        assert_eq!(
            normalise_message(&long).chars().count(),
            GROUP_MESSAGE_CHARS
        );
    }
}
