//! Per-request overrides, so a test can shape one key without restarting the simulator.
//!
//! They are read from two places, the later winning:
//! 1. inside the key itself: `name=value` tokens separated by spaces or `&`, e.g. the key
//!    `"order-7 polls=5 fail=429 fail_times=1"`. This matters because a worker sends the task's
//!    query URL-encoded as the single `q` parameter, so the key is the only thing a test controls
//!    end to end. `payload=` takes the rest of the key verbatim (it may contain spaces).
//! 2. the request's own query string (`/api/query?q=k&polls=5`), handy for manual calls.
//!
//! Recognised names, each bounded (see [`crate::limits`]): `polls` (0..=[`MAX_POLLS`]), `ms`
//! (0..=[`MAX_MS`]), `items` (0..=[`MAX_ITEMS`]), `fail` (`500`, `503`, `429`, `malformed`,
//! `shape`, `hang`, `reset`, `panic`), `fail_times` (only the first n calls of the key fail;
//! default all; 0..=[`MAX_FAIL_TIMES`]), `retry_after` (seconds, 0..=[`MAX_RETRY_AFTER_S`]),
//! `latency` (ms, 0..=[`MAX_LATENCY_MS`]), `status=failed`, `error` (message for
//! `status=failed`, at most [`MAX_ERROR_BYTES`]), `payload` (echoed inside the data, at most
//! [`MAX_PAYLOAD_BYTES`]), `pad` (that many bytes of filler, 0..=[`MAX_PAD_BYTES`]: a `"pad"`
//! string in the data of every answer, or appended to a `status=failed` message — an
//! oversized answer or error without a key that long), `pad_partial` (the same filler in the
//! `processing` answers only, so a key sends huge partials and then a small final answer),
//! `deep` (0..=[`MAX_DEEP`]: a `"deep"` member of that many nested arrays, `[[[…]]]`, in
//! every answer — JSON deeper than any parser's recursion limit).
//!
//! A recognised name with a value out of range or unparsable is refused: the request is
//! answered HTTP 400 `{"error": "<knob>: <value> is out of range 0..=N"}` and nothing is
//! remembered for the key (a worker takes such a permanent 4xx as fatal, so the task ends dead
//! with that message). Unknown names are ignored: keys are free text, and `colour=red` in a
//! query is not addressed to the simulator.

use std::collections::HashMap;
use std::fmt;

use crate::faults::Fault;
use crate::limits::{
    shown, MAX_DEEP, MAX_ERROR_BYTES, MAX_FAIL_TIMES, MAX_ITEMS, MAX_LATENCY_MS, MAX_MS,
    MAX_PAD_BYTES, MAX_PAYLOAD_BYTES, MAX_POLLS, MAX_RETRY_AFTER_S,
};

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
    /// Filler bytes added to the answer (`pad=`); 0 = none.
    pub pad: usize,
    /// Filler bytes added to a `processing` answer instead of `pad` (`pad_partial=`).
    pub pad_partial: Option<usize>,
    /// Levels of nested arrays added to the answer (`deep=`); 0 = none.
    pub deep: usize,
}

/// A recognised override whose value is out of range or unparsable; its `Display` is the
/// message of the 400 answer, starting with the knob's name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OverrideError {
    /// The override's name (`items`, `polls`, ...).
    pub knob: &'static str,
    /// What is wrong, e.g. `4294967295 is out of range 0..=1000`.
    pub problem: String,
}

impl fmt::Display for OverrideError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.knob, self.problem)
    }
}

impl std::error::Error for OverrideError {}

/// A number within `0..=max`, or the error naming `knob`.
fn bounded<T>(knob: &'static str, value: &str, max: T) -> Result<T, OverrideError>
where
    T: std::str::FromStr + PartialOrd + fmt::Display,
{
    match value.parse::<T>() {
        Ok(v) if v <= max => Ok(v),
        _ => Err(OverrideError {
            knob,
            problem: format!("{} is out of range 0..={max}", shown(value)),
        }),
    }
}

/// A text of at most `max` bytes, or the error naming `knob`.
fn bounded_text(knob: &'static str, value: &str, max: usize) -> Result<String, OverrideError> {
    if value.len() <= max {
        Ok(value.to_string())
    } else {
        Err(OverrideError {
            knob,
            problem: format!("{} bytes is out of range 0..={max}", value.len()),
        })
    }
}

impl Overrides {
    /// The filler bytes of an answer whose status is `status`: `pad_partial` (when given) for
    /// a `processing` answer, `pad` otherwise.
    pub fn pad_for(&self, status: &str) -> usize {
        match self.pad_partial {
            Some(n) if status == "processing" => n,
            _ => self.pad,
        }
    }

    /// Overrides found in `key`, then in the other query parameters `params` (which win).
    /// The first recognised override with a bad value is the error.
    pub fn parse(key: &str, params: &HashMap<String, String>) -> Result<Overrides, OverrideError> {
        let mut o = Overrides::default();
        let (head, payload) = match key.find("payload=") {
            Some(at) => (&key[..at], Some(&key[at + "payload=".len()..])),
            None => (key, None),
        };
        for token in head.split(|c: char| c == '&' || c.is_whitespace()) {
            if let Some((name, value)) = token.split_once('=') {
                o.apply(name, value)?;
            }
        }
        if let Some(p) = payload {
            o.apply("payload", p)?;
        }
        // In name order, so which error is reported does not depend on the map's order.
        let mut params: Vec<_> = params.iter().filter(|(name, _)| *name != "q").collect();
        params.sort();
        for (name, value) in params {
            o.apply(name, value)?;
        }
        Ok(o)
    }

    fn apply(&mut self, name: &str, value: &str) -> Result<(), OverrideError> {
        match name {
            "polls" => self.polls = Some(bounded("polls", value, MAX_POLLS)?),
            "ms" => self.ms = Some(bounded("ms", value, MAX_MS)?),
            "items" => self.items = Some(bounded("items", value, MAX_ITEMS)?),
            "fail" => {
                self.fail = Some(Fault::from_name(value).ok_or_else(|| OverrideError {
                    knob: "fail",
                    problem: format!("{} is not one of {}", shown(value), Fault::NAMES),
                })?)
            }
            "fail_times" => self.fail_times = Some(bounded("fail_times", value, MAX_FAIL_TIMES)?),
            "retry_after" => {
                self.retry_after_s = Some(bounded("retry_after", value, MAX_RETRY_AFTER_S)?)
            }
            "latency" => self.latency_ms = Some(bounded("latency", value, MAX_LATENCY_MS)?),
            "status" if value == "failed" => self.failed = true,
            "status" => {
                return Err(OverrideError {
                    knob: "status",
                    problem: format!("{} is not failed (the only value)", shown(value)),
                })
            }
            "error" => self.error = Some(bounded_text("error", value, MAX_ERROR_BYTES)?),
            "payload" => self.payload = Some(bounded_text("payload", value, MAX_PAYLOAD_BYTES)?),
            "pad" => self.pad = bounded("pad", value, MAX_PAD_BYTES)?,
            "pad_partial" => self.pad_partial = Some(bounded("pad_partial", value, MAX_PAD_BYTES)?),
            "deep" => self.deep = bounded("deep", value, MAX_DEEP)?,
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(key: &str) -> Result<Overrides, OverrideError> {
        Overrides::parse(key, &HashMap::new())
    }

    #[test]
    fn reads_tokens_in_the_key_and_params_win() {
        let mut params = HashMap::new();
        params.insert("q".to_string(), "ignored".to_string());
        params.insert("ms".to_string(), "2000".to_string());
        let o = Overrides::parse("k1 polls=5&fail=429 fail_times=2 ms=10 junk bad=", &params)
            .expect("valid");
        assert_eq!(o.polls, Some(5));
        assert_eq!(o.fail, Some(Fault::RateLimited));
        assert_eq!(o.fail_times, Some(2));
        assert_eq!(o.ms, Some(2000));
    }

    #[test]
    fn payload_takes_the_rest_of_the_key() {
        let o = parse("k polls=1 payload=<script>alert('x y')</script>").expect("valid");
        assert_eq!(o.polls, Some(1));
        assert_eq!(o.payload.as_deref(), Some("<script>alert('x y')</script>"));
    }

    #[test]
    fn pad_partial_pads_only_processing_answers() {
        let o = parse("k pad=7 pad_partial=5000").expect("valid");
        assert_eq!(o.pad_for("processing"), 5000);
        assert_eq!(o.pad_for("done"), 7);
        assert_eq!(o.pad_for("failed"), 7);
        let o = parse("k pad=7").expect("valid");
        assert_eq!(o.pad_for("processing"), 7);
    }

    #[test]
    fn unknown_names_are_ignored() {
        assert_eq!(
            parse("colour=red size= =x a=b=c plain"),
            Ok(Overrides::default())
        );
    }

    #[test]
    fn out_of_range_and_garbage_values_are_refused_with_the_knob() {
        let err = |key: &str| parse(key).expect_err(key).to_string();
        assert_eq!(
            err("boom items=4294967295 polls=1"),
            "items: 4294967295 is out of range 0..=1000"
        );
        assert_eq!(
            err("x polls=10001"),
            "polls: 10001 is out of range 0..=10000"
        );
        assert_eq!(err("x polls=abc"), "polls: abc is out of range 0..=10000");
        assert_eq!(err("x polls=-1"), "polls: -1 is out of range 0..=10000");
        assert_eq!(
            err("x ms=99999999999999999999"),
            "ms: 99999999999999999999 is out of range 0..=3600000"
        );
        assert!(err("x fail_times=10001").starts_with("fail_times: "));
        assert!(err("x retry_after=3601").starts_with("retry_after: "));
        assert!(err("x latency=30001").starts_with("latency: "));
        assert!(err("x fail=nope").starts_with("fail: nope is not one of "));
        assert!(err("x status=done").starts_with("status: "));
        let long = "e".repeat(MAX_ERROR_BYTES + 1);
        assert_eq!(
            err(&format!("x status=failed error={long}")),
            format!("error: {} bytes is out of range 0..=1024", long.len())
        );
        let long = "p".repeat(MAX_PAYLOAD_BYTES + 1);
        assert!(err(&format!("x payload={long}")).starts_with("payload: 4097 bytes"));
        assert_eq!(
            err("x pad=4194305"),
            "pad: 4194305 is out of range 0..=4194304"
        );
        assert_eq!(
            err("x pad_partial=4194305"),
            "pad_partial: 4194305 is out of range 0..=4194304"
        );
        assert_eq!(
            err("x deep=100001"),
            "deep: 100001 is out of range 0..=100000"
        );
        // The query string is checked the same way.
        let mut params = HashMap::new();
        params.insert("items".to_string(), "1001".to_string());
        assert_eq!(
            Overrides::parse("k", &params).map_err(|e| e.knob),
            Err("items")
        );
        // A huge value is quoted cut short.
        assert!(err(&format!("x items={}", "9".repeat(500))).len() < 100);
    }

    #[test]
    fn the_maxima_themselves_are_accepted() {
        let o = parse(&format!(
            "k polls={MAX_POLLS} ms={MAX_MS} items={MAX_ITEMS} fail=hang fail_times={MAX_FAIL_TIMES} \
             retry_after={MAX_RETRY_AFTER_S} latency={MAX_LATENCY_MS} status=failed error=e \
             pad={MAX_PAD_BYTES} pad_partial={MAX_PAD_BYTES} deep={MAX_DEEP} payload={}",
            "p".repeat(MAX_PAYLOAD_BYTES)
        ))
        .expect("valid");
        assert_eq!(o.pad_partial, Some(MAX_PAD_BYTES));
        assert_eq!(o.deep, MAX_DEEP);
        assert_eq!(o.items, Some(MAX_ITEMS));
        assert_eq!(o.polls, Some(MAX_POLLS));
        assert_eq!(o.latency_ms, Some(MAX_LATENCY_MS));
        assert_eq!(o.payload.map(|p| p.len()), Some(MAX_PAYLOAD_BYTES));
        assert_eq!(o.pad, MAX_PAD_BYTES);
        assert!(o.failed);
    }
}
