//! What an anonymous client's requests may cost the process: its log, its memory, its
//! shutdown (issue 39, rows 1 and 2). A real `repoll serve` with tracing on, exporting to a
//! collector that accepts connections and never answers, is sent hostile requests: cross-site
//! posts with a 60 KB path, pages with a 300-byte path segment, each with an 8 KB
//! `tracestate`. Before the bounds, 1,000 such requests wrote tens of MB of log (every path in
//! full, an ERROR "File name too long" per page) and the span queue behind the stalled
//! collector held every 68 KB span.

use crate::common;
use common::otlp;
use common::process::*;

use std::time::{Duration, Instant};

use testkit::http::BlockingHttp;
use testkit::{free_port, ChildGuard, TempDir};

/// Requests of each kind: 1,000 in all.
const EACH: usize = 500;

/// The most the log may grow under them. Unbounded, the posts alone wrote 30 MB.
const LOG_GROWTH_MAX: u64 = 1 << 20;

/// The most the process may grow under them. Unbounded, the span queue alone held 34 MB
/// (500 spans of a 60 KB path and an 8 KB tracestate) and grew with every request.
const RSS_GROWTH_MAX_KB: u64 = 24 * 1024;

fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// A `tracestate` of 30 members of 250 bytes (legal, 7.7 KB).
fn long_tracestate() -> String {
    let members: Vec<String> = (0..30)
        .map(|i| format!("k{i}={}", "a".repeat(250)))
        .collect();
    members.join(",")
}

/// `n` requests from each of 4 threads, made by `make` (given the client and the index).
fn flood(web: u16, n: usize, make: fn(&BlockingHttp, usize) -> reqwest::blocking::RequestBuilder) {
    let threads: Vec<_> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                let http = BlockingHttp::local(web);
                for i in (t..n).step_by(4) {
                    let answer = http.send(make(&http, i));
                    assert!(
                        answer.status == 403 || answer.status == 404,
                        "a hostile request is refused or not found: {}",
                        answer.status
                    );
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("flood thread");
    }
}

#[test]
fn hostile_requests_grow_neither_the_log_nor_the_process_and_stop_in_time() {
    let stalled = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", stalled.local_addr().unwrap());
    let held = std::thread::spawn(move || {
        let _open: Vec<_> = stalled.incoming().take(64).collect();
    });
    let redis = spawn_redis(free_port(), &[]);
    let dir = TempDir::new("hostile-load");
    let log_path = dir.path().join("serve.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let web = free_port();
    let mut serve = serve_command(&redis.url(), web);
    otlp::traced(&mut serve, &endpoint);
    // A site root that exists, as in a release: a missing one answers every lookup "no such
    // file" before the name's length is looked at.
    std::fs::create_dir_all(dir.path().join("site")).unwrap();
    serve
        .env("LEPTOS_SITE_ROOT", dir.path().join("site"))
        .env("RUST_LOG", "info")
        .env("REPOLL_SHUTDOWN_GRACE_MS", "300")
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    let mut guard = ChildGuard::spawn(serve).expect("repoll serve");
    assert!(wait_ready(web, Duration::from_secs(30)), "serve not ready");
    // Settled: a few pages served, so the baseline holds what any process holds.
    for _ in 0..20 {
        BlockingHttp::local(web).get("/healthz");
    }
    let rss_before = rss_kb(guard.id());
    let log_before = std::fs::metadata(&log_path).unwrap().len();

    flood(web, EACH, |http, i| {
        let path = format!("/admin/fn/{i}{}", "x".repeat(60_000));
        http.client
            .post(http.url(&path))
            .header("origin", "https://evil.example")
            .header("sec-fetch-site", "cross-site")
            .header(
                "traceparent",
                format!("00-{:032x}-{:016x}-01", i + 1, i + 1),
            )
            .header("tracestate", long_tracestate())
    });
    flood(web, EACH, |http, i| {
        let path = format!("/{i}{}", "y".repeat(300));
        http.client
            .get(http.url(&path))
            .header("tracestate", long_tracestate())
    });

    // Every bound is checked and every broken one reported, so one run shows them all.
    let mut broken = Vec::new();
    let grown = std::fs::metadata(&log_path).unwrap().len() - log_before;
    let rss_after = rss_kb(guard.id());
    let text = std::fs::read_to_string(&log_path).unwrap();
    if grown >= LOG_GROWTH_MAX {
        broken.push(format!(
            "the log grew by {grown} bytes for {} requests",
            2 * EACH
        ));
    }
    if text.contains("File name too long") || text.contains("Failed to read file") {
        broken.push("a too-long path is logged, not a quiet 404".to_string());
    }
    // The longest line a request may cause: clipped paths, not the whole of them.
    let longest = text.lines().map(str::len).max().unwrap_or(0);
    if longest >= 4096 {
        broken.push(format!("a log line of {longest} bytes"));
    }
    if !text.contains("suppressed=") {
        broken.push("no line counts the refusals left out of the log".to_string());
    }
    let metrics = BlockingHttp::local(web).get("/metrics").body;
    let refused = metrics
        .lines()
        .find_map(|l| l.strip_prefix("repoll_requests_refused_total{reason=\"cross_site\"} "))
        .and_then(|v| v.trim().parse::<f64>().ok());
    if refused != Some(EACH as f64) {
        broken.push(format!("refusals counted: {refused:?}, sent {EACH}"));
    }
    println!(
        "log +{grown} bytes, RSS {rss_before} → {rss_after} kB for {} hostile requests",
        2 * EACH
    );
    if rss_after >= rss_before + RSS_GROWTH_MAX_KB {
        broken.push(format!(
            "RSS grew from {rss_before} to {rss_after} kB behind a stalled collector"
        ));
    }

    // The spans still queued for the stalled collector hold the stop for the grace (300 ms)
    // at most, not the SDK's 5 s; the whole stop, connections drained, well under that.
    guard.signal(libc::SIGTERM);
    let t0 = Instant::now();
    while guard.exited().is_none() && t0.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
    println!("stopped in {:?}", t0.elapsed());
    if t0.elapsed() >= Duration::from_secs(4) {
        broken.push(format!(
            "stopped {:?} after SIGTERM (grace 300 ms)",
            t0.elapsed()
        ));
    }
    assert!(
        broken.is_empty(),
        "{broken:#?}\nthe log's end:\n{}",
        &text[text.len().saturating_sub(1500)..]
    );
    drop(held);
}
