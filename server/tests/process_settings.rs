//! A newcomer's first hour with the real `repoll` binary: the settings behave as the README
//! says, and a setting the process cannot work with stops the start at once, in the
//! settings' own words — never a server that answers and then does nothing.

use crate::common;
use common::process::*;

use std::time::{Duration, Instant};

use testkit::free_port;
use testkit::http::BlockingHttp;

/// Hang guard of a start that must fail: the point is that it ends well before (without the
/// check, `serve` would run until killed).
const START_LIMIT: Duration = Duration::from_secs(20);

/// The `repoll: …` line a failed start ends with.
fn refusal(out: &std::process::Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    stderr
        .lines()
        .rev()
        .find(|l| l.starts_with("repoll: "))
        .unwrap_or_else(|| panic!("no `repoll:` line in {stderr}"))
        .to_string()
}

/// An upstream URL template with `{callback_url}` and no callback secret: `serve` stops at
/// once (before it listens; exit 1) with the very message `repoll worker` gives for the same
/// settings, instead of answering queries its embedded workers never poll.
#[test]
fn serve_whose_workers_cannot_start_does_not_start() {
    let redis_port = free_port();
    let _redis = spawn_redis(redis_port, &[]);
    let url = format!("redis://127.0.0.1:{redis_port}/");
    let template = "http://127.0.0.1:9/api/query?q={key}&cb={callback_url}";
    let web_port = free_port();
    let mut serve = serve_command(&url, web_port);
    serve
        .env("REPOLL_WORKERS", "2")
        .env("REPOLL_QUEUE", "no-secret")
        .env("REPOLL_UPSTREAM_URL", template)
        .env("REPOLL_ADMIN_PASSWORD", "not the point here")
        .env("RUST_LOG", "info")
        .env_remove("REPOLL_CALLBACK_SECRET")
        .env_remove("REPOLL_CALLBACK_BASE_URL");
    let out = output_within(serve, START_LIMIT);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let said = refusal(&out);
    assert!(said.contains("REPOLL_CALLBACK_SECRET"), "{said}");
    assert!(said.contains("{callback_url}"), "{said}");
    // Refused before it listened, not stopped after (the log says when it listens).
    let log = String::from_utf8_lossy(&out.stdout);
    assert!(!log.contains("listening on"), "{log}");

    let mut worker = repoll();
    worker
        .arg("worker")
        .env("REDIS_URL", &url)
        .env("REPOLL_QUEUE", "no-secret")
        .env("REPOLL_UPSTREAM_URL", template)
        .env_remove("REPOLL_CONFIG")
        .env_remove("REPOLL_CALLBACK_SECRET")
        .env_remove("REPOLL_CALLBACK_BASE_URL");
    let out = output_within(worker, START_LIMIT);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(refusal(&out), said, "serve and worker say the same");
}

/// Waits (hang guard 30 s) until the task `id` is done, processing until then; its last answer.
fn wait_done(web_port: u16, id: &str) -> serde_json::Value {
    BlockingHttp::local(web_port).query_until(id, Duration::from_secs(30), |state| {
        assert!(
            state["status"] == "done" || state["status"] == "processing",
            "{state}"
        );
        state["status"] == "done"
    })
}

/// `serve --sim --sim-addr <another port>` run directly (no `scripts/run` to rewrite the
/// URL): with no upstream URL given, the embedded workers poll the simulator where it
/// listens, and a query reaches its final answer — the simulator on that port saw its calls
/// (so no other simulator on the default port could have answered instead).
#[test]
fn serve_with_the_simulator_on_another_address_polls_it_there() {
    let redis_port = free_port();
    let _redis = spawn_redis(redis_port, &[]);
    let (web_port, sim_port) = (free_port(), free_port());
    let mut cmd = serve_command(&format!("redis://127.0.0.1:{redis_port}/"), web_port);
    cmd.args(["--sim", "--sim-addr", &format!("127.0.0.1:{sim_port}")])
        .env("REPOLL_WORKERS", "2")
        .env("REPOLL_QUEUE", "moved-sim")
        .env("REPOLL_FIRST_ANSWER_MS", "0")
        .env("REPOLL_POLL_INTERVAL_MS", "50")
        .env("REPOLL_ADMIN_PASSWORD", "not the point here")
        .env_remove("REPOLL_UPSTREAM_URL")
        .env_remove("REPOLL_SIM")
        .env_remove("REPOLL_SIM_ADDR");
    let mut children = Reaped::default();
    children
        .0
        .push(testkit::ChildGuard::spawn(cmd).expect("spawn repoll"));
    assert!(wait_ready(web_port, Duration::from_secs(30)), "serve ready");

    let id = submit_query(web_port, "moved-sim polls=2");
    let done = wait_done(web_port, &id);
    assert!(!done["result"].is_null(), "{done}");
    let stats = http_get(sim_port, "/_sim/stats")
        .expect("the simulator")
        .body;
    assert!(stats.contains("moved-sim"), "{stats}");
}

/// The words of an on/off setting other than `true`/`false` start the server: `REPOLL_SIM=1`
/// runs the simulator (it answers on its address), `REDIS_CLUSTER=0` keeps the single-server
/// client, `yes`/`Off` are read too.
#[test]
fn on_off_settings_take_1_0_yes_and_off() {
    let redis_port = free_port();
    let _redis = spawn_redis(redis_port, &[]);
    let (web_port, sim_port) = (free_port(), free_port());
    let mut cmd = serve_command(&format!("redis://127.0.0.1:{redis_port}/"), web_port);
    cmd.env("REPOLL_SIM", "1")
        .env("REPOLL_SIM_ADDR", format!("127.0.0.1:{sim_port}"))
        .env("REDIS_CLUSTER", "0")
        .env("REPOLL_ADMIN_PASSWORD", "not the point here")
        .env("REPOLL_TRUST_FORWARDED", "yes")
        .env("REPOLL_COOKIE_SECURE", "Off");
    let mut children = Reaped::default();
    children
        .0
        .push(testkit::ChildGuard::spawn(cmd).expect("spawn repoll"));
    assert!(wait_ready(web_port, Duration::from_secs(30)), "serve ready");
    let stats = http_get(sim_port, "/_sim/stats").expect("the simulator runs");
    assert_eq!(stats.status, 200, "{stats:?}");
}

/// A process started with another partition count than its queue's is refused in the
/// settings' words — both counts and what to do — not as a Redis that cannot be reached nor
/// as damaged data (Redis answered; nothing is damaged).
#[test]
fn another_partition_count_is_refused_in_the_settings_words() {
    let redis_port = free_port();
    let _redis = spawn_redis(redis_port, &[]);
    let url = format!("redis://127.0.0.1:{redis_port}/");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let four = queue::QueueConfig {
        name: "counted".into(),
        partitions: 4,
        ..queue::QueueConfig::default()
    };
    rt.block_on(queue::Queue::connect(&url, four))
        .expect("the queue, recorded with 4 partitions");

    let mut serve = serve_command(&url, free_port());
    serve
        .env("REPOLL_QUEUE", "counted")
        .env_remove("REPOLL_PARTITIONS");
    let mut worker = repoll();
    worker
        .arg("worker")
        .env("REDIS_URL", &url)
        .env("REPOLL_QUEUE", "counted")
        .env("REPOLL_PARTITIONS", "2")
        .env_remove("REPOLL_CONFIG");
    for (cmd, asks) in [(serve, 1), (worker, 2)] {
        let out = output_within(cmd, START_LIMIT);
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        let said = refusal(&out);
        let want = format!(
            "repoll: queue \"counted\" has 4 partitions and this process asks for {asks} \
             (REPOLL_PARTITIONS)"
        );
        assert!(said.starts_with(&want), "{said}");
        assert!(said.contains("Keep REPOLL_PARTITIONS=4"), "{said}");
        assert!(said.contains("docs/operations.md \"Partitions\""), "{said}");
        for wrong in ["corrupt", "cannot connect"] {
            assert!(!said.to_lowercase().contains(wrong), "{said}");
        }
    }
}

/// The breaker is on by default and keeps the README's promise: with an upstream refusing
/// every connection and no breaker setting given, the breaker opens before any task is dead
/// (without it, each task ends after its five attempts within seconds).
#[test]
fn by_default_an_outage_opens_the_breaker_and_kills_no_task() {
    let redis_port = free_port();
    let _redis = spawn_redis(redis_port, &[]);
    let (web_port, closed_port) = (free_port(), free_port());
    let mut cmd = serve_command(&format!("redis://127.0.0.1:{redis_port}/"), web_port);
    cmd.env("REPOLL_WORKERS", "4")
        .env("REPOLL_QUEUE", "outage")
        .env("REPOLL_FIRST_ANSWER_MS", "0")
        .env(
            "REPOLL_UPSTREAM_URL",
            format!("http://127.0.0.1:{closed_port}/api/query?q={{key}}"),
        )
        .env("REPOLL_ADMIN_PASSWORD", "not the point here");
    for var in [
        "REPOLL_BREAKER_FAILURES",
        "REPOLL_BREAKER_ERROR_PERCENT",
        "REPOLL_BREAKER_COOLDOWN_MS",
        "REPOLL_MAX_ATTEMPTS",
    ] {
        cmd.env_remove(var);
    }
    let mut children = Reaped::default();
    children
        .0
        .push(testkit::ChildGuard::spawn(cmd).expect("spawn repoll"));
    assert!(wait_ready(web_port, Duration::from_secs(30)), "serve ready");

    let ids: Vec<String> = (0..10)
        .map(|i| submit_query(web_port, &format!("outage {i}")))
        .collect();
    let http = BlockingHttp::local(web_port);
    let t0 = Instant::now();
    loop {
        let states: Vec<String> = ids
            .iter()
            .map(|id| {
                http.get_json(&format!("/api/v1/queries/{id}"))["status"]
                    .as_str()
                    .unwrap_or("?")
                    .to_string()
            })
            .collect();
        assert!(
            states.iter().all(|s| s == "processing"),
            "a task ended during the outage: {states:?}"
        );
        let metrics = http_get(web_port, "/metrics")
            .map(|a| a.body)
            .unwrap_or_default();
        if metrics.contains("repoll_breaker_open{upstream=\"default\"} 1") {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the breaker did not open (60 s hang guard): {states:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
