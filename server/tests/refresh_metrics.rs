//! `repoll_refreshes_total{upstream,outcome}` of the real `repoll serve` (in-process worker and
//! simulator): both outcomes are there at 0 before anything happened, a refresh that stores
//! its new result counts `done`, one that dies counts `failed` — and a first task, though it
//! completes, counts nothing.

use crate::common;
use common::process::*;

use std::{
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use testkit::free_port;
use testkit::http::BlockingHttp;

const DONE: &str = "repoll_refreshes_total{outcome=\"done\",upstream=\"default\"}";
const FAILED: &str = "repoll_refreshes_total{outcome=\"failed\",upstream=\"default\"}";

/// The value of the series `name` (labels included) on the page, None while absent.
fn value(page: &str, name: &str) -> Option<f64> {
    page.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
}

/// Stops the process (SIGTERM, then kill after 30 s) and removes its data.
struct Serve {
    child: Child,
    dir: std::path::PathBuf,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let t0 = Instant::now();
        while self.child.try_wait().ok().flatten().is_none()
            && t0.elapsed() < Duration::from_secs(30)
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Polls `/metrics` until `check` holds for the page (hang guard `limit`); the last page.
fn metrics_until(port: u16, what: &str, limit: Duration, check: impl Fn(&str) -> bool) -> String {
    let t0 = Instant::now();
    loop {
        let page = http_get(port, "/metrics")
            .map(|a| a.body)
            .unwrap_or_default();
        if check(&page) {
            return page;
        }
        assert!(
            t0.elapsed() < limit,
            "{what} ({} s hang guard):\n{page}",
            limit.as_secs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until the query `id` is settled with its result: done and not refreshing.
fn settled(port: u16, id: &str) {
    BlockingHttp::local(port).query_until(id, Duration::from_secs(60), |a| {
        a["status"] == "done" && a["refreshing"] != true
    });
}

#[test]
fn refreshes_are_counted_by_outcome_from_zero() {
    let web_port = free_port();
    let redis_port = free_port();
    let sim_port = free_port();
    let dir = std::env::temp_dir().join(format!("repoll-refreshes-{}", std::process::id()));
    let child = serve_managed_command(web_port, redis_port, &dir)
        .with_sim(sim_port)
        .env("REPOLL_POLL_INTERVAL_MS", "100")
        // One failed call ends a task: the refresh during the outage dies at once.
        .env("REPOLL_MAX_ATTEMPTS", "1")
        .env("REPOLL_BREAKER_FAILURES", "0")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn repoll");
    let serve = Serve { child, dir };
    assert!(
        wait_ready(web_port, Duration::from_secs(30)),
        "repoll serve became ready (30 s hang guard)"
    );
    // Both outcomes at 0 from the start (the embedded worker registers them as it starts).
    metrics_until(web_port, "both series at 0", Duration::from_secs(20), |p| {
        value(p, DONE) == Some(0.0) && value(p, FAILED) == Some(0.0)
    });

    let http = BlockingHttp::local(web_port);
    let ask = |cache: Option<&str>| {
        let mut body = serde_json::json!({ "query": "refresh me" });
        if let Some(c) = cache {
            body["cache_control"] = c.into();
        }
        id_in(&http.post_json("/api/v1/queries", &body))
    };
    // A first task completes: a completion, no refresh.
    let id = ask(None);
    settled(web_port, &id);
    let page = metrics_until(web_port, "the completion", Duration::from_secs(20), |p| {
        value(p, "repoll_completions_total{upstream=\"default\"}") == Some(1.0)
    });
    assert_eq!(value(&page, DONE), Some(0.0), "{page}");

    // no-cache: the stored result is answered stale while its refresh runs; it stores anew.
    ask(Some("no-cache"));
    let page = metrics_until(web_port, "the refresh done", Duration::from_secs(60), |p| {
        value(p, DONE) == Some(1.0)
    });
    assert_eq!(value(&page, FAILED), Some(0.0), "{page}");
    settled(web_port, &id);

    // During an outage the next refresh dies (one attempt): a failed refresh.
    let sim = BlockingHttp::local(sim_port);
    let set = sim.send(sim.client.post(sim.url("/_sim/outage?ms=60000")));
    assert_eq!(set.status, 200, "{set:?}");
    ask(Some("no-cache"));
    let page = metrics_until(
        web_port,
        "the refresh failed",
        Duration::from_secs(60),
        |p| value(p, FAILED) == Some(1.0),
    );
    assert_eq!(value(&page, DONE), Some(1.0), "{page}");
    drop(serve);
}
