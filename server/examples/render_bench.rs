//! Server render time of the dashboard's pages against a running `repoll serve`, signed in as
//! the admin over HTTP, one request at a time.
//!
//!     cargo run --release -p server --example render_bench -- BASE PASSWORD [ROUNDS [PAGE…]]
//!
//! The pages are the dashboard's main ones unless listed. Per page: ROUNDS (default 30)
//! sequential GETs as a browser asks for a page (`Accept:
//! text/html`, the session cookie), after one warm-up; prints p50 / p95 / max of the whole
//! response and a machine-readable `RESULT page=… p50_ms=… p95_ms=… max_ms=…` line.
//! `scripts/bench-pages --tasks N` fills the queue with N tasks first and runs this; speed is
//! read here, never asserted by a test.

use std::time::{Duration, Instant};

use app::pages::admin::login::SignIn;
use leptos::server_fn::ServerFn;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(base), Some(password)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: render_bench BASE PASSWORD [ROUNDS [PAGE…]]");
        std::process::exit(2);
    };
    let rounds: usize = args
        .get(3)
        .and_then(|s| s.parse().ok())
        .unwrap_or(30)
        .max(1);
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(60))
        .build()
        .expect("client");
    let res = client
        .post(format!("{base}{}", SignIn::PATH))
        .header("accept", "application/json")
        .form(&[("password", password.as_str())])
        .send()
        .await
        .expect("sign in");
    let cookie = res
        .headers()
        .get_all(reqwest::header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| v.strip_prefix("repoll_session="))
        .and_then(|v| v.split(';').next())
        .map(|id| format!("repoll_session={id}"))
        .unwrap_or_else(|| panic!("no session cookie (status {})", res.status()));

    let listed: Vec<&str> = args.iter().skip(4).map(String::as_str).collect();
    let pages = if listed.is_empty() {
        vec![
            "/admin",
            "/admin/tasks",
            "/admin/tasks?state=waiting",
            "/admin/tasks?state=dead",
            "/admin/tasks?q=state:dead%20error:%22HTTP%20503%22",
            "/admin/leases",
        ]
    } else {
        listed
    };
    println!("page                              p50 ms   p95 ms   max ms   bytes");
    for page in pages {
        let mut times = Vec::with_capacity(rounds);
        let mut bytes = 0;
        for i in 0..=rounds {
            let t = Instant::now();
            let res = client
                .get(format!("{base}{page}"))
                .header("accept", "text/html")
                .header("cookie", &cookie)
                .send()
                .await
                .expect("get");
            let status = res.status();
            let body = res.bytes().await.expect("body");
            let took = t.elapsed();
            assert!(status.is_success(), "{page}: HTTP {status}");
            bytes = body.len();
            if i > 0 {
                times.push(took);
            }
        }
        times.sort_unstable();
        let pct = |p: f64| {
            let rank = ((p * times.len() as f64).ceil() as usize).clamp(1, times.len());
            times[rank - 1].as_secs_f64() * 1e3
        };
        println!(
            "{page:<33} {:>7.1} {:>8.1} {:>8.1} {bytes:>7}",
            pct(0.5),
            pct(0.95),
            pct(1.0)
        );
        println!(
            "RESULT page={page} rounds={rounds} p50_ms={:.2} p95_ms={:.2} max_ms={:.2}",
            pct(0.5),
            pct(0.95),
            pct(1.0)
        );
    }
}
