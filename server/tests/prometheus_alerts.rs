//! The shipped alerting rules against the real thing: a real Prometheus (Debian's `prometheus`,
//! installed by scripts/lib/setup.sh) on a free port loads deploy/prometheus/rules.yml as
//! shipped, scrapes a real `repoll serve` (managed redis-server, embedded worker, simulated
//! upstream) with its bearer token every second, and once the simulator answers 503 to
//! everything the breaker opens and `RepollBreakerOpen` fires for `upstream="default"`.
//! The same server's `/metrics` page, with tasks done, dead, retrying, waiting and ready, then
//! passes `promtool check metrics` without a complaint.

use crate::common;
use common::process::*;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use testkit::http::{Answer, BlockingHttp};
use testkit::{free_port, ChildGuard, TempDir};

const TOKEN: &str = "prom-e2e-token-0123456789";

/// `tool --version` runs, or the test fails saying who installs it (never a skip).
fn require(tool: &str) {
    let ran = Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    assert!(
        matches!(ran, Ok(s) if s.success()),
        "`{tool}` not found or not runnable: scripts/lib/setup.sh (ensure_prometheus, run by \
         scripts/test) installs Debian's `prometheus` package, which has it"
    );
}

/// A child stopped with SIGTERM (so `repoll serve` stops its managed redis-server), killed
/// after 30 s.
struct Stopped(ChildGuard);

impl Drop for Stopped {
    fn drop(&mut self) {
        self.0.signal(libc::SIGTERM);
        let t0 = Instant::now();
        while self.0.exited().is_none() && t0.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// `GET /metrics` with the bearer token.
fn metrics_page(port: u16) -> Answer {
    BlockingHttp::local(port).get_with("/metrics", &[("authorization", &format!("Bearer {TOKEN}"))])
}

/// Polls `check` every 250 ms until it gives a value; panics after `limit` (a hang guard)
/// with `what` and `context()` (the Prometheus log, the last answer).
fn until<T>(
    what: &str,
    limit: Duration,
    mut check: impl FnMut() -> Option<T>,
    context: impl Fn() -> String,
) -> T {
    let t0 = Instant::now();
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(
            t0.elapsed() < limit,
            "{what}: not within {limit:?}\n{}",
            context()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// A ready `repoll serve` with the metrics token set; stopped before its data directory goes.
struct ServeUnderTest {
    web_port: u16,
    sim_port: u16,
    _serve: Stopped,
    _data: TempDir,
}

/// Starts `repoll serve` (managed redis-server, embedded worker, simulated upstream) and checks
/// its `/metrics` guard refuses a client without the token.
fn start_serve_with_a_quick_breaker_and_the_token() -> ServeUnderTest {
    // repoll serve: a breaker quick to open (3 errors) that then stays open for the test.
    let (web_port, redis_port, sim_port) = (free_port(), free_port(), free_port());
    let data = TempDir::new("prom-alerts");
    let mut serve = serve_managed_command(web_port, redis_port, &data.path().join("redis"));
    serve
        .with_sim(sim_port)
        .env("REPOLL_METRICS_TOKEN", TOKEN)
        .env("REPOLL_POLL_INTERVAL_MS", "100")
        .env("REPOLL_STATS_INTERVAL_MS", "200")
        .env("REPOLL_HEARTBEAT_MS", "500")
        .env("REPOLL_BREAKER_FAILURES", "3")
        .env("REPOLL_BREAKER_COOLDOWN_MS", "600000")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _serve = Stopped(ChildGuard::spawn(serve).expect("spawn repoll serve"));
    assert!(
        wait_ready(web_port, Duration::from_secs(30)),
        "repoll serve became ready (30 s hang guard)"
    );
    // The guard is on: without the token even this loopback client is refused, so a scrape
    // that succeeds below is one that sent it.
    let refused = http_get(web_port, "/metrics").expect("GET /metrics");
    assert_eq!(refused.status, 401, "{refused:?}");
    ServeUnderTest {
        web_port,
        sim_port,
        _serve,
        _data: data,
    }
}

/// A running Prometheus, its HTTP API and its log file; killed before its directory goes.
struct Prometheus {
    child: ChildGuard,
    api: BlockingHttp,
    log_path: std::path::PathBuf,
    _dir: TempDir,
}

/// What Prometheus has logged so far (empty if nothing yet).
fn prometheus_log(log_path: &std::path::Path) -> String {
    std::fs::read_to_string(log_path).unwrap_or_default()
}

/// Starts Prometheus on a free port scraping `web_port` with the token, with `rules` loaded.
fn start_prometheus_scraping(rules: &std::path::Path, web_port: u16) -> Prometheus {
    // Prometheus: 1 s scrapes and evaluations, the shipped rules file as it is.
    let prom_dir = TempDir::new("prometheus");
    let token_file = prom_dir.path().join("token");
    std::fs::write(&token_file, TOKEN).unwrap();
    let config = prom_dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
             rule_files: [{rules:?}]\n\
             scrape_configs:\n\
             - job_name: repoll\n  \
               authorization: {{type: Bearer, credentials_file: {token_file:?}}}\n  \
               static_configs: [{{targets: ['127.0.0.1:{web_port}']}}]\n"
        ),
    )
    .unwrap();
    let prom_port = free_port();
    let log_path = prom_dir.path().join("prometheus.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut prom = Command::new("prometheus");
    prom.arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            prom_dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    let prometheus = ChildGuard::spawn(prom).expect("spawn prometheus");
    Prometheus {
        child: prometheus,
        api: BlockingHttp::local(prom_port),
        log_path,
        _dir: prom_dir,
    }
}

/// Waits until Prometheus has scraped the target with the token and checks the rules loaded.
fn wait_for_the_target_up_and_the_shipped_rules(prom: &mut Prometheus) {
    let prom_log = || prometheus_log(&prom.log_path);
    let api = &prom.api;
    let prometheus = &mut prom.child;
    // The rules loaded and the target scraped with the token: health "up".
    until(
        "Prometheus scrapes repoll (target up)",
        Duration::from_secs(30),
        || {
            if let Some(status) = prometheus.exited() {
                panic!("prometheus exited ({status}):\n{}", prom_log());
            }
            let targets = api
                .try_send(api.client.get(api.url("/api/v1/targets")))
                .ok()?;
            let health = targets.json()["data"]["activeTargets"][0]["health"].clone();
            (health == "up").then_some(())
        },
        prom_log,
    );
    let groups = api.get_json("/api/v1/rules");
    let loaded = groups["data"]["groups"].as_array().map_or(0, Vec::len);
    assert_eq!(loaded, 3, "the shipped rule groups: {groups}");
}

/// Submits `query` to repoll's API; its task id.
fn ask(http: &BlockingHttp, query: &str) -> String {
    id_in(&http.post_json("/api/v1/queries", &serde_json::json!({ "query": query })))
}

/// Queues a done, a dead and a still-polling task, waits until both finals are counted, and
/// checks the breaker is closed and not alerting yet.
fn queue_tasks_and_check_the_breaker_closed_before_the_outage(
    http: &BlockingHttp,
    web_port: u16,
    api: &BlockingHttp,
) {
    // Tasks in the states a page can show: one done, one dead (the upstream's own "failed"),
    // one still polling.
    ask(http, "done-1 polls=1");
    ask(http, "dead-1 status=failed");
    ask(http, "slow-1 ms=600000");
    until(
        "a completion and a dead task counted",
        Duration::from_secs(30),
        || {
            let page = metrics_page(web_port).body;
            (page.contains(
                "repoll_time_to_final_seconds_count{outcome=\"done\",upstream=\"default\"}",
            ) && page.contains(
                "repoll_time_to_final_seconds_count{outcome=\"dead\",upstream=\"default\"}",
            ))
            .then_some(())
        },
        || metrics_page(web_port).body,
    );
    let before = metrics_page(web_port).body;
    assert!(
        before.contains("repoll_breaker_open{upstream=\"default\"} 0"),
        "breaker closed before the outage:\n{before}"
    );
    let alerts = api.get_json("/api/v1/alerts");
    assert!(
        !alerts.to_string().contains("RepollBreakerOpen"),
        "no breaker alert before the outage: {alerts}"
    );
}

/// Makes the simulator fail everything, queues tasks into the outage, and waits until
/// `RepollBreakerOpen` fires; checks the firing alert's labels and annotations.
fn start_the_outage_and_wait_for_the_breaker_alert(
    http: &BlockingHttp,
    sim_port: u16,
    prom: &Prometheus,
) {
    let api = &prom.api;
    // The upstream fails everything: calls error (retrying), the breaker opens, new tasks wait.
    let sim = BlockingHttp::local(sim_port);
    let outage = sim.send(sim.client.post(sim.url("/_sim/outage?ms=600000")));
    assert_eq!(outage.status, 200, "{outage:?}");
    for i in 0..4 {
        ask(http, &format!("outage-{i}"));
    }
    let t0 = Instant::now();
    let firing = until(
        "RepollBreakerOpen firing for upstream=\"default\"",
        Duration::from_secs(60),
        || {
            let alerts = api.get_json("/api/v1/alerts");
            alerts["data"]["alerts"].as_array()?.iter().find_map(|a| {
                (a["labels"]["alertname"] == "RepollBreakerOpen" && a["state"] == "firing")
                    .then(|| a.clone())
            })
        },
        || {
            format!(
                "{}\n{}",
                api.get_json("/api/v1/alerts"),
                prometheus_log(&prom.log_path)
            )
        },
    );
    eprintln!(
        "RepollBreakerOpen firing {:?} after the outage began",
        t0.elapsed()
    );
    assert_eq!(firing["labels"]["upstream"], "default", "{firing}");
    assert_eq!(firing["labels"]["severity"], "warning", "{firing}");
    let summary = firing["annotations"]["summary"]
        .as_str()
        .unwrap_or_default();
    assert!(
        summary.contains("Upstream default: circuit breaker open"),
        "{firing}"
    );
    assert!(firing["annotations"]["runbook"].is_string(), "{firing}");
}

/// Checks the `/metrics` page with the breaker open shows the outage's series and passes
/// `promtool check metrics` without a word.
fn check_the_open_breaker_page_passes_promtool(web_port: u16) {
    // The page as Prometheus reads it now, through promtool's parser and linter: no error and
    // no complaint (promtool prints nothing but a complaint).
    let page = metrics_page(web_port);
    assert_eq!(page.status, 200, "{page:?}");
    for series in [
        "repoll_breaker_open{upstream=\"default\"} 1",
        "repoll_redis_up{upstream=\"default\"} 1",
        "repoll_workers{upstream=\"default\"} 1",
        "repoll_failures_total{kind=\"status\",outcome=\"retry\",upstream=\"default\"}",
    ] {
        assert!(
            page.body.contains(series),
            "{series} on the page:\n{}",
            page.body
        );
    }
    let mut check = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool");
    check
        .stdin
        .take()
        .unwrap()
        .write_all(page.body.as_bytes())
        .unwrap();
    let out = check.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "promtool check metrics ({}):\n{said}\n--- page ---\n{}",
        out.status,
        page.body
    );
}

#[test]
fn prometheus_fires_the_breaker_alert_and_promtool_accepts_the_metrics_page() {
    require("prometheus");
    require("promtool");
    let rules =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/prometheus/rules.yml");
    let rules = rules.canonicalize().expect("deploy/prometheus/rules.yml");

    let serve = start_serve_with_a_quick_breaker_and_the_token();
    let mut prometheus = start_prometheus_scraping(&rules, serve.web_port);
    wait_for_the_target_up_and_the_shipped_rules(&mut prometheus);

    let http = BlockingHttp::local(serve.web_port);
    queue_tasks_and_check_the_breaker_closed_before_the_outage(
        &http,
        serve.web_port,
        &prometheus.api,
    );
    start_the_outage_and_wait_for_the_breaker_alert(&http, serve.sim_port, &prometheus);
    ask(&http, "ready-while-open");

    check_the_open_breaker_page_passes_promtool(serve.web_port);
    prometheus.child.kill();
}

/// What the web process tells the alerts from its heartbeats, with no worker anywhere:
/// `repoll_workers` 0 (RepollNoWorkerHeartbeat's series) and `repoll_redis_up` 1, then 0 once
/// its Redis is gone (RepollRedisUnreachable's).
#[test]
fn the_web_process_reports_no_workers_and_then_redis_unreachable() {
    let redis = spawn_redis(free_port(), &[]);
    let web_port = free_port();
    let mut serve = serve_command(&redis.url(), web_port);
    serve
        .env("REPOLL_HEARTBEAT_MS", "200")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _serve = Stopped(ChildGuard::spawn(serve).expect("spawn repoll serve"));
    assert!(
        wait_ready(web_port, Duration::from_secs(30)),
        "repoll serve became ready (30 s hang guard)"
    );
    let page = || {
        http_get(web_port, "/metrics")
            .map(|a| a.body)
            .unwrap_or_default()
    };
    until(
        "no workers, Redis reached",
        Duration::from_secs(20),
        || {
            let p = page();
            (p.contains("repoll_workers{upstream=\"default\"} 0")
                && p.contains("repoll_redis_up{upstream=\"default\"} 1"))
            .then_some(())
        },
        page,
    );
    drop(redis);
    until(
        "Redis unreachable",
        Duration::from_secs(30),
        || {
            page()
                .contains("repoll_redis_up{upstream=\"default\"} 0")
                .then_some(())
        },
        page,
    );
}
