//! Request lines whose target is not a path: the authority-form (`CONNECT host:port`, as a
//! client speaking to a proxy sends; `POST host:port`) and the asterisk-form (`OPTIONS *`).
//! Anyone can send them, so each must cost the server a short refusal — a 400, or the
//! connection closed — and never a 5xx, a panic or a backtrace in its log (which an anonymous
//! flood of them would fill).

use std::{collections::BTreeMap, path::Path, time::Duration};

use futures::{stream, StreamExt};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

/// The lines sent in turn, each on a connection of its own.
pub(super) const LINES: [&str; 4] = [
    "CONNECT 127.0.0.1:6379 HTTP/1.1",
    "POST 127.0.0.1:47313 HTTP/1.1",
    "GET 127.0.0.1:47313 HTTP/1.1",
    "OPTIONS * HTTP/1.1",
];

/// How long one answer may take before it counts as none (a hang guard, not a budget).
const ANSWER_WAIT: Duration = Duration::from_secs(5);

/// What the flood saw.
pub(super) struct Flood {
    /// Answers by kind: an HTTP status ("400"), "closed" (ended without an answer), "no
    /// answer in 5 s", or a connection error.
    pub(super) answers: BTreeMap<String, usize>,
    /// Lines of the server's log, written during the flood, that tell of a panic.
    pub(super) panic_lines: usize,
    /// The first of them, to quote in the report.
    pub(super) first_panic: Option<String>,
}

impl Flood {
    /// Every answer a 400 or a closed connection, and not one panic in the log.
    pub(super) fn pass(&self) -> bool {
        self.panic_lines == 0 && self.answers.keys().all(|k| k == "400" || k == "closed")
    }
}

/// Sends `n` request lines (the [`LINES`] in turn, 20 connections at a time) to `addr` and
/// reads what the server's log `log` gained meanwhile.
pub(super) async fn flood(addr: &str, log: &Path, n: usize) -> Flood {
    let log_from = std::fs::metadata(log).map(|m| m.len()).unwrap_or(0);
    let answers: Vec<String> = stream::iter(0..n)
        .map(|i| async move { one(addr, LINES[i % LINES.len()]).await })
        .buffer_unordered(20)
        .collect()
        .await;
    let mut counts = BTreeMap::new();
    for a in answers {
        *counts.entry(a).or_default() += 1;
    }
    // A panic's message and backtrace reach the log as the request fails; give stderr a
    // moment to be written out.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (panic_lines, first_panic) = panics_since(log, log_from);
    Flood {
        answers: counts,
        panic_lines,
        first_panic,
    }
}

/// One request line on its own connection: the status of the answer, or what happened.
async fn one(addr: &str, line: &str) -> String {
    let Ok(Ok(mut s)) = tokio::time::timeout(ANSWER_WAIT, TcpStream::connect(addr)).await else {
        return "connect failed".into();
    };
    let request = format!("{line}\r\nHost: {addr}\r\nContent-Length: 0\r\n\r\n");
    if s.write_all(request.as_bytes()).await.is_err() {
        return "closed".into();
    }
    let mut buf = [0u8; 512];
    match tokio::time::timeout(ANSWER_WAIT, s.read(&mut buf)).await {
        Err(_) => format!("no answer in {} s", ANSWER_WAIT.as_secs()),
        Ok(Ok(0)) => "closed".into(),
        // A reset is the server closing too.
        Ok(Err(_)) => "closed".into(),
        Ok(Ok(len)) => status_of(&buf[..len]),
    }
}

/// The status code of an HTTP/1 answer's first line ("HTTP/1.1 400 Bad Request" -> "400").
fn status_of(answer: &[u8]) -> String {
    let text = String::from_utf8_lossy(answer);
    match text.split(' ').nth(1) {
        Some(code) if text.starts_with("HTTP/") && code.len() == 3 => code.to_string(),
        _ => "not HTTP".into(),
    }
}

/// (how many, the first) lines of `log` after byte `from` that tell of a panic: Rust's
/// "thread '…' panicked at" and the backtrace that may follow.
pub(super) fn panics_since(log: &Path, from: u64) -> (usize, Option<String>) {
    let Ok(bytes) = std::fs::read(log) else {
        return (0, None);
    };
    let from = usize::try_from(from).unwrap_or(0).min(bytes.len());
    let text = String::from_utf8_lossy(&bytes[from..]);
    let hits: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("panicked") || l.contains("stack backtrace"))
        .collect();
    (
        hits.len(),
        hits.first().map(|l| l.chars().take(200).collect()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_verdicts() {
        assert_eq!(status_of(b"HTTP/1.1 400 Bad Request\r\n"), "400");
        assert_eq!(status_of(b"HTTP/1.1 500 Internal Server Error"), "500");
        assert_eq!(status_of(b"SSH-2.0"), "not HTTP");
        let flood = |answers: &[(&str, usize)], panic_lines| Flood {
            answers: answers.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            panic_lines,
            first_panic: None,
        };
        assert!(flood(&[("400", 150), ("closed", 50)], 0).pass());
        assert!(!flood(&[("400", 199), ("500", 1)], 0).pass());
        assert!(
            !flood(&[("400", 200)], 1).pass(),
            "a panic in the log fails it"
        );
        assert!(!flood(&[("400", 199), ("no answer in 5 s", 1)], 0).pass());
    }

    #[test]
    fn panics_are_counted_after_the_offset() {
        let dir = std::env::temp_dir().join(format!("chaos-lines-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("serve.log");
        std::fs::write(&log, "thread 'a' panicked at old\nok\n").unwrap();
        let from = std::fs::metadata(&log).unwrap().len();
        let mut text = std::fs::read_to_string(&log).unwrap();
        text.push_str("WARN fine\nthread 'tokio' panicked at x.rs:1:2:\nstack backtrace:\n");
        std::fs::write(&log, text).unwrap();
        let (n, first) = panics_since(&log, from);
        assert_eq!(n, 2);
        assert_eq!(
            first.as_deref(),
            Some("thread 'tokio' panicked at x.rs:1:2:")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
