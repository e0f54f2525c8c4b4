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
//! 6. a log and span flood ([`log_flood`]) on a traced server of its own behind a stalled
//!    collector: the log's growth, the resident memory and the stop time are gated.
//!
//! The phases are `phases::Check`'s methods, run in this order.
//!
//! Each phase's connections are closed before the next, so each phase measures its own
//! effect. Failing probes and gates are reported and make the exit code non-zero: the check
//! says so rather than hiding it.

mod connections;
mod hostile;
mod log_flood;
mod phases;
mod request_lines;
mod sign_in;

use std::{
    collections::BTreeMap,
    path::PathBuf,
    time::{Duration, Instant},
};

use phases::Check;

use crate::{
    common::{fmt_ms, log_dir},
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
    if !args.repoll_bin.exists() {
        return Err(format!(
            "{} not found: build it with `cargo build --release -p server --bin repoll` or pass --repoll-bin",
            args.repoll_bin.display()
        ));
    }
    let logs = log_dir(args.log_dir.clone(), "abuse")?;
    let redis = RedisServer::start("everysec", &logs).await?;
    let (mut web, mut check) = Check::start(args, &logs, &redis).await?;
    check.baseline().await;
    check.live_streams().await?;
    check.slow_headers().await;
    check.hostile_upstream(&mut web).await?;
    check.request_lines().await;
    check.sign_ins().await?;
    web.kill().await;
    check.log_flood(&logs, &redis).await?;
    redis.stop().await;
    Ok(check.report(&logs))
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
