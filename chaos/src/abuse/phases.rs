//! The abuse check's phases, one method each on [`Check`], which keeps what they found: the
//! table's rows (a probe's timings under each load), the gates (PASS / FAIL verdicts) and the
//! figures. `abuse` runs them in order and prints [`Check::report`].

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::connections::{closed_by_server, open_slow, open_streams, still_open};
use super::sign_in::{sign_in_action, wrong_sign_ins};
use super::{
    fmt_counts, fmt_failures, fmt_probe, hostile, log_flood, probe, request_lines, AbuseArgs, Gate,
    Probe, Row, Target, LOGIN_MAX_FAILURES,
};
use crate::{
    common::{fmt_ms, repoll_cmd, wait_http},
    procs::{self, Proc},
    redis_server::RedisServer,
};

/// The check under way.
pub(super) struct Check {
    args: AbuseArgs,
    target: Target,
    /// The server's `host:port`, for raw sockets.
    addr: String,
    /// The server's log file.
    log: PathBuf,
    /// A client for the check's own requests (not a probe: it keeps its connections).
    setup: reqwest::Client,
    rows: Vec<Row>,
    gates: Vec<Gate>,
    figures: Vec<String>,
}

impl Check {
    /// Starts `repoll serve --sim` on `redis` with the server's defaults (this checks the
    /// server as shipped) but an admin password, and waits until it is ready.
    pub(super) async fn start(
        args: AbuseArgs,
        logs: &Path,
        redis: &RedisServer,
    ) -> Result<(Proc, Check), String> {
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
        let port = procs::free_port().map_err(|e| e.to_string())?;
        let sim_port = procs::free_port().map_err(|e| e.to_string())?;
        let addr = format!("127.0.0.1:{port}");
        let sim_addr = format!("127.0.0.1:{sim_port}");
        let password = format!("abuse-{:016x}", rand::random::<u64>());
        let env: Vec<(String, String)> = vec![
            ("REPOLL_ADMIN_PASSWORD".into(), password.clone()),
            (
                "REPOLL_UPSTREAM_URL".into(),
                format!("http://{sim_addr}/api/query?q={{key}}"),
            ),
        ];
        let log = logs.join("serve.log");
        let serve = [
            "serve",
            "--sim",
            "--sim-addr",
            &sim_addr,
            "--addr",
            &addr,
            "--redis-url",
            &redis.url(),
        ];
        let mut cmd = repoll_cmd(&args.repoll_bin, &serve, &env);
        procs::child_nofile(&mut cmd, server_nofile);
        let mut web = Proc::spawn("repoll serve --sim", cmd, &log)
            .map_err(|e| format!("repoll serve: {e}"))?;
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
        let ready = format!("{base}/readyz");
        wait_http(&setup, &ready, Duration::from_secs(30), &mut web, &log).await?;
        let check = Check {
            args,
            target,
            addr,
            log,
            setup,
            rows: Vec::new(),
            gates: Vec::new(),
            figures: Vec::new(),
        };
        Ok((web, check))
    }

    fn base(&self) -> &str {
        &self.target.base
    }

    fn row(&mut self, phase: String, load: String, probe: Probe, gated: bool) {
        self.rows.push(Row {
            phase,
            load,
            probe,
            gated,
        });
    }

    /// A probe before any load.
    pub(super) async fn baseline(&mut self) {
        let p = probe(self.base(), "baseline").await;
        self.row("baseline".into(), "none".into(), p, true);
    }

    /// Phase 1: live streams of a query that stays "processing" for an hour (its streams never
    /// end by themselves), probed when open and after a hold; every poll of the watched query
    /// wakes all of them (fan-out).
    pub(super) async fn live_streams(&mut self) -> Result<(), String> {
        let base = self.base().to_string();
        let id = self
            .setup
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
        let admin_stream = match self.setup.get(format!("{base}/admin/events")).send().await {
            Ok(r) => r.status().as_u16().to_string(),
            Err(e) => format!("error {e}"),
        };
        let t = Instant::now();
        let streams = open_streams(&base, &id, self.args.streams).await;
        let opened = streams.open.len();
        let load = format!(
            "{opened} open in {:.1} s{}; anonymous /admin/events: {admin_stream}",
            t.elapsed().as_secs_f64(),
            fmt_failures(&streams.failed)
        );
        let p = probe(&base, "streams").await;
        self.row(format!("{} live streams", self.args.streams), load, p, true);
        tokio::time::sleep(Duration::from_secs(self.args.hold_secs)).await;
        let p = probe(&base, "streams-held").await;
        let alive = still_open(streams.open).await;
        let load = format!("{alive} of {opened} still open");
        self.row(format!("  … held {} s", self.args.hold_secs), load, p, true);
        Ok(())
    }

    /// Phase 2: slow connections (half a request header, then nothing); after the hold, how
    /// many did the server close? Half-sent requests must not be held as long as a client
    /// likes: gated when the hold outlasts the header-read timeout.
    pub(super) async fn slow_headers(&mut self) {
        let (base, hold) = (self.base().to_string(), self.args.hold_secs);
        let t = Instant::now();
        let (mut slow, failed) = open_slow(&self.addr, self.args.slow).await;
        let held = slow.len();
        let load = format!(
            "{held} held{} after {:.1} s",
            fmt_failures(&failed),
            t.elapsed().as_secs_f64()
        );
        let p = probe(&base, "slow").await;
        self.row(format!("{} slow headers", self.args.slow), load, p, true);
        tokio::time::sleep(Duration::from_secs(hold)).await;
        let p = probe(&base, "slow-held").await;
        let (closed, answered) = closed_by_server(&mut slow);
        let load = format!(
            "server closed {closed} of {held}, answered {answered} (header-read timeout: 10 s by default)"
        );
        self.row(format!("  … held {hold} s"), load, p, true);
        drop(slow);
        if hold > 10 {
            self.gates.push(Gate::new(
                "slow headers: every half-sent request closed",
                closed >= held,
                format!(
                    "{closed} of {held} closed after {hold} s (the header-read timeout is 10 s)"
                ),
            ));
        }
    }

    /// Phase 3: the hostile upstream ([`hostile`]); the server must not panic nor exit.
    pub(super) async fn hostile_upstream(&mut self, web: &mut Proc) -> Result<(), String> {
        let plan = hostile::Plan {
            each: self.args.hostile,
            deep: self.args.deep,
            rows: self.args.rows,
            pad: self.args.pad,
        };
        let log_from = std::fs::metadata(&self.log).map(|m| m.len()).unwrap_or(0);
        let h = hostile::run(&self.target, plan).await?;
        let (panics, first) = request_lines::panics_since(&self.log, log_from);
        self.gates.extend(h.gates);
        self.gates.push(Gate::new(
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
        self.figures.extend(h.figures);
        let in_flight = "hostile upstream (in flight)".to_string();
        self.row(in_flight, h.load, h.during, false);
        let after = "hostile upstream (after)".to_string();
        self.row(after, "all ended; figures below".into(), h.after, true);
        Ok(())
    }

    /// Phase 4: request lines that name no path ([`request_lines`]).
    pub(super) async fn request_lines(&mut self) {
        let n = self.args.request_lines;
        let flood = request_lines::flood(&self.addr, &self.log, n).await;
        self.gates.push(Gate::new(
            "request lines without a path: 400 or closed, no panic",
            flood.pass(),
            format!(
                "{n} lines ({}): {}; {} panic lines in serve's log{}",
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
        let p = probe(self.base(), "lines-after").await;
        let load = fmt_counts(&flood.answers);
        self.row(format!("{n} request lines (after)"), load, p, true);
    }

    /// Phase 5: wrong sign-ins in parallel, probed while in flight (reported) and after
    /// (gated). Attempts are counted before the password check, so no burst may get more
    /// checks (401s) than the limit; 429 is the limiter refusing first. Last of the phases on
    /// the first server: they use up the sign-in allowance phase 3 signs in from.
    pub(super) async fn sign_ins(&mut self) -> Result<(), String> {
        let (base, n) = (self.base().to_string(), self.args.logins);
        let action = sign_in_action(&self.setup, &base).await?;
        let logins = {
            let (base, action) = (base.clone(), action.clone());
            tokio::spawn(async move { wrong_sign_ins(&base, &action, n).await })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        let during = probe(&base, "logins-during").await;
        let (statuses, slowest) = logins.await.map_err(|e| format!("sign-ins: {e}"))?;
        let checked = statuses.get("401").copied().unwrap_or(0);
        let load = format!(
            "{n} to {action}: {} (401 = password checked; limit {LOGIN_MAX_FAILURES}/min per client); slowest answer {}",
            fmt_counts(&statuses),
            fmt_ms(slowest.as_millis())
        );
        self.row(
            format!("{n} wrong sign-ins (in flight)"),
            load,
            during,
            false,
        );
        let after = probe(&base, "logins-after").await;
        self.row(
            format!("{n} wrong sign-ins (after)"),
            "all answered".into(),
            after,
            true,
        );
        self.gates.push(Gate::new(
            "sign-in limit",
            checked <= LOGIN_MAX_FAILURES as usize,
            format!(
                "{checked} of {n} parallel wrong passwords from one client checked (401); limit \
                 {LOGIN_MAX_FAILURES} a minute"
            ),
        ));
        Ok(())
    }

    /// Phase 6: a log and span flood on a traced server of its own, collector stalled
    /// ([`log_flood`]).
    pub(super) async fn log_flood(
        &mut self,
        logs: &Path,
        redis: &RedisServer,
    ) -> Result<(), String> {
        let (gates, figures) =
            log_flood::run(&self.args.repoll_bin, &redis.url(), logs, self.args.flood).await?;
        self.gates.extend(gates);
        self.figures.push(figures);
        Ok(())
    }

    /// Prints the table, the gates and the figures; whether everything passed.
    pub(super) fn report(self, logs: &Path) -> bool {
        let budget = Duration::from_millis(self.args.budget_ms);
        println!();
        println!(
            "── abuse check (budget {} ms per probe) ─────────────────────────",
            self.args.budget_ms
        );
        println!(
            "{:<34} {:>10} {:>10}  {:<8} load",
            "phase", "healthz", "submit", "verdict"
        );
        let mut pass = true;
        for r in &self.rows {
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
        println!();
        println!("── gates ─────────────────────────────────────────────────────────");
        for g in &self.gates {
            pass &= g.pass;
            println!(
                "{} {}: {}",
                if g.pass { "PASS" } else { "FAIL" },
                g.name,
                g.detail
            );
        }
        println!();
        for f in &self.figures {
            println!("figure: {f}");
        }
        println!("logs: {}", logs.display());
        println!("{}", if pass { "PASS" } else { "FAIL" });
        pass
    }
}
