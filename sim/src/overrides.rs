//! Per-request overrides, so a test can shape one key without restarting the simulator.
//!
//! They are read from two places, the later winning:
//! 1. inside the key itself: `name=value` tokens separated by spaces or `&`, e.g. the key
//!    `"order-7 polls=5 fail=429 fail_times=1"`. This matters because a worker sends the task's
//!    query URL-encoded as the single `q` parameter, so the key is the only thing a test controls
//!    end to end. `payload=` takes the rest of the key verbatim (it may contain spaces).
//! 2. the request's own query string (`/api/query?q=k&polls=5`), handy for manual calls.
//!
//! Recognised names: `polls`, `ms`, `items`, `fail` (`500`, `503`, `429`, `malformed`, `shape`,
//! `hang`, `reset`), `fail_times` (only the first n calls of the key fail; default all),
//! `retry_after` (seconds), `latency` (ms), `status=failed`, `error` (message for
//! `status=failed`), `payload` (echoed inside the data). Unknown names and unparsable values are
//! ignored: the simulator never refuses a key.

use std::collections::HashMap;

use crate::faults::Fault;

/// The overrides of one request; `None` = use the simulator's flags.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Overrides {
    pub polls: Option<u32>,
    pub ms: Option<u64>,
    pub items: Option<u32>,
    pub fail: Option<Fault>,
    pub fail_times: Option<u32>,
    pub retry_after_s: Option<u64>,
    pub latency_ms: Option<u64>,
    pub failed: bool,
    pub error: Option<String>,
    pub payload: Option<String>,
}

impl Overrides {
    /// Overrides found in `key`, then in the other query parameters `params` (which win).
    pub fn parse(key: &str, params: &HashMap<String, String>) -> Overrides {
        let mut o = Overrides::default();
        let (head, payload) = match key.find("payload=") {
            Some(at) => (&key[..at], Some(&key[at + "payload=".len()..])),
            None => (key, None),
        };
        for token in head.split(|c: char| c == '&' || c.is_whitespace()) {
            if let Some((name, value)) = token.split_once('=') {
                o.apply(name, value);
            }
        }
        if let Some(p) = payload {
            o.payload = Some(p.to_string());
        }
        for (name, value) in params {
            if name != "q" {
                o.apply(name, value);
            }
        }
        o
    }

    fn apply(&mut self, name: &str, value: &str) {
        match name {
            "polls" => self.polls = value.parse().ok().or(self.polls),
            "ms" => self.ms = value.parse().ok().or(self.ms),
            "items" => self.items = value.parse().ok().or(self.items),
            "fail" => self.fail = Fault::from_name(value).or(self.fail),
            "fail_times" => self.fail_times = value.parse().ok().or(self.fail_times),
            "retry_after" => self.retry_after_s = value.parse().ok().or(self.retry_after_s),
            "latency" => self.latency_ms = value.parse().ok().or(self.latency_ms),
            "status" => self.failed = value == "failed",
            "error" => self.error = Some(value.to_string()),
            "payload" => self.payload = Some(value.to_string()),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_tokens_in_the_key_and_params_win() {
        let mut params = HashMap::new();
        params.insert("q".to_string(), "ignored".to_string());
        params.insert("ms".to_string(), "2000".to_string());
        let o = Overrides::parse("k1 polls=5&fail=429 fail_times=2 ms=10 junk bad=", &params);
        assert_eq!(o.polls, Some(5));
        assert_eq!(o.fail, Some(Fault::RateLimited));
        assert_eq!(o.fail_times, Some(2));
        assert_eq!(o.ms, Some(2000));
    }

    #[test]
    fn payload_takes_the_rest_of_the_key() {
        let o = Overrides::parse(
            "k polls=1 payload=<script>alert('x y')</script>",
            &HashMap::new(),
        );
        assert_eq!(o.polls, Some(1));
        assert_eq!(o.payload.as_deref(), Some("<script>alert('x y')</script>"));
    }

    #[test]
    fn garbage_is_ignored() {
        let o = Overrides::parse("polls=abc fail=nope status=done", &HashMap::new());
        assert_eq!(o, Overrides::default());
    }
}
