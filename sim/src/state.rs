//! The simulator's memory: per-key progress and the call counters behind `/_sim/stats`.
//!
//! Everything sits behind one `std::sync::Mutex`, held only for the few map operations of a
//! request and never across an `.await`, so it cannot deadlock and costs little next to HTTP.
//!
//! At most `--sim-max-keys` keys are remembered: a new key past that forgets the oldest one
//! (by first call), so endless distinct queries cannot grow the simulator's memory.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use serde_json::{json, Value};

use crate::faults::Fault;
use crate::limits::MAX_ITEMS;
use crate::overrides::Overrides;
use crate::SimArgs;

/// Call times kept per key for `/_sim/key` (the oldest are dropped past this).
const CALL_TIMES_CAP: usize = 1024;

/// Longest outage `POST /_sim/outage` sets: an hour.
pub const MAX_OUTAGE_MS: u64 = 3_600_000;

/// What one request will answer, decided under the lock and carried out after it.
#[derive(Debug)]
pub enum Plan {
    /// Show this failure instead of an answer.
    Fault { fault: Fault, retry_after_s: u64 },
    /// Answer 200 with this JSON body.
    Answer(Value),
}

#[derive(Debug, Default)]
struct KeyState {
    calls: u64,
    done: u64,
    /// Normal (non-fault) answers given, which is what moves a key towards done.
    answers: u32,
    first_call: Option<Instant>,
    call_ms: Vec<i64>,
    /// The W3C `traceparent` header of each call ("" = none), beside `call_ms`.
    traceparents: Vec<String>,
    /// A callback is scheduled (or sent) for this key: one per key.
    callback_planned: bool,
    /// Callbacks that reached their URL (any HTTP answer).
    callbacks: u64,
}

/// A callback to send: when, where and what (see [`SimState::plan_callback`]).
#[derive(Debug)]
pub struct CallbackPlan {
    pub after: Duration,
    pub url: String,
    pub body: Value,
}

#[derive(Debug)]
struct Inner {
    rng: StdRng,
    calls: u64,
    keys: HashMap<String, KeyState>,
    /// The keys of `keys`, oldest first: who is forgotten when a new key needs room.
    order: VecDeque<String>,
    /// Until when every call answers 503 (`POST /_sim/outage`): a whole upstream down, as a
    /// circuit breaker sees it, rather than the per-call faults rolled from the rates.
    outage_until: Option<Instant>,
}

/// `key`'s state in `keys`, made (forgetting the oldest key of `order` when `max_keys` are
/// known) if new. Of the two fields rather than `Inner`, so the caller may read the others.
fn key_state<'a>(
    keys: &'a mut HashMap<String, KeyState>,
    order: &mut VecDeque<String>,
    key: &str,
    max_keys: usize,
) -> &'a mut KeyState {
    if !keys.contains_key(key) {
        while keys.len() >= max_keys.max(1) {
            match order.pop_front() {
                Some(oldest) => keys.remove(&oldest),
                None => break,
            };
        }
        order.push_back(key.to_string());
    }
    keys.entry(key.to_string()).or_default()
}

/// Shared state of one simulator instance.
#[derive(Debug)]
pub struct SimState {
    pub args: SimArgs,
    /// Sends callbacks (loopback only, 5 s per try).
    pub client: reqwest::Client,
    inner: Mutex<Inner>,
    /// The jobs of the job-shaped APIs ([`crate::jobs`] (kept in [`crate::job_book`])).
    pub jobs: crate::job_book::JobBook,
}

/// One key's line in `/_sim/stats`.
#[derive(Debug, Serialize, serde::Deserialize, Clone, Copy, PartialEq, Eq)]
pub struct KeyStats {
    pub calls: u64,
    pub done: u64,
}

/// The body of `/_sim/stats` (keep this shape: tests outside the project read it).
#[derive(Debug, Serialize, serde::Deserialize, Clone, PartialEq, Eq)]
pub struct Stats {
    pub calls: u64,
    pub keys: BTreeMap<String, KeyStats>,
}

/// The body of `/_sim/key?q=`: one key's counters and the wall-clock time (ms since the Unix
/// epoch) of each of its calls, faults included.
#[derive(Debug, Serialize, serde::Deserialize, Clone, PartialEq, Eq)]
pub struct KeyDetail {
    pub calls: u64,
    pub done: u64,
    pub call_ms: Vec<i64>,
    /// Callbacks sent for the key that reached their URL.
    #[serde(default)]
    pub callbacks: u64,
    /// The `traceparent` header each call carried ("" = none), oldest first: a traced worker
    /// sends its upstream call's context so the upstream's traces join.
    #[serde(default)]
    pub traceparents: Vec<String>,
}

impl SimState {
    pub fn new(args: SimArgs) -> SimState {
        let rng = match args.seed {
            Some(seed) => StdRng::seed_from_u64(seed),
            None => StdRng::from_entropy(),
        };
        SimState {
            args,
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(5))
                .build()
                .unwrap_or_default(),
            jobs: crate::job_book::JobBook::default(),
            inner: Mutex::new(Inner {
                rng,
                calls: 0,
                keys: HashMap::new(),
                order: VecDeque::new(),
                outage_until: None,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves counters that are still consistent enough for
        // a simulator; carry on rather than poison every later request.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The latency to add before answering: fixed + uniform random, or the key's override.
    pub fn latency(&self, o: &Overrides) -> Duration {
        if let Some(ms) = o.latency_ms {
            return Duration::from_millis(ms);
        }
        let jitter = match self.args.latency_jitter_ms {
            0 => 0,
            j => self.lock().rng.gen_range(0..=j),
        };
        Duration::from_millis(self.args.latency_ms + jitter)
    }

    /// Counts the call and decides its answer.
    pub fn plan(&self, key: &str, o: &Overrides) -> Plan {
        self.plan_traced(key, o, "")
    }

    /// [`SimState::plan`] of a call that carried `traceparent` ("" = none), kept per key.
    pub fn plan_traced(&self, key: &str, o: &Overrides, traceparent: &str) -> Plan {
        let args = &self.args;
        let mut guard = self.lock();
        let inner = &mut *guard;
        inner.calls += 1;
        let ks = key_state(&mut inner.keys, &mut inner.order, key, args.max_keys);
        ks.calls += 1;
        let now = Instant::now();
        let first = *ks.first_call.get_or_insert(now);
        if ks.call_ms.len() >= CALL_TIMES_CAP {
            ks.call_ms.remove(0);
        }
        ks.call_ms.push(epoch_ms());
        if ks.traceparents.len() >= CALL_TIMES_CAP {
            ks.traceparents.remove(0);
        }
        // Only the header's form is kept (at most its 55 characters): it is the caller's text.
        ks.traceparents.push(traceparent.chars().take(55).collect());

        if inner.outage_until.is_some_and(|t| now < t) {
            return Plan::Fault {
                fault: Fault::Unavailable,
                retry_after_s: 0,
            };
        }
        let forced = match (o.fail, o.fail_times) {
            (Some(f), Some(n)) if ks.calls <= u64::from(n) => Some(f),
            (Some(f), None) => Some(f),
            _ => None,
        };
        let fault = forced.or_else(|| Fault::roll(args, &mut inner.rng));
        if let Some(fault) = fault {
            return Plan::Fault {
                fault,
                retry_after_s: o.retry_after_s.unwrap_or(args.retry_after_s),
            };
        }
        if o.failed {
            let msg = o
                .error
                .clone()
                .unwrap_or_else(|| format!("simulated failure for {key}"));
            return Plan::Answer(json!({"status": "failed", "error": msg}));
        }

        ks.answers = ks.answers.saturating_add(1);
        let ms = o.ms.unwrap_or(args.ms);
        let progress = if ms > 0 {
            (now.duration_since(first).as_secs_f64() * 1000.0 / ms as f64).min(1.0)
        } else {
            let polls = o.polls.unwrap_or(args.polls).max(1);
            (f64::from(ks.answers) / f64::from(polls)).min(1.0)
        };
        let done = progress >= 1.0;
        if done {
            ks.done += 1;
        }
        let items = o.items.unwrap_or(args.items);
        let data = data_for(key, items, progress, o.payload.as_deref());
        let status = if done { "done" } else { "processing" };
        Plan::Answer(json!({"status": status, "data": data}))
    }

    /// The fault a job API's submit shows, if any: the outage, else the fault rates rolled
    /// (the caller has made the job already: a faulty answer to a submit that worked, the
    /// case an idempotency key is for).
    pub fn submit_fault(&self) -> Option<Plan> {
        let mut guard = self.lock();
        let inner = &mut *guard;
        inner.calls += 1;
        if inner.outage_until.is_some_and(|t| Instant::now() < t) {
            return Some(Plan::Fault {
                fault: Fault::Unavailable,
                retry_after_s: 0,
            });
        }
        Fault::roll(&self.args, &mut inner.rng).map(|fault| Plan::Fault {
            fault,
            retry_after_s: self.args.retry_after_s,
        })
    }

    pub fn stats(&self) -> Stats {
        let inner = self.lock();
        Stats {
            calls: inner.calls,
            keys: inner
                .keys
                .iter()
                .map(|(k, s)| {
                    (
                        k.clone(),
                        KeyStats {
                            calls: s.calls,
                            done: s.done,
                        },
                    )
                })
                .collect(),
        }
    }

    pub fn key_detail(&self, key: &str) -> KeyDetail {
        let inner = self.lock();
        match inner.keys.get(key) {
            Some(s) => KeyDetail {
                calls: s.calls,
                done: s.done,
                call_ms: s.call_ms.clone(),
                callbacks: s.callbacks,
                traceparents: s.traceparents.clone(),
            },
            None => KeyDetail {
                calls: 0,
                done: 0,
                call_ms: Vec::new(),
                callbacks: 0,
                traceparents: Vec::new(),
            },
        }
    }

    /// The callback of a key that a request offered a callback URL for: the final answer, sent
    /// when the key is done by time (`ms`, flag or override; a key done by a number of polls
    /// has no time to call back at). One per key; `None` when planned already, when the key
    /// is done by polls, or when the URL is not a loopback http URL (the simulator calls
    /// nothing beyond this machine).
    pub fn plan_callback(&self, key: &str, o: &Overrides, url: &str) -> Option<CallbackPlan> {
        if !is_loopback_http(url) {
            return None;
        }
        let ms = o.ms.unwrap_or(self.args.ms);
        if ms == 0 || o.failed {
            return None;
        }
        let mut inner = self.lock();
        let ks = inner.keys.get_mut(key)?;
        if ks.callback_planned {
            return None;
        }
        ks.callback_planned = true;
        let first = ks.first_call?;
        let after = (first + Duration::from_millis(ms)).saturating_duration_since(Instant::now());
        let items = o.items.unwrap_or(self.args.items);
        let data = data_for(key, items, 1.0, o.payload.as_deref());
        Some(CallbackPlan {
            after,
            url: url.to_string(),
            body: json!({"status": "done", "data": data}),
        })
    }

    /// Starts `key`'s clock now without counting a call (a job's, at its submit): a key done by
    /// time is done that long after this. Answers how long that is (None: done by polls, or
    /// failing, so there is no time to send a webhook at).
    pub fn start_clock(&self, key: &str, o: &Overrides) -> Option<Duration> {
        let ms = o.ms.unwrap_or(self.args.ms);
        if ms == 0 || o.failed {
            return None;
        }
        let mut guard = self.lock();
        let inner = &mut *guard;
        let ks = key_state(&mut inner.keys, &mut inner.order, key, self.args.max_keys);
        ks.first_call.get_or_insert(Instant::now());
        Some(Duration::from_millis(ms))
    }

    /// Counts a callback that reached its URL.
    pub fn callback_sent(&self, key: &str) {
        if let Some(ks) = self.lock().keys.get_mut(key) {
            ks.callbacks += 1;
        }
    }

    /// Forgets every key and zeroes the counters (the dice keep rolling from where they are).
    pub fn reset(&self) {
        self.jobs.reset();
        let mut inner = self.lock();
        inner.calls = 0;
        inner.keys.clear();
        inner.order.clear();
        inner.outage_until = None;
    }

    /// Every call answers 503 for the next `ms` (0 ends an outage now); the calls are still
    /// counted. Capped at [`MAX_OUTAGE_MS`].
    pub fn set_outage(&self, ms: u64) {
        let ms = ms.min(MAX_OUTAGE_MS);
        self.lock().outage_until = (ms > 0).then(|| Instant::now() + Duration::from_millis(ms));
    }

    /// Milliseconds of outage left (0: none).
    pub fn outage_left_ms(&self) -> u64 {
        self.lock().outage_until.map_or(0, |t| {
            u64::try_from(t.saturating_duration_since(Instant::now()).as_millis())
                .unwrap_or(u64::MAX)
        })
    }
}

/// An `http` URL whose host is `localhost` or a loopback address.
pub(crate) fn is_loopback_http(url: &str) -> bool {
    let Ok(u) = reqwest::Url::parse(url) else {
        return false;
    };
    let host = u.host_str().unwrap_or("");
    u.scheme() == "http"
        && (host.eq_ignore_ascii_case("localhost")
            || host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback()))
}

fn epoch_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The data of `key` at `progress` (0..=1): a prefix of its items that grows with progress,
/// all of them at 1. Items are derived from a hash of the key, so they are the same on every
/// run and every instance. At most [`MAX_ITEMS`] items, whatever `items` says.
pub fn data_for(key: &str, items: u32, progress: f64, payload: Option<&str>) -> Value {
    let items = items.min(MAX_ITEMS);
    // Truncation is intended: a partial answer shows only whole items.
    let shown = ((f64::from(items) * progress).floor() as u32).min(items);
    let list: Vec<Value> = (0..shown)
        .map(|i| json!({"n": i + 1, "value": fnv1a(key, i) % 10_000}))
        .collect();
    let mut data = json!({"query": key, "progress": progress, "items": list});
    if let (Some(p), Some(obj)) = (payload, data.as_object_mut()) {
        obj.insert("payload".to_string(), Value::String(p.to_string()));
    }
    data
}

/// FNV-1a over the key and an index: tiny, stable across Rust versions (unlike `DefaultHasher`).
fn fnv1a(key: &str, i: u32) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.as_bytes().iter().chain(i.to_le_bytes().iter()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(p: Plan) -> Value {
        match p {
            Plan::Answer(v) => v,
            Plan::Fault { fault, .. } => panic!("unexpected fault {fault:?}"),
        }
    }

    #[test]
    fn done_on_the_nth_poll_and_data_grows() {
        let s = SimState::new(SimArgs::default());
        let o = Overrides {
            polls: Some(4),
            items: Some(8),
            ..Overrides::default()
        };
        let mut lens = Vec::new();
        for call in 1..=5 {
            let v = answer(s.plan("k", &o));
            let expect = if call >= 4 { "done" } else { "processing" };
            assert_eq!(v["status"], expect, "call {call}");
            lens.push(v["data"]["items"].as_array().map_or(0, Vec::len));
        }
        assert_eq!(lens, vec![2, 4, 6, 8, 8]);
        let st = s.stats();
        assert_eq!(st.calls, 5);
        assert_eq!(st.keys["k"], KeyStats { calls: 5, done: 2 });
    }

    #[test]
    fn data_is_deterministic_per_key() {
        assert_eq!(data_for("a", 5, 1.0, None), data_for("a", 5, 1.0, None));
        assert_ne!(data_for("a", 5, 1.0, None), data_for("b", 5, 1.0, None));
    }

    #[test]
    fn forced_fault_only_for_the_first_calls() {
        let s = SimState::new(SimArgs::default());
        let o = Overrides {
            polls: Some(1),
            fail: Some(Fault::RateLimited),
            fail_times: Some(2),
            retry_after_s: Some(3),
            ..Overrides::default()
        };
        for _ in 0..2 {
            assert!(matches!(
                s.plan("k", &o),
                Plan::Fault {
                    fault: Fault::RateLimited,
                    retry_after_s: 3
                }
            ));
        }
        assert_eq!(answer(s.plan("k", &o))["status"], "done");
        assert_eq!(s.key_detail("k").call_ms.len(), 3);
    }

    #[test]
    fn the_key_map_stays_within_its_cap_forgetting_the_oldest() {
        let cap = 50;
        let s = SimState::new(SimArgs {
            max_keys: cap,
            ..SimArgs::default()
        });
        let o = Overrides::default();
        for i in 0..cap + 30 {
            answer(s.plan(&format!("k{i}"), &o));
            // A key seen again is not a new key: it does not push anything out.
            answer(s.plan("k0", &o));
        }
        let st = s.stats();
        assert_eq!(st.keys.len(), cap, "{:?}", st.keys.keys());
        assert_eq!(st.calls, 2 * (cap as u64 + 30));
        // k0 was the oldest when the cap was first reached: forgotten, then back as new.
        assert!(!st.keys.contains_key("k1"));
        assert!(st.keys.contains_key(&format!("k{}", cap + 29)));
        let inner = s.lock();
        assert_eq!(inner.order.len(), inner.keys.len());
    }

    #[test]
    fn data_never_exceeds_the_item_cap() {
        let v = data_for("k", u32::MAX, 1.0, None);
        assert_eq!(
            v["items"].as_array().map(Vec::len),
            Some(MAX_ITEMS as usize)
        );
    }
}
