//! A read-mostly HTTP load: `POST` JSON bodies on kept-alive connections, a mix of bodies
//! whose answers are stored fresh, stored stale, and new ones (misses). Used by
//! `scripts/bench --only reads` against `repoll serve` and against nginx with `proxy_cache`,
//! with the same bodies, so the two answer the same requests.
//!
//!     read_mix warm URL DIR CONNS PASSES
//!     read_mix run  URL DIR SECONDS CONNS RATE PEER PHASE [SEED]
//!
//! DIR holds `fresh.txt` and `stale.txt`, one request body per line (sent as it is, as
//! `application/json`). A miss is a body made here, `{"query":"bench read miss <nonce> <n>"}`,
//! new every time. `warm` sends every body of both files PASSES times (spread over CONNS
//! connections) and measures nothing: it fills a cache, or counts a stored result's first asks.
//! `run` sends, on each of CONNS connections (each its own client with a one-connection pool:
//! kept alive, HTTP/1.1), bodies drawn at random: 90 % from fresh.txt, 9 % from stale.txt, 1 %
//! misses. RATE 0 sends back to back (the top rate); RATE > 0 is the total rate in requests
//! per second, each connection on its own fixed schedule (RATE / CONNS a second), and a
//! latency is counted from the request's scheduled time, so a server that falls behind shows it
//! (no coordinated omission). Latency is the whole response, headers and body read.
//!
//! What each answer was, as the server says, is tallied per kind of body: repoll's
//! `Cache-Status` (`hit`, `fwd=stale`, `fwd=miss`; a new query finished within the first-answer
//! wait says `hit; ...; stored`, counted as the miss it was) or nginx's `X-Cache-Status`
//! (`HIT`, `STALE`/`UPDATING`, `MISS`/`EXPIRED`), so a mix that is not what it claims shows.
//!
//! Machine-readable, for scripts/bench (one line per kind and one for all):
//! `RESULT peer=PEER phase=PHASE_{all,hits,fresh,stale,miss} n= rps= p50_ms= p99_ms= bytes= errors=`
//! (hits: fresh and stale together)
//! `OBSERVED peer=PEER phase=PHASE kind=fresh hit= stale= miss= other=`
//! Speed is read here, never asserted.

use std::time::{Duration, Instant};

const KINDS: [&str; 3] = ["fresh", "stale", "miss"];

/// splitmix64: a small, seeded random source (the same draws for both peers).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// What the server said an answer was: 0 hit, 1 stale, 2 miss, 3 anything else.
fn observed(res: &reqwest::Response) -> usize {
    let h = |name: &str| {
        res.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_ascii_lowercase()
    };
    let repoll = h("cache-status");
    let nginx = h("x-cache-status");
    if repoll.contains("fwd=stale") || nginx == "stale" || nginx == "updating" {
        1
    } else if repoll.contains("fwd=miss")
        || repoll.contains("; stored")
        || nginx == "miss"
        || nginx == "expired"
    {
        2
    } else if repoll.contains("; hit") || nginx == "hit" {
        0
    } else {
        3
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(1)
        .http1_only()
        .build()
        .expect("client")
}

/// One request; Ok((status < 500, what the server said, body bytes)).
async fn send(
    c: &reqwest::Client,
    url: &str,
    body: String,
) -> Result<(bool, usize, usize), reqwest::Error> {
    let res = c
        .post(url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await?;
    let ok = res.status().as_u16() < 500 && res.status().as_u16() != 429;
    let seen = observed(&res);
    let bytes = res.bytes().await?.len();
    Ok((ok, seen, bytes))
}

fn lines(dir: &str, name: &str) -> Vec<String> {
    let path = format!("{dir}/{name}");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let v: Vec<String> = text
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    assert!(!v.is_empty(), "{path} has no bodies");
    v
}

fn arg<T: std::str::FromStr>(args: &[String], i: usize, what: &str) -> T {
    args.get(i)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("argument {i} ({what}) missing or malformed"))
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("warm") => warm(&args).await,
        Some("run") => run(&args).await,
        _ => panic!("usage: read_mix warm URL DIR CONNS PASSES | run URL DIR SECONDS CONNS RATE PEER PHASE [SEED]"),
    }
}

async fn warm(args: &[String]) {
    let url: String = arg(args, 2, "URL");
    let dir: String = arg(args, 3, "DIR");
    let conns: usize = arg(args, 4, "CONNS");
    let passes: usize = arg(args, 5, "PASSES");
    let mut bodies = lines(&dir, "fresh.txt");
    bodies.extend(lines(&dir, "stale.txt"));
    let all: Vec<String> = (0..passes).flat_map(|_| bodies.iter().cloned()).collect();
    let all = std::sync::Arc::new(all);
    let t = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..conns {
        let (all, url) = (all.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            let c = client();
            let mut bad = 0usize;
            for body in all.iter().skip(w).step_by(conns) {
                match send(&c, &url, body.clone()).await {
                    Ok((true, _, _)) => {}
                    _ => bad += 1,
                }
            }
            bad
        }));
    }
    let mut bad = 0;
    for t in tasks {
        bad += t.await.expect("warm task");
    }
    println!(
        "warm: {} requests in {:.1} s, {bad} failed",
        all.len(),
        t.elapsed().as_secs_f64()
    );
    assert_eq!(bad, 0, "warm-up requests failed");
}

/// Per connection: latencies and bytes per kind, failures, observed answers [kind][seen].
#[derive(Default)]
struct Tally {
    lat: [Vec<Duration>; 3],
    bytes: [usize; 3],
    errors: usize,
    seen: [[usize; 4]; 3],
}

async fn run(args: &[String]) {
    let url: String = arg(args, 2, "URL");
    let dir: String = arg(args, 3, "DIR");
    let seconds: f64 = arg(args, 4, "SECONDS");
    let conns: usize = arg(args, 5, "CONNS");
    let rate: f64 = arg(args, 6, "RATE");
    let peer: String = arg(args, 7, "PEER");
    let phase: String = arg(args, 8, "PHASE");
    let seed: u64 = args.get(9).and_then(|s| s.parse().ok()).unwrap_or(26);
    // Misses must be new on every run of either peer.
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let start = Instant::now() + Duration::from_millis(500);
    let plan = Plan {
        url,
        fresh: std::sync::Arc::new(lines(&dir, "fresh.txt")),
        stale: std::sync::Arc::new(lines(&dir, "stale.txt")),
        start,
        end: start + Duration::from_secs_f64(seconds),
        interval: (rate > 0.0).then(|| Duration::from_secs_f64(conns as f64 / rate)),
        conns,
        seed,
        nonce,
    };
    let tasks: Vec<_> = (0..conns)
        .map(|w| tokio::spawn(connection(plan.clone(), w)))
        .collect();
    let mut all = Tally::default();
    for task in tasks {
        let t = task.await.expect("load task");
        for k in 0..3 {
            all.lat[k].extend(t.lat[k].iter().copied());
            all.bytes[k] += t.bytes[k];
            for s in 0..4 {
                all.seen[k][s] += t.seen[k][s];
            }
        }
        all.errors += t.errors;
    }
    report(&mut all, seconds, &peer, &phase);
}

/// What every connection of one run shares: where to send, what to ask, when.
#[derive(Clone)]
struct Plan {
    url: String,
    fresh: std::sync::Arc<Vec<String>>,
    stale: std::sync::Arc<Vec<String>>,
    start: Instant,
    end: Instant,
    /// Between one connection's requests at a fixed offered rate (None: as fast as it can).
    interval: Option<Duration>,
    conns: usize,
    seed: u64,
    nonce: u128,
}

/// Connection `w`'s requests, 90 % fresh, 9 % stale and 1 % new queries, on its schedule.
async fn connection(plan: Plan, w: usize) -> Tally {
    let Plan {
        url,
        fresh,
        stale,
        start,
        end,
        interval,
        conns,
        seed,
        nonce,
    } = plan;
    let c = client();
    let mut rng = Rng(seed.wrapping_mul(1_000_003).wrapping_add(w as u64));
    let mut t = Tally::default();
    // Each connection's schedule is offset so the total is spread evenly.
    let mut due = start + interval.map_or(Duration::ZERO, |i| i.mul_f64(w as f64 / conns as f64));
    // The connection is opened before the clock starts.
    let _ = send(&c, &url, fresh[w % fresh.len()].clone()).await;
    tokio::time::sleep_until(start.into()).await;
    let mut n = 0u64;
    loop {
        if interval.is_some() {
            tokio::time::sleep_until(due.into()).await;
        } else {
            due = Instant::now();
        }
        if due >= end {
            break;
        }
        let r = rng.next() % 100;
        let (kind, body) = if r < 90 {
            (0, fresh[(rng.next() % fresh.len() as u64) as usize].clone())
        } else if r < 99 {
            (1, stale[(rng.next() % stale.len() as u64) as usize].clone())
        } else {
            n += 1;
            (
                2,
                format!(r#"{{"query":"bench read miss {nonce} {w} {n}"}}"#),
            )
        };
        match send(&c, &url, body).await {
            Ok((true, seen, bytes)) => {
                t.lat[kind].push(due.elapsed());
                t.bytes[kind] += bytes;
                t.seen[kind][seen] += 1;
            }
            _ => t.errors += 1,
        }
        if let Some(i) = interval {
            due += i;
        }
    }
    t
}

/// The RESULT and OBSERVED lines scripts/bench-reads reads.
fn report(all: &mut Tally, seconds: f64, peer: &str, phase: &str) {
    let pct = |lat: &[Duration], p: f64| {
        lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
            .map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
    };
    let mut every: Vec<Duration> = all.lat.iter().flatten().copied().collect();
    every.sort_unstable();
    let total_bytes: usize = all.bytes.iter().sum();
    println!(
        "RESULT peer={peer} phase={phase}_all n={} rps={:.0} p50_ms={:.3} p99_ms={:.3} bytes={:.0} errors={}",
        every.len(),
        every.len() as f64 / seconds,
        pct(&every, 0.50),
        pct(&every, 0.99),
        total_bytes as f64 / every.len().max(1) as f64,
        all.errors
    );
    // Hits: the stored answers, fresh and stale together.
    let mut hits: Vec<Duration> = all.lat[..2].iter().flatten().copied().collect();
    hits.sort_unstable();
    println!(
        "RESULT peer={peer} phase={phase}_hits n={} rps={:.0} p50_ms={:.3} p99_ms={:.3}",
        hits.len(),
        hits.len() as f64 / seconds,
        pct(&hits, 0.50),
        pct(&hits, 0.99)
    );
    for (k, name) in KINDS.iter().enumerate() {
        let lat = &mut all.lat[k];
        lat.sort_unstable();
        println!(
            "RESULT peer={peer} phase={phase}_{name} n={} rps={:.0} p50_ms={:.3} p99_ms={:.3} bytes={:.0}",
            lat.len(),
            lat.len() as f64 / seconds,
            pct(lat, 0.50),
            pct(lat, 0.99),
            all.bytes[k] as f64 / lat.len().max(1) as f64
        );
        let s = all.seen[k];
        println!(
            "OBSERVED peer={peer} phase={phase} kind={name} hit={} stale={} miss={} other={}",
            s[0], s[1], s[2], s[3]
        );
    }
}
