//! Page and API timings on kept-alive connections against a running `repoll serve`.
//!
//!     cargo run --release -p server --example page_latency -- http://127.0.0.1:3000 [SECONDS] [CONNECTIONS]
//!
//! Each of CONNECTIONS (default 16) workers owns one kept-alive HTTP/1.1 connection (its own
//! client with a one-connection pool) and sends requests back to back for SECONDS (default 5)
//! per target. Printed per target: requests/s and the p50 / p99 / max latency of a whole
//! response (headers and body read). Why kept-alive: a returning browser reuses its connection,
//! and that is where a small final write held back by Nagle's algorithm cost ~40 ms per page
//! (the client's delayed ACK) before the server set `TCP_NODELAY`.
//! `scripts/bench-pages` starts a server and runs this; speed is read here, never asserted.

use std::time::{Duration, Instant};

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let base = args
        .get(1)
        .cloned()
        .unwrap_or_else(|| "http://127.0.0.1:3000".into());
    let seconds: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(5);
    let conns: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(16);

    // One real query first, so /q/<id> has something to show.
    let probe = reqwest::Client::new();
    let view: serde_json::Value = probe
        .post(format!("{base}/api/v1/queries"))
        .json(&serde_json::json!({ "query": "bench page polls=1" }))
        .send()
        .await
        .expect("submit")
        .json()
        .await
        .expect("json");
    let id = view["id"].as_str().expect("id").to_string();

    println!("target                         conns   req/s   p50 ms   p99 ms   max ms");
    for (name, method, path) in [
        ("GET / (query page)", "GET", "/".to_string()),
        ("GET /q/<id> (result page)", "GET", format!("/q/{id}")),
        ("GET /admin/login", "GET", "/admin/login".to_string()),
        (
            "GET /api/v1/queries/<id>",
            "GET",
            format!("/api/v1/queries/{id}"),
        ),
        (
            "POST /api/v1/queries (join)",
            "POST",
            "/api/v1/queries".to_string(),
        ),
        ("GET /healthz", "GET", "/healthz".to_string()),
    ] {
        let (count, mut lat) = run(&base, method, &path, conns, Duration::from_secs(seconds)).await;
        lat.sort_unstable();
        let pct = |p: f64| {
            lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
                .map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
        };
        println!(
            "{name:<30} {conns:>5} {:>7.0} {:>8.2} {:>8.2} {:>8.2}",
            count as f64 / seconds as f64,
            pct(0.50),
            pct(0.99),
            lat.last().map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
        );
    }
}

async fn run(
    base: &str,
    method: &str,
    path: &str,
    conns: usize,
    length: Duration,
) -> (usize, Vec<Duration>) {
    let url = format!("{base}{path}");
    let end = Instant::now() + length;
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let url = url.clone();
        let post = method == "POST";
        tasks.push(tokio::spawn(async move {
            let client = reqwest::Client::builder()
                .pool_max_idle_per_host(1)
                .http1_only()
                .build()
                .expect("client");
            let mut lat = Vec::new();
            while Instant::now() < end {
                let t = Instant::now();
                let req = if post {
                    client
                        .post(&url)
                        .json(&serde_json::json!({ "query": "bench page polls=1" }))
                } else {
                    client.get(&url).header("accept", "text/html")
                };
                match req.send().await {
                    Ok(res) => {
                        let ok = res.status().as_u16() < 500;
                        let _ = res.bytes().await;
                        if ok {
                            lat.push(t.elapsed());
                        }
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                }
            }
            lat
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap_or_default());
    }
    (all.len(), all)
}
