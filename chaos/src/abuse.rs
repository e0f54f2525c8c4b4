//! The abuse check: does `repoll serve` still answer a newcomer quickly while someone holds
//! thousands of live streams, trickles half-sent request headers, or hammers the sign-in?
//!
//! Against `repoll serve --sim` on its own Redis, three phases, each measured by a probe with
//! a fresh connection (a new user): `GET /healthz` and `POST /api/v1/queries`, each of which
//! must answer 2xx within the budget (1 s). A probe runs before anything (baseline), then
//! while each phase's load is held:
//!
//! Each of the first two phases is probed as soon as the load is in place and again after it
//! was held a few seconds (both gated).
//!
//! 1. live streams: N connections to `/api/v1/queries/{id}/events` for a real, long-running
//!    query, each confirmed by its first `state` event. (`/admin/events` is probed
//!    anonymously too: it needs a session, so it cannot be abused without a password and is
//!    reported, not opened.)
//! 2. slow connections: N sockets that send half a request header and then nothing; after the
//!    hold they are counted: how many did the server close (a header-read timeout would)?
//! 3. wrong sign-ins: N parallel POSTs with wrong passwords to the sign-in form's server
//!    function (its URL read from the `/admin/login` page's form). A probe runs while they are
//!    in flight (reported) and one after they all answered (gated).
//!
//! Each phase's connections are closed before the next, so each phase measures its own
//! effect. Failing probes are reported and make the exit code non-zero: today's server is
//! expected to fail some of them, and the check says so rather than hiding it.

use std::{
    collections::BTreeMap,
    path::PathBuf,
    time::{Duration, Instant},
};

use futures::{stream, StreamExt};
use tokio::{io::AsyncWriteExt, net::TcpStream};

use crate::{
    common::{fmt_ms, log_dir, repoll_cmd, wait_http},
    procs::{self, Proc},
    redis_server::RedisServer,
};

/// Options of `chaos abuse`.
#[derive(Debug, Clone, clap::Args)]
pub struct AbuseArgs {
    /// The repoll binary under test.
    #[arg(long, default_value = "target/release/repoll")]
    pub repoll_bin: PathBuf,
    /// Live streams to hold open.
    #[arg(long, default_value_t = 2000)]
    pub streams: usize,
    /// Slow connections (half a request header) to hold open.
    #[arg(long, default_value_t = 1000)]
    pub slow: usize,
    /// Parallel sign-ins with wrong passwords.
    #[arg(long, default_value_t = 100)]
    pub logins: usize,
    /// Time a probe (healthz, submit) may take, in ms.
    #[arg(long, default_value_t = 1000)]
    pub budget_ms: u64,
    /// How long the slow connections are held after their probe before counting how many the
    /// server closed, in seconds. The default outlasts the server's default header-read
    /// timeout (10 s), so every one of them must be closed by then (gated).
    #[arg(long, default_value_t = 12)]
    pub hold_secs: u64,
    /// Open-file soft limit of the server under test (default: the limit of the shell the
    /// suite was started from, i.e. what `repoll serve` would run with there).
    #[arg(long)]
    pub server_nofile: Option<u64>,
    /// Where logs go (default target/chaos/abuse-<time>).
    #[arg(long)]
    pub log_dir: Option<PathBuf>,
}

/// The server's default REPOLL_LOGIN_MAX_FAILURES (the check runs it with its defaults).
const LOGIN_MAX_FAILURES: u32 = 5;

/// One probe's two timings.
struct Probe {
    healthz: Result<Duration, String>,
    submit: Result<Duration, String>,
}

impl Probe {
    fn ok(&self, budget: Duration) -> bool {
        matches!(self.healthz, Ok(d) if d <= budget) && matches!(self.submit, Ok(d) if d <= budget)
    }
}

/// One line of the final table.
struct Row {
    phase: String,
    load: String,
    probe: Probe,
    gated: bool,
}

/// Runs the check; Ok(true) when every gated probe answered within the budget.
pub async fn abuse(args: AbuseArgs) -> Result<bool, String> {
    let bin = args.repoll_bin.clone();
    if !bin.exists() {
        return Err(format!(
            "{} not found: build it with `cargo build --release -p server --bin repoll` or pass --repoll-bin",
            bin.display()
        ));
    }
    let logs = log_dir(args.log_dir.clone(), "abuse")?;
    let budget = Duration::from_millis(args.budget_ms);
    let (soft, hard) = procs::raise_nofile();
    let server_nofile = args.server_nofile.unwrap_or_else(|| {
        crate::AMBIENT_NOFILE
            .load(std::sync::atomic::Ordering::Relaxed)
            .min(hard)
    });
    println!(
        "abuse check: {} streams, {} slow connections, {} wrong sign-ins; budget {} ms; \
         open files: client {soft}, server {server_nofile}; logs in {}",
        args.streams,
        args.slow,
        args.logins,
        args.budget_ms,
        logs.display()
    );
    if (soft as usize) < args.streams + args.slow + 200 {
        println!(
            "warning: the open-file limit {soft} is below what the phases need; \
             failures may be the client's own"
        );
    }

    let redis = RedisServer::start("everysec", &logs).await?;
    let port = procs::free_port().map_err(|e| e.to_string())?;
    let sim_port = procs::free_port().map_err(|e| e.to_string())?;
    let addr = format!("127.0.0.1:{port}");
    let sim_addr = format!("127.0.0.1:{sim_port}");
    let password = format!("abuse-{:016x}", rand::random::<u64>());
    // Everything else is the server's default: this checks the server as shipped.
    let env: Vec<(String, String)> = vec![
        ("REPOLL_ADMIN_PASSWORD".into(), password),
        (
            "REPOLL_UPSTREAM_URL".into(),
            format!("http://{sim_addr}/api/query?q={{key}}"),
        ),
    ];
    let log = logs.join("serve.log");
    let mut cmd = repoll_cmd(
        &bin,
        &[
            "serve",
            "--sim",
            "--sim-addr",
            &sim_addr,
            "--addr",
            &addr,
            "--redis-url",
            &redis.url(),
        ],
        &env,
    );
    procs::child_nofile(&mut cmd, server_nofile);
    let mut web =
        Proc::spawn("repoll serve --sim", cmd, &log).map_err(|e| format!("repoll serve: {e}"))?;
    let base = format!("http://{addr}");
    let setup = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| e.to_string())?;
    wait_http(
        &setup,
        &format!("{base}/readyz"),
        Duration::from_secs(30),
        &mut web,
        &log,
    )
    .await?;

    let mut rows = Vec::new();
    rows.push(Row {
        phase: "baseline".into(),
        load: "none".into(),
        probe: probe(&base, "baseline").await,
        gated: true,
    });

    // A query that stays "processing" for an hour: its stream never ends by itself.
    let id = setup
        .post(format!("{base}/api/v1/queries"))
        .json(&serde_json::json!({"query": "abuse-stream ms=3600000"}))
        .send()
        .await
        .map_err(|e| format!("submit: {e}"))?
        .json::<serde_json::Value>()
        .await
        .map_err(|e| format!("submit: {e}"))?["id"]
        .as_str()
        .ok_or("submit answered without an id")?
        .to_string();
    let admin_stream = match setup.get(format!("{base}/admin/events")).send().await {
        Ok(r) => r.status().as_u16().to_string(),
        Err(e) => format!("error {e}"),
    };

    // Phase 1: live streams.
    let t = Instant::now();
    let streams = open_streams(&base, &id, args.streams).await;
    let opened = streams.open.len();
    rows.push(Row {
        phase: format!("{} live streams", args.streams),
        load: format!(
            "{opened} open in {:.1} s{}; anonymous /admin/events: {admin_stream}",
            t.elapsed().as_secs_f64(),
            fmt_failures(&streams.failed)
        ),
        probe: probe(&base, "streams").await,
        gated: true,
    });
    // Held a while: every poll of the watched query wakes all of them (fan-out).
    tokio::time::sleep(Duration::from_secs(args.hold_secs)).await;
    let p = probe(&base, "streams-held").await;
    let alive = still_open(streams.open).await;
    rows.push(Row {
        phase: format!("  … held {} s", args.hold_secs),
        load: format!("{alive} of {opened} still open"),
        probe: p,
        gated: true,
    });

    // Phase 2: slow connections.
    let t = Instant::now();
    let (mut slow, failed) = open_slow(&addr, args.slow).await;
    let held = slow.len();
    rows.push(Row {
        phase: format!("{} slow headers", args.slow),
        load: format!(
            "{held} held{} after {:.1} s",
            fmt_failures(&failed),
            t.elapsed().as_secs_f64()
        ),
        probe: probe(&base, "slow").await,
        gated: true,
    });
    tokio::time::sleep(Duration::from_secs(args.hold_secs)).await;
    let p = probe(&base, "slow-held").await;
    let (closed, answered) = closed_by_server(&mut slow);
    rows.push(Row {
        phase: format!("  … held {} s", args.hold_secs),
        load: format!(
            "server closed {closed} of {held}, answered {answered} (header-read timeout: 10 s by default)"
        ),
        probe: p,
        gated: true,
    });
    // Half-sent requests must not be held for as long as the client likes.
    let slow_unclosed = held.saturating_sub(closed);
    drop(slow);

    // Phase 3: wrong sign-ins.
    let action = sign_in_action(&setup, &base).await?;
    let logins = {
        let base = base.clone();
        let action = action.clone();
        let n = args.logins;
        tokio::spawn(async move { wrong_sign_ins(&base, &action, n).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let during = probe(&base, "logins-during").await;
    let (statuses, slowest) = logins.await.map_err(|e| format!("sign-ins: {e}"))?;
    let checked = statuses.get("401").copied().unwrap_or(0);
    // Every 401 is a password that was checked (argon2); 429 is the limiter refusing first.
    let load = format!(
        "{} to {action}: {} (401 = password checked; limit {LOGIN_MAX_FAILURES}/min per client); slowest answer {}",
        args.logins,
        fmt_counts(&statuses),
        fmt_ms(slowest.as_millis())
    );
    rows.push(Row {
        phase: format!("{} wrong sign-ins (in flight)", args.logins),
        load: load.clone(),
        probe: during,
        gated: false,
    });
    rows.push(Row {
        phase: format!("{} wrong sign-ins (after)", args.logins),
        load: "all answered".into(),
        probe: probe(&base, "logins-after").await,
        gated: true,
    });

    web.kill().await;
    redis.stop().await;

    println!();
    println!(
        "── abuse check (budget {} ms per probe) ─────────────────────────",
        args.budget_ms
    );
    println!(
        "{:<34} {:>10} {:>10}  {:<8} load",
        "phase", "healthz", "submit", "verdict"
    );
    let mut pass = true;
    for r in &rows {
        let ok = r.probe.ok(budget);
        if r.gated && !ok {
            pass = false;
        }
        let verdict = match (ok, r.gated) {
            (true, _) => "ok",
            (false, true) => "FAIL",
            (false, false) => "slow*",
        };
        println!(
            "{:<34} {:>10} {:>10}  {:<8} {}",
            r.phase,
            fmt_probe(&r.probe.healthz),
            fmt_probe(&r.probe.submit),
            verdict,
            r.load
        );
    }
    println!("(* reported, not gated: the probe ran while the sign-ins were still in flight)");
    if args.hold_secs > 10 && slow_unclosed > 0 {
        pass = false;
        println!(
            "FAIL: {slow_unclosed} half-sent requests still open after {} s (the header-read timeout is 10 s)",
            args.hold_secs
        );
    }
    if checked > LOGIN_MAX_FAILURES as usize {
        // A gate: attempts are counted before the password check, so no burst may get more
        // checks than the limit.
        pass = false;
        println!(
            "FAIL: {checked} of {} parallel wrong passwords from one client were checked \
             (401) although the limit is {LOGIN_MAX_FAILURES} per minute",
            args.logins
        );
    } else {
        println!(
            "sign-in limit held: {checked} of {} parallel wrong passwords checked (limit {LOGIN_MAX_FAILURES})",
            args.logins
        );
    }
    println!("logs: {}", logs.display());
    println!("{}", if pass { "PASS" } else { "FAIL" });
    Ok(pass)
}

fn fmt_probe(r: &Result<Duration, String>) -> String {
    match r {
        Ok(d) => fmt_ms(d.as_millis()),
        Err(e) => e.clone(),
    }
}

fn fmt_counts(m: &BTreeMap<String, usize>) -> String {
    m.iter()
        .map(|(k, v)| format!("{k} ×{v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn fmt_failures(m: &BTreeMap<String, usize>) -> String {
    if m.is_empty() {
        String::new()
    } else {
        format!(" (failed: {})", fmt_counts(m))
    }
}

/// A new user's view: fresh connections (no pool), and an answer must be 2xx. Errors are
/// short words for the table; the timeout is long so a slow answer is measured, not cut.
async fn probe(base: &str, tag: &str) -> Probe {
    let built = reqwest::Client::builder()
        .timeout(Duration::from_secs(15))
        .pool_max_idle_per_host(0)
        .build();
    let Ok(c) = built else {
        return Probe {
            healthz: Err("client".into()),
            submit: Err("client".into()),
        };
    };
    let t = Instant::now();
    let healthz = match c.get(format!("{base}/healthz")).send().await {
        Ok(r) if r.status().is_success() => Ok(t.elapsed()),
        Ok(r) => Err(format!("HTTP {}", r.status().as_u16())),
        Err(e) if e.is_timeout() => Err("timeout".into()),
        Err(_) => Err("conn error".into()),
    };
    let t = Instant::now();
    let q = format!("abuse-probe-{tag}-{:08x}", rand::random::<u32>());
    let submit = match c
        .post(format!("{base}/api/v1/queries"))
        .json(&serde_json::json!({ "query": q }))
        .send()
        .await
    {
        Ok(r) if r.status().is_success() => Ok(t.elapsed()),
        Ok(r) => Err(format!("HTTP {}", r.status().as_u16())),
        Err(e) if e.is_timeout() => Err("timeout".into()),
        Err(_) => Err("conn error".into()),
    };
    Probe { healthz, submit }
}

struct Streams {
    open: Vec<reqwest::Response>,
    failed: BTreeMap<String, usize>,
}

/// How long one stream may take to answer and send its first event.
const STREAM_OPEN: Duration = Duration::from_secs(5);

/// Opens `n` live streams, 200 at a time; a stream counts as open once its first `state`
/// event arrived.
async fn open_streams(base: &str, id: &str, n: usize) -> Streams {
    let client = match reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            return Streams {
                open: Vec::new(),
                failed: BTreeMap::from([(format!("client: {e}"), n)]),
            }
        }
    };
    let url = format!("{base}/api/v1/queries/{id}/events");
    let results: Vec<Result<reqwest::Response, String>> = stream::iter(0..n)
        .map(|_| {
            let client = client.clone();
            let url = url.clone();
            async move {
                // A server out of file descriptors leaves connections in the kernel's accept
                // queue: connected, never answered. Bounded, or the check would wait forever.
                let sent = tokio::time::timeout(STREAM_OPEN, client.get(&url).send())
                    .await
                    .map_err(|_| format!("no answer in {} s", STREAM_OPEN.as_secs()))?;
                let mut r = sent.map_err(|e| {
                    if e.is_connect() {
                        "connect".to_string()
                    } else {
                        "request".to_string()
                    }
                })?;
                if !r.status().is_success() {
                    return Err(format!("HTTP {}", r.status().as_u16()));
                }
                match tokio::time::timeout(STREAM_OPEN, r.chunk()).await {
                    Ok(Ok(Some(c))) if String::from_utf8_lossy(&c).contains("event: state") => {
                        Ok(r)
                    }
                    Ok(Ok(_)) => Err("no state event".into()),
                    Ok(Err(_)) => Err("stream error".into()),
                    Err(_) => Err(format!("no event in {} s", STREAM_OPEN.as_secs())),
                }
            }
        })
        .buffer_unordered(200)
        .collect()
        .await;
    let mut s = Streams {
        open: Vec::new(),
        failed: BTreeMap::new(),
    };
    for r in results {
        match r {
            Ok(r) => s.open.push(r),
            Err(e) => *s.failed.entry(e).or_default() += 1,
        }
    }
    s
}

/// How many of the streams still deliver (a heartbeat or event within a short wait counts;
/// so does a quiet stream that has not ended). Consumes them: the phase is over.
async fn still_open(streams: Vec<reqwest::Response>) -> usize {
    stream::iter(streams)
        .map(|mut r| async move {
            match tokio::time::timeout(Duration::from_millis(200), r.chunk()).await {
                Ok(Ok(Some(_))) | Err(_) => 1,
                Ok(Ok(None)) | Ok(Err(_)) => 0,
            }
        })
        .buffer_unordered(500)
        .collect::<Vec<usize>>()
        .await
        .into_iter()
        .sum()
}

/// Opens `n` sockets, each sending the first half of a request header and nothing more.
async fn open_slow(addr: &str, n: usize) -> (Vec<TcpStream>, BTreeMap<String, usize>) {
    let results: Vec<Result<TcpStream, String>> = stream::iter(0..n)
        .map(|_| async move {
            let mut s = tokio::time::timeout(Duration::from_secs(10), TcpStream::connect(addr))
                .await
                .map_err(|_| "connect timeout".to_string())?
                .map_err(|e| format!("connect: {}", e.kind()))?;
            s.write_all(
                b"POST /api/v1/queries HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: applicat",
            )
            .await
            .map_err(|e| format!("write: {}", e.kind()))?;
            Ok(s)
        })
        .buffer_unordered(100)
        .collect()
        .await;
    let mut open = Vec::new();
    let mut failed = BTreeMap::new();
    for r in results {
        match r {
            Ok(s) => open.push(s),
            Err(e) => *failed.entry(e).or_default() += 1,
        }
    }
    (open, failed)
}

/// (closed, answered): sockets the server closed, and ones it sent something on (e.g. 408).
fn closed_by_server(socks: &mut [TcpStream]) -> (usize, usize) {
    let mut closed = 0;
    let mut answered = 0;
    let mut buf = [0u8; 512];
    for s in socks.iter_mut() {
        match s.try_read(&mut buf) {
            Ok(0) => closed += 1,
            Ok(_) => answered += 1,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => closed += 1,
        }
    }
    (closed, answered)
}

/// The sign-in form's target: the server function's URL, as the page renders it (it carries
/// a hash suffix, so it is read rather than guessed).
async fn sign_in_action(http: &reqwest::Client, base: &str) -> Result<String, String> {
    let html = http
        .get(format!("{base}/admin/login"))
        .send()
        .await
        .map_err(|e| format!("/admin/login: {e}"))?
        .text()
        .await
        .map_err(|e| format!("/admin/login: {e}"))?;
    let form = html
        .find("<form")
        .map(|i| &html[i..])
        .ok_or("/admin/login has no form")?;
    let end = form.find('>').unwrap_or(form.len());
    let tag = &form[..end];
    let start = tag
        .find("action=\"")
        .ok_or("the sign-in form has no action")?
        + "action=\"".len();
    let rest = &tag[start..];
    let action = &rest[..rest.find('"').unwrap_or(rest.len())];
    Ok(action.replace("&amp;", "&"))
}

/// `n` parallel form posts with wrong passwords; statuses counted, slowest answer timed.
async fn wrong_sign_ins(base: &str, action: &str, n: usize) -> (BTreeMap<String, usize>, Duration) {
    let client = match reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .redirect(reqwest::redirect::Policy::none())
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            return (
                BTreeMap::from([(format!("client: {e}"), n)]),
                Duration::ZERO,
            )
        }
    };
    let url = format!("{base}{action}");
    let answers: Vec<(String, Duration)> = stream::iter(0..n)
        .map(|i| {
            let client = client.clone();
            let url = url.clone();
            async move {
                let t = Instant::now();
                let r = client
                    .post(&url)
                    .header("content-type", "application/x-www-form-urlencoded")
                    .body(format!("password=wrong-guess-{i}"))
                    .send()
                    .await;
                let s = match r {
                    Ok(r) => r.status().as_u16().to_string(),
                    Err(e) if e.is_timeout() => "timeout".into(),
                    Err(_) => "error".into(),
                };
                (s, t.elapsed())
            }
        })
        .buffer_unordered(n.max(1))
        .collect()
        .await;
    let mut counts = BTreeMap::new();
    let mut slowest = Duration::ZERO;
    for (s, d) in answers {
        *counts.entry(s).or_default() += 1;
        slowest = slowest.max(d);
    }
    (counts, slowest)
}
