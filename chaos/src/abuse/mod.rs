//! The abuse check: does `repoll serve` still answer a newcomer quickly while someone holds
//! thousands of live streams, trickles half-sent request headers, makes its upstream answer
//! the worst it may, sends request lines that name no path, or hammers the sign-in?
//!
//! Against `repoll serve --sim` on its own Redis, five phases, each measured by a probe with
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
//! 3. hostile upstream ([`hostile`]): queries whose upstream answers with megabytes (a failed
//!    message, partials, a final result) or JSON 60,000 deep, then 50 dead tasks with the
//!    longest texts; Redis memory, a dead task's size, the server's resident memory, the dead
//!    list page and the public answers are gated once they ended. Probed while the answers
//!    are being read (reported) and after (gated).
//! 4. request lines that name no path ([`request_lines`]): `CONNECT host:port`,
//!    `POST host:port`, `OPTIONS *`; each must be a 400 or a closed connection, and the
//!    server's log must gain no panic.
//! 5. wrong sign-ins: N parallel POSTs with wrong passwords to the sign-in form's server
//!    function (its URL read from the `/admin/login` page's form). A probe runs while they are
//!    in flight (reported) and one after they all answered (gated). Last, because they use up
//!    the sign-in allowance of the suite's address that phase 3 signs in from.
//!
//! Each phase's connections are closed before the next, so each phase measures its own
//! effect. Failing probes and gates are reported and make the exit code non-zero: the check
//! says so rather than hiding it.

mod connections;
mod hostile;
mod log_flood;
mod request_lines;
mod sign_in;

use std::{
    collections::BTreeMap,
    path::PathBuf,
    time::{Duration, Instant},
};

use connections::{closed_by_server, open_slow, open_streams, still_open};
use sign_in::{sign_in_action, wrong_sign_ins};

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
    /// Hostile-upstream queries of each kind with megabytes: a failed message, partials, a
    /// final result.
    #[arg(long, default_value_t = 20)]
    pub hostile: usize,
    /// Hostile-upstream queries answered with JSON nested 60,000 deep.
    #[arg(long, default_value_t = 3)]
    pub deep: usize,
    /// Dead tasks with the longest texts, for the dead list page (it shows 50).
    #[arg(long, default_value_t = 50)]
    pub rows: usize,
    /// Filler bytes of a hostile answer (the simulator's `pad=`, at most 4 MiB; the workers'
    /// largest body is 4 MiB, so this much is read whole).
    #[arg(long, default_value_t = 3_900_000)]
    pub pad: usize,
    /// Request lines that name no path (`CONNECT host:port`, `OPTIONS *`, ...).
    #[arg(long, default_value_t = 200)]
    pub request_lines: usize,
    /// Hostile requests of each kind in the log and span flood (cross-site posts of a 60 KB
    /// path, pages of a 300-byte path), on a traced server behind a stalled collector.
    #[arg(long, default_value_t = 1000)]
    pub flood: usize,
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

/// A verdict on something other than a probe's timing, printed as one PASS / FAIL line.
pub(super) struct Gate {
    name: String,
    pass: bool,
    detail: String,
}

impl Gate {
    pub(super) fn new(name: &str, pass: bool, detail: String) -> Gate {
        Gate {
            name: name.to_string(),
            pass,
            detail,
        }
    }
}

/// The server under test, as the phases reach it.
pub(super) struct Target {
    /// `http://127.0.0.1:<port>`.
    pub(super) base: String,
    pub(super) redis_url: String,
    /// The admin password it was started with.
    pub(super) password: String,
    /// Its process id (for `/proc/<pid>/status`).
    pub(super) pid: u32,
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
        "abuse check: {} streams, {} slow connections, {} × 3 hostile answers of {} bytes + {} \
         JSON 60,000 deep + {} long dead rows, {} request lines without a path, {} wrong sign-ins; \
         budget {} ms; open files: client {soft}, server {server_nofile}; logs in {}",
        args.streams,
        args.slow,
        args.hostile,
        args.pad,
        args.deep,
        args.rows,
        args.request_lines,
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
        ("REPOLL_ADMIN_PASSWORD".into(), password.clone()),
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
    let target = Target {
        base: base.clone(),
        redis_url: redis.url(),
        password,
        pid: web.child.id().ok_or("repoll serve has no pid")?,
    };
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
    let mut gates = Vec::new();
    if args.hold_secs > 10 {
        gates.push(Gate::new(
            "slow headers: every half-sent request closed",
            slow_unclosed == 0,
            format!(
                "{closed} of {held} closed after {} s (the header-read timeout is 10 s)",
                args.hold_secs
            ),
        ));
    }

    // Phase 3: the hostile upstream.
    let plan = hostile::Plan {
        each: args.hostile,
        deep: args.deep,
        rows: args.rows,
        pad: args.pad,
    };
    let log_from = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
    let h = hostile::run(&target, plan).await?;
    let (panics, first) = request_lines::panics_since(&log, log_from);
    gates.extend(h.gates);
    gates.push(Gate::new(
        "hostile upstream: no panic in serve's log, serve still running",
        panics == 0 && web.exited().is_none(),
        format!(
            "{panics} panic lines{}; serve {}",
            first.map(|l| format!(" (first: {l})")).unwrap_or_default(),
            web.exited()
                .map(|s| format!("exited ({s})"))
                .unwrap_or_else(|| "running".into())
        ),
    ));
    rows.push(Row {
        phase: "hostile upstream (in flight)".into(),
        load: h.load.clone(),
        probe: h.during,
        gated: false,
    });
    rows.push(Row {
        phase: "hostile upstream (after)".into(),
        load: "all ended; figures below".into(),
        probe: h.after,
        gated: true,
    });

    // Phase 4: request lines that name no path.
    let flood = request_lines::flood(&addr, &log, args.request_lines).await;
    gates.push(Gate::new(
        "request lines without a path: 400 or closed, no panic",
        flood.pass(),
        format!(
            "{} lines ({}): {}; {} panic lines in serve's log{}",
            args.request_lines,
            request_lines::LINES.join(" | "),
            fmt_counts(&flood.answers),
            flood.panic_lines,
            flood
                .first_panic
                .as_deref()
                .map(|l| format!(" (first: {l})"))
                .unwrap_or_default()
        ),
    ));
    rows.push(Row {
        phase: format!("{} request lines (after)", args.request_lines),
        load: fmt_counts(&flood.answers),
        probe: probe(&base, "lines-after").await,
        gated: true,
    });

    // Phase 5: wrong sign-ins.
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

    // Phase 6: a log and span flood on a traced server of its own, collector stalled.
    let (flood_gates, flood_figures) =
        log_flood::run(&bin, &redis.url(), &logs, args.flood).await?;
    gates.extend(flood_gates);
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
    println!(
        "(* reported, not gated: the probe ran while the answers or sign-ins were still in flight)"
    );
    // Attempts are counted before the password check, so no burst may get more checks than
    // the limit.
    gates.push(Gate::new(
        "sign-in limit",
        checked <= LOGIN_MAX_FAILURES as usize,
        format!(
            "{checked} of {} parallel wrong passwords from one client checked (401); limit \
             {LOGIN_MAX_FAILURES} a minute",
            args.logins
        ),
    ));
    println!();
    println!("── gates ─────────────────────────────────────────────────────────");
    for g in &gates {
        pass &= g.pass;
        println!(
            "{} {}: {}",
            if g.pass { "PASS" } else { "FAIL" },
            g.name,
            g.detail
        );
    }
    println!();
    for f in &h.figures {
        println!("figure: {f}");
    }
    println!("figure: {flood_figures}");
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
