//! What an anonymous flood may cost a server with tracing on, behind a collector that has
//! stopped answering: its log, its memory, its stop (issue 39). A `repoll serve` of its own
//! (web only, on the check's Redis) gets cross-site posts of a 60 KB path and pages of a
//! 300-byte path segment, each with a 7.7 KB `tracestate`. Unbounded, 3,000 such requests
//! wrote 344 MiB of log, and the span queue behind the stalled collector took the process
//! from 21 to 258 MB.

use std::{collections::BTreeMap, path::Path, time::Duration};

use futures::{stream, StreamExt};

use super::Gate;
use crate::{
    common::{repoll_cmd, wait_http},
    procs::{self, Proc},
};

/// The most the log may grow for the whole flood.
const LOG_GROWTH_MAX: u64 = 1 << 20;

/// The most the process may grow for the whole flood, in kB.
const RSS_GROWTH_MAX_KB: u64 = 48 * 1024;

/// How long the stop may take after SIGTERM: the grace given (300 ms) twice (the drain,
/// then the trace flush), with room for a loaded machine; the SDK's own wait was 5 s.
const STOP_WITHIN: Duration = Duration::from_secs(3);

fn rss_kb(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

fn tracestate() -> String {
    let members: Vec<String> = (0..30)
        .map(|i| format!("k{i}={}", "a".repeat(250)))
        .collect();
    members.join(",")
}

/// `n` hostile requests of each kind, 16 at a time; the answers counted by status.
async fn flood(base: &str, n: usize) -> BTreeMap<String, usize> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client");
    let state = tracestate();
    let answers: Vec<String> = stream::iter(0..2 * n)
        .map(|i| {
            let (http, state) = (http.clone(), state.clone());
            async move {
                let req = if i % 2 == 0 {
                    http.post(format!("{base}/admin/fn/{i}{}", "x".repeat(60_000)))
                        .header("origin", "https://evil.example")
                        .header("sec-fetch-site", "cross-site")
                } else {
                    http.get(format!("{base}/{i}{}", "y".repeat(300)))
                };
                let sent = req
                    .header(
                        "traceparent",
                        format!("00-{:032x}-{:016x}-01", i + 1, i + 1),
                    )
                    .header("tracestate", state)
                    .send()
                    .await;
                match sent {
                    Ok(r) => r.status().as_u16().to_string(),
                    Err(e) => format!("error: {e}"),
                }
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let mut counts = BTreeMap::new();
    for a in answers {
        *counts.entry(a).or_default() += 1;
    }
    counts
}

/// Runs the flood of `n` requests of each kind on a server of its own; its gates and a line
/// of figures.
pub(super) async fn run(
    bin: &Path,
    redis_url: &str,
    logs: &Path,
    n: usize,
) -> Result<(Vec<Gate>, String), String> {
    // The collector: takes connections, reads nothing, answers nothing.
    let stalled = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let endpoint = format!(
        "http://{}",
        stalled.local_addr().map_err(|e| e.to_string())?
    );
    let holder = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = stalled.accept().await {
            held.push(s);
        }
    });
    let port = procs::free_port().map_err(|e| e.to_string())?;
    let base = format!("http://127.0.0.1:{port}");
    let site = logs.join("flood-site");
    std::fs::create_dir_all(&site).map_err(|e| e.to_string())?;
    let env: Vec<(String, String)> = [
        ("REPOLL_ADDR", format!("127.0.0.1:{port}")),
        ("REDIS_URL", redis_url.to_string()),
        ("REPOLL_QUEUE", "flood".to_string()),
        ("REPOLL_WORKERS", "0".to_string()),
        (
            "REPOLL_ADMIN_PASSWORD",
            format!("{:016x}", rand::random::<u64>()),
        ),
        ("REPOLL_SHUTDOWN_GRACE_MS", "300".to_string()),
        ("LEPTOS_SITE_ROOT", site.display().to_string()),
        ("RUST_LOG", "info".to_string()),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
        ("OTEL_TRACES_SAMPLER", "always_on".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let log = logs.join("flood-serve.log");
    let cmd = repoll_cmd(bin, &["serve"], &env);
    let mut web = Proc::spawn("repoll serve (traced, stalled collector)", cmd, &log)
        .map_err(|e| format!("repoll serve: {e}"))?;
    let pid = web.child.id().ok_or("no pid")?;
    let setup = reqwest::Client::new();
    wait_http(
        &setup,
        &format!("{base}/readyz"),
        Duration::from_secs(30),
        &mut web,
        &log,
    )
    .await?;
    let rss_before = rss_kb(pid).unwrap_or(0);
    let log_before = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);

    let answers = flood(&base, n).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let grown = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0) - log_before;
    let rss_after = rss_kb(pid).unwrap_or(u64::MAX);

    procs::signal_group(web.pgid, libc::SIGTERM);
    let t0 = std::time::Instant::now();
    let stopped = tokio::time::timeout(Duration::from_secs(30), web.child.wait()).await;
    let stop = t0.elapsed();
    if stopped.is_err() {
        web.kill().await;
    }
    holder.abort();

    let refused_only = answers.keys().all(|k| k == "403" || k == "404");
    let gates = vec![
        Gate::new(
            "log flood: the log grows by less than 1 MiB, every request refused",
            grown < LOG_GROWTH_MAX && refused_only,
            format!(
                "{} cross-site posts of a 60 KB path + {n} pages of a 300-byte path: {}; log +{grown} bytes",
                n,
                super::fmt_counts(&answers)
            ),
        ),
        Gate::new(
            "span size: RSS bounded behind a stalled collector",
            rss_after < rss_before + RSS_GROWTH_MAX_KB,
            format!("RSS {rss_before} → {rss_after} kB (bound +{RSS_GROWTH_MAX_KB} kB)"),
        ),
        Gate::new(
            "stalled collector: the stop takes the grace, not the SDK's 5 s",
            stop < STOP_WITHIN,
            format!("stopped {} ms after SIGTERM (grace 300 ms)", stop.as_millis()),
        ),
    ];
    let figures = format!(
        "log flood: {} requests, log +{grown} bytes, RSS {rss_before} → {rss_after} kB, stop {} ms",
        2 * n,
        stop.as_millis()
    );
    Ok((gates, figures))
}
