//! The simulator's bounds. Every knob — flag, environment variable or per-key override — has a
//! maximum, so nothing a caller writes can make the simulator allocate, sleep or hold a
//! connection without bound. The simulator usually runs inside `repoll serve --sim`, and a key
//! is any query a visitor types: a knob obeyed blindly (`items=4294967295` wanted 137 GB) would
//! abort the whole server, and the task, kept in Redis, would do it again on every restart.
//!
//! Flags out of range stop the start (clap checks them); overrides out of range are answered
//! with HTTP 400 `{"error": "<knob>: <value> is out of range 0..=N"}` (see [`crate::overrides`]);
//! a [`crate::SimArgs`] built in code is clamped by [`crate::SimArgs::clamped`].

use std::time::Duration;

/// Most polls before a key is done (`--sim-polls`, `polls=`). Only a counter, but a key needing
/// more calls than this is a typo, not a test (no worker polls that often).
pub const MAX_POLLS: u32 = 10_000;

/// Longest time-to-done (`--sim-ms`, `ms=`): one hour, longer than any test or demo waits.
pub const MAX_MS: u64 = 3_600_000;

/// Most items in a key's data (`--sim-items`, `items=`). Every answer builds its items in
/// memory (about 30 bytes of JSON each), so this caps one answer's data at about 30 KB.
pub const MAX_ITEMS: u32 = 1_000;

/// Most failing calls of a forced fault (`fail_times=`); like `polls`, more is a typo.
pub const MAX_FAIL_TIMES: u32 = 10_000;

/// Longest `Retry-After` a 429 sends (`--sim-retry-after`, `retry_after=`): one hour. A worker
/// honours it, so a larger value would park a task for that long.
pub const MAX_RETRY_AFTER_S: u64 = 3_600;

/// Longest added latency (`--sim-latency-ms`, `--sim-latency-jitter-ms`, `latency=`), each:
/// 30 s. Every request sleeping holds one of the concurrency slots meanwhile.
pub const MAX_LATENCY_MS: u64 = 30_000;

/// Longest simulated hang (`--sim-hang-ms`): two minutes, well past any sane client timeout
/// (the default is one minute) while still freeing the request slot eventually.
pub const MAX_HANG_MS: u64 = 120_000;

/// Longest `payload=` echoed in the data: 4 KiB (it is copied into every answer of the key).
pub const MAX_PAYLOAD_BYTES: usize = 4 * 1024;

/// Longest `error=` message of a `status=failed` answer: 1 KiB.
pub const MAX_ERROR_BYTES: usize = 1024;

/// Most filler bytes of `pad=` (in an answer's data, or appended to a `status=failed`
/// message): 4 MiB, the workers' default largest body (`REPOLL_UPSTREAM_MAX_BODY`), so a test
/// can send the largest answer a worker accepts. The filler is one buffer made once and shared
/// by every answer (see [`crate::handlers`]), so a padded answer costs no memory of its own.
pub const MAX_PAD_BYTES: usize = 4 * 1024 * 1024;

/// Deepest nesting of `deep=` (arrays inside arrays in the answer): 100,000 levels, two bytes
/// each, so an answer stays under 200 KB while reaching far past any JSON parser's recursion
/// limit (serde_json stops at 128). Like the filler, the brackets are one buffer made once.
pub const MAX_DEEP: usize = 100_000;

/// Longest key (`q=`): 4 KiB — room for repoll's longest query (512 chars of up to 4 bytes
/// each) while a key, kept in the per-key map and echoed in the data, stays small.
pub const MAX_KEY_BYTES: usize = 4 * 1024;

/// Keys remembered for `/_sim/stats` by default (`--sim-max-keys`); past it the oldest key is
/// forgotten. A key costs at most ~16 KB (key twice, up to 1024 call times), so 10,000 keys
/// stay under ~160 MB even in the worst case and a few MB in practice.
pub const DEFAULT_MAX_KEYS: usize = 10_000;

/// Upper bound of `--sim-max-keys` (about 1.6 GB in the worst case above).
pub const MAX_MAX_KEYS: usize = 100_000;

/// Requests handled at once by default (`--sim-max-concurrency`); more are answered 503 with
/// `Retry-After: 1` at once instead of queueing (each waiting request holds memory too).
pub const DEFAULT_MAX_CONCURRENCY: usize = 512;

/// Upper bound of `--sim-max-concurrency`.
pub const MAX_MAX_CONCURRENCY: usize = 10_000;

/// Longest any request may take before the simulator answers 504 itself: both latencies and a
/// hang at their maxima, plus 10 s of slack, so every knob still works as documented while no
/// request holds a slot forever.
pub const REQUEST_TIMEOUT: Duration =
    Duration::from_millis(2 * MAX_LATENCY_MS + MAX_HANG_MS + 10_000);

/// A fault rate as a flag: a probability, finite and within 0..=1.
pub fn parse_rate(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s} is not a number"))?;
    if v.is_finite() && (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{s} is out of range 0..=1"))
    }
}

/// A value quoted in an error message, cut short: the value is whatever the caller sent.
pub(crate) fn shown(value: &str) -> String {
    const MAX: usize = 40;
    match value.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}…", &value[..i]),
        None => value.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_probabilities() {
        assert_eq!(parse_rate("0.25"), Ok(0.25));
        assert_eq!(parse_rate("1"), Ok(1.0));
        for bad in ["-0.1", "1.5", "NaN", "inf", "x"] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_timeout_outlasts_every_knob() {
        assert!(
            REQUEST_TIMEOUT > Duration::from_millis(2 * MAX_LATENCY_MS + MAX_HANG_MS),
            "{REQUEST_TIMEOUT:?}"
        );
        assert_eq!(shown("short"), "short");
        assert_eq!(shown(&"x".repeat(100)).chars().count(), 41);
    }
}
