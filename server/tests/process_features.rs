//! The real `repoll` binary's features end to end: its metrics, callbacks (and the tokens they
//! refuse) and named upstreams (the admin repartition command: process_repartition.rs).

use crate::common;
use common::process::*;

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use testkit::http::{Answer, BlockingHttp};
use testkit::{free_port, ChildGuard};

/// The metric names the manual lists where it says what `/metrics` carries
/// (docs/operations.md: "Health and metrics", and the series behind the alerts in "Alerts"),
/// read from the page itself so a name added there is checked here.
fn readme_metric_names() -> Vec<String> {
    let readme = include_str!("../../docs/operations.md");
    let section = |title: &str| -> &str {
        let start = readme
            .find(&format!("\n## {title}\n"))
            .unwrap_or_else(|| panic!("docs/operations.md has no section {title:?}"));
        let rest = &readme[start + 1..];
        let end = rest[4..].find("\n#").map_or(rest.len(), |e| e + 5);
        &rest[..end]
    };
    let mut names: Vec<String> = Vec::new();
    for text in [section("Health and metrics"), section("Alerts")] {
        for (i, _) in text.match_indices("repoll_") {
            let name: String = text[i..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            let name = name.trim_end_matches('_').to_string();
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    // The parse itself: the list is long, and holds names of both sections.
    for must in [
        "repoll_claims_total",
        "repoll_answers_total",
        "repoll_callbacks_total",
        "repoll_workers",
    ] {
        assert!(names.iter().any(|n| n == must), "{must} not in {names:?}");
    }
    names
}

/// Whether the Prometheus text `page` has a sample of the metric `name` (a histogram's
/// `_bucket`, `_sum` or `_count` included).
fn has_metric(page: &str, name: &str) -> bool {
    page.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .any(|n| {
            n == name
                || n.strip_prefix(name)
                    .and_then(|rest| rest.strip_prefix('_'))
                    .is_some_and(|s| ["bucket", "sum", "count"].contains(&s))
        })
}

/// `/metrics` of `repoll serve` (in-process workers and simulator) carries every metric the
/// manual names once a query has completed and one has failed: the counters that have not
/// counted yet are there at 0.
#[test]
fn metrics_carry_every_named_series() {
    let web_port = free_port();
    let redis_port = free_port();
    let sim_port = free_port();
    let dir = std::env::temp_dir().join(format!("repoll-metrics-{}", std::process::id()));
    let mut child = serve_managed_command(web_port, redis_port, &dir)
        .with_sim(sim_port)
        .env("REPOLL_POLL_INTERVAL_MS", "100")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn repoll");
    let stop = |child: &mut std::process::Child| {
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let t0 = Instant::now();
        while child.try_wait().ok().flatten().is_none() && t0.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = std::fs::remove_dir_all(&dir);
    };
    if !wait_ready(web_port, Duration::from_secs(30)) {
        stop(&mut child);
        panic!("repoll serve became ready (30 s hang guard)");
    }
    // Before anything has happened, the counters a first alert reads are there at 0: the
    // failures of each kind and outcome, the managed Redis's restarts, the live streams
    // dropped for a slow reader, the request lines refused.
    // (The embedded worker registers its series as it starts, beside the listener: waited for.)
    let zeros = [
        "repoll_managed_redis_restarts_total 0",
        "repoll_failures_total{kind=\"timeout\",outcome=\"retry\",upstream=\"default\"} 0",
        "repoll_failures_total{kind=\"failed\",outcome=\"dead\",upstream=\"default\"} 0",
        "repoll_live_streams_dropped_total{reason=\"slow\"} 0",
        "repoll_bad_request_lines_total 0",
    ];
    let t0 = Instant::now();
    let mut fresh = String::new();
    while t0.elapsed() < Duration::from_secs(20) && !zeros.iter().all(|w| fresh.contains(w)) {
        std::thread::sleep(Duration::from_millis(100));
        fresh = http_get(web_port, "/metrics")
            .map(|a| a.body)
            .unwrap_or_default();
    }
    if let Some(w) = zeros.iter().find(|w| !fresh.contains(*w)) {
        stop(&mut child);
        panic!("{w} missing from a fresh /metrics:\n{fresh}");
    }
    let ids = [
        submit_query(web_port, "metrics done polls=1"),
        submit_query(web_port, "metrics failed status=failed"),
    ];
    let t0 = Instant::now();
    let settled = |id: &str| {
        http_get(web_port, &format!("/api/v1/queries/{id}")).is_ok_and(|r| {
            r.body.contains("\"status\":\"done\"") || r.body.contains("\"status\":\"failed\"")
        })
    };
    while !ids.iter().all(|id| settled(id)) {
        if t0.elapsed() > Duration::from_secs(60) {
            stop(&mut child);
            panic!("the queries did not settle (60 s hang guard)");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // Every name the manual lists. The gauges of queue depth and the heartbeats' series are
    // refreshed periodically: waited for too.
    let names = readme_metric_names();
    let mut page = String::new();
    let wanted = [
        "repoll_queue_depth{state=",
        "repoll_breaker_open{upstream=\"default\"} 0",
    ];
    let all_there = |page: &str| {
        names.iter().all(|n| has_metric(page, n)) && wanted.iter().all(|w| page.contains(w))
    };
    while t0.elapsed() < Duration::from_secs(90) {
        page = http_get(web_port, "/metrics")
            .map(|a| a.body)
            .unwrap_or_default();
        if all_there(&page) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    stop(&mut child);
    for n in &names {
        assert!(
            has_metric(&page, n),
            "{n} (docs/operations.md) missing from /metrics:\n{page}"
        );
    }
    for w in wanted {
        assert!(page.contains(w), "{w} missing from /metrics:\n{page}");
    }
    // A worker's series carry its upstream (a process runs one worker per upstream).
    assert!(
        page.contains("repoll_completions_total{upstream=\"default\"} 1"),
        "{page}"
    );
}

/// The value of the unlabelled series `name` on `/metrics` of `port` (None when absent).
fn metric_value(port: u16, name: &str) -> Option<f64> {
    let page = http_get(port, "/metrics").ok()?.body;
    page.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
}

/// Waits (10 s hang guard) until `repoll_callbacks_total` on `port` is `n`: it is counted
/// just after the task's end is written, which a reader may see first.
fn until_callbacks_counted(port: u16, n: f64) {
    let t0 = Instant::now();
    loop {
        let seen = metric_value(port, "repoll_callbacks_total");
        if seen == Some(n) {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "repoll_callbacks_total is {seen:?}, not {n} (10 s hang guard)"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `redis-cli -p port args...`: its output, trimmed.
fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// POSTs `body` (JSON text, sent as is) as `application/json`.
fn http_post_json(port: u16, path: &str, body: &str) -> Answer {
    let http = BlockingHttp::local(port);
    http.send(
        http.client
            .post(http.url(path))
            .header("content-type", "application/json")
            .body(body.to_string()),
    )
}

/// `repoll serve` on `url` with queue `queue`, 4 embedded worker slots, the simulator on
/// `sim_port`, no first-answer wait, and callbacks signed with `secret` to this web port.
fn serve_with_sim_and_callbacks(
    url: &str,
    queue: &str,
    web_port: u16,
    sim_port: u16,
    secret: &str,
) -> Command {
    let mut cmd = serve_command(url, web_port);
    cmd.env("REPOLL_QUEUE", queue)
        .env("REPOLL_WORKERS", "4")
        .env("REPOLL_SIM", "true")
        .env("REPOLL_SIM_ADDR", format!("127.0.0.1:{sim_port}"))
        .env("REPOLL_FIRST_ANSWER_MS", "0")
        .env("REPOLL_CALLBACK_SECRET", secret)
        .env(
            "REPOLL_CALLBACK_BASE_URL",
            format!("http://127.0.0.1:{web_port}"),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd
}

/// Spawns `repoll serve` (queue `cbq`) whose simulator is done 1 s after the first call and
/// calls back, with a 60 s poll interval, into `children`; waits until it is ready.
fn spawn_serve_whose_sim_calls_back(
    children: &mut Reaped,
    url: &str,
    web_port: u16,
    sim_port: u16,
    secret: &str,
) {
    let mut cmd = serve_with_sim_and_callbacks(url, "cbq", web_port, sim_port, secret);
    cmd.env("REPOLL_SIM_MS", "1000")
        .env(
            "REPOLL_UPSTREAM_URL",
            format!("http://127.0.0.1:{sim_port}/api/query?q={{key}}&callback={{callback_url}}"),
        )
        .env("REPOLL_POLL_INTERVAL_MS", "60000");
    children
        .0
        .push(ChildGuard::adopt(cmd.spawn().expect("spawn repoll")));
    assert!(
        wait_ready(web_port, Duration::from_secs(30)),
        "serve not ready"
    );
}

/// Submits `callback-one` and waits (30 s hang guard) until it is done, printing the time
/// from submit to done; its id.
fn submit_and_time_until_done_by_the_callback(web_port: u16) -> String {
    let t0 = Instant::now();
    let id = submit_query(web_port, "callback-one");
    let done = loop {
        let body = http_get(web_port, &format!("/api/v1/queries/{id}"))
            .unwrap()
            .body;
        if body.contains(r#""status":"done""#) {
            break t0.elapsed();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "not done by the callback (30 s hang guard; the 2nd poll is due at 60 s): {body}"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    println!(
        "callback: submit to done in {} ms (upstream done after 1000 ms, poll interval 60 s)",
        done.as_millis()
    );
    id
}

/// What a refused callback must leave as it was: the live task's hash, the first task's
/// result and the number of keys.
fn redis_state(redis_port: u16, task_key: &str, result_key: &str) -> (String, String, String) {
    (
        redis_cli(redis_port, &["HGETALL", task_key]),
        redis_cli(redis_port, &["GET", result_key]),
        redis_cli(redis_port, &["DBSIZE"]),
    )
}

/// The tokens that must be refused, each with what is wrong with it: the live task `other`
/// (created at `other_created`) forged, signed with another key, of another life or expired;
/// the used token of the done task `id` (created at `created`) replayed; garbage.
fn tokens_to_refuse(
    signer: &worker::Callbacks,
    (id, created): (&str, i64),
    (other, other_created): (&str, i64),
) -> [(&'static str, String); 6] {
    [
        (
            "forged",
            format!("{other}.{other_created}.0.{}", "ab".repeat(32)),
        ),
        ("wrong key", {
            let other_signer = worker::Callbacks::new(&worker::CallbackArgs {
                base_url: None,
                secret: Some(worker::Secret::from("x".repeat(40).as_str())),
            })
            .unwrap()
            .unwrap();
            other_signer.token(other, other_created, 0)
        }),
        ("replayed", signer.token(id, created, 0)),
        ("another life", signer.token(other, other_created - 1, 0)),
        (
            "expired",
            signer.token(other, other_created, other_created + 1),
        ),
        ("garbage", "not-a-token".to_string()),
    ]
}

/// Callbacks end the wait early: the simulator is done 1 s after the first call and calls
/// back then, while the poll interval is 60 s. The task must be done after exactly one poll
/// (the simulator counts its calls: a second poll would be a second call) and one callback.
/// Then every refused token — forged, replayed, another task's life, expired — is a 404 and
/// leaves Redis as it was. The time from submit to done is printed (the closing note's
/// figure); the 30 s deadlines are hang guards under the 60 s poll, not speed assertions.
#[test]
fn a_callback_ends_the_wait_and_a_forged_replayed_or_expired_token_changes_nothing() {
    const SECRET: &str = "callback-secret-of-this-test-0123456789";
    let (web_port, redis_port, sim_port) = (free_port(), free_port(), free_port());
    let _redis = spawn_redis(redis_port, &[]);
    let mut children = Reaped::default();
    let url = format!("redis://127.0.0.1:{redis_port}");
    spawn_serve_whose_sim_calls_back(&mut children, &url, web_port, sim_port, SECRET);

    let id = submit_and_time_until_done_by_the_callback(web_port);
    let sim = http_get(sim_port, "/_sim/key?q=callback-one").unwrap().body;
    assert!(sim.contains(r#""calls":1,"#), "one poll only: {sim}");
    assert!(sim.contains(r#""callbacks":1"#), "one callback: {sim}");
    // The task it ended is counted (docs/operations.md: `repoll_callbacks_total`).
    until_callbacks_counted(web_port, 1.0);
    let result_key = format!("{{cbq}}:r:{id}");
    let result = redis_cli(redis_port, &["GET", &result_key]);
    assert!(
        result.contains("callback") && result.contains(r#""progress":1.0"#),
        "{result}"
    );

    // The tokens, made with the deployment's own key (a test may know it; an attacker not).
    let created: i64 = result.split(',').nth(1).unwrap().parse().unwrap();
    let signer = worker::Callbacks::new(&worker::CallbackArgs {
        base_url: None,
        secret: Some(worker::Secret::from(SECRET)),
    })
    .unwrap()
    .unwrap();
    let final_body = r#"{"status":"done","data":{"forged":true}}"#;
    let post =
        |token: &str| http_post_json(web_port, &format!("/api/v1/callbacks/{token}"), final_body);
    // A second task, still processing (done in an hour): the target of the refused tokens.
    let other = submit_query(web_port, "callback-two ms=3600000");
    let other_key = format!("{{cbq}}:t:{other}");
    let t1 = Instant::now();
    while redis_cli(redis_port, &["HGET", &other_key, "p"]) != "1" {
        assert!(
            t1.elapsed() < Duration::from_secs(30),
            "the second task was not polled (30 s hang guard)"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let other_created: i64 = redis_cli(redis_port, &["HGET", &other_key, "c"])
        .parse()
        .unwrap();
    let before = redis_state(redis_port, &other_key, &result_key);
    let refused = tokens_to_refuse(&signer, (&id, created), (&other, other_created));
    for (what, token) in &refused {
        let answer = post(token);
        assert_eq!(answer.status, 404, "{what}: {answer:?}");
    }
    let after = redis_state(redis_port, &other_key, &result_key);
    assert_eq!(before, after, "a refused callback changed Redis");
    assert_eq!(
        metric_value(web_port, "repoll_callbacks_total"),
        Some(1.0),
        "a refused callback is not counted"
    );
    // The right token for the live task: done at once, and a second use is refused.
    let good = signer.token(&other, other_created, 0);
    let answer = post(&good);
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(answer.json()["completed"], true, "{answer:?}");
    assert_eq!(post(&good).status, 404, "a used token");
    // Counted once: the used token's second post is not.
    until_callbacks_counted(web_port, 2.0);
    let stored = redis_cli(redis_port, &["GET", &format!("{{cbq}}:r:{other}")]);
    assert!(stored.ends_with(r#"{"forged":true}"#), "{stored}");
}

/// Writes, in `dir` (created), a config file naming the upstream `search` (the simulator's
/// second, calling back after one poll, polled every 10 s); its path.
fn write_the_search_upstream_config(dir: &std::path::Path, sim_port: u16) -> std::path::PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let config = dir.join("upstreams.toml");
    std::fs::write(
        &config,
        format!(
            "[upstreams.search]\n\
             url = \"http://127.0.0.1:{sim_port}/search/api/query?q={{key}}&polls=1&callback={{callback_url}}\"\n\
             poll_interval_ms = 10000\n\
             concurrency = 2\n"
        ),
    )
    .unwrap();
    config
}

/// Checks each result is stored under its own queue's hash tag (`a` the default upstream's,
/// `b` the search one's), and each simulated upstream saw only its own keys, `find-x` by one
/// poll and one callback.
fn check_each_result_under_its_own_tag_and_each_upstreams_calls(
    redis_port: u16,
    sim_port: u16,
    a: &str,
    b: &str,
) {
    // Each result under its own queue's hash tag; the sim saw each upstream's own key.
    assert_eq!(
        redis_cli(redis_port, &["EXISTS", &format!("{{nq}}:r:{a}")]),
        "1"
    );
    assert_eq!(
        redis_cli(redis_port, &["EXISTS", &format!("{{nq.search}}:r:{b}")]),
        "1"
    );
    assert_eq!(
        redis_cli(redis_port, &["EXISTS", &format!("{{nq}}:r:{b}")]),
        "0"
    );
    let sim = http_get(sim_port, "/_sim/stats").unwrap().body;
    assert!(sim.contains(r#""same text":{"calls":"#), "{sim}");
    assert!(!sim.contains("find-x"), "{sim}");
    let search = http_get(sim_port, "/search/_sim/stats").unwrap().body;
    assert!(
        search.contains(r#""same text":{"calls":1,"done":1}"#),
        "{search}"
    );
    let cb = http_get(sim_port, "/search/_sim/key?q=find-x%20ms%3D800")
        .unwrap()
        .body;
    assert!(cb.contains(r#""callbacks":1"#), "{cb}");
    assert!(
        cb.contains(r#""calls":1,"#),
        "one poll, then the callback: {cb}"
    );
}

/// Checks `repoll worker --upstream nope` does not start, naming the known upstreams.
fn check_a_worker_for_an_unknown_upstream_does_not_start(config: &std::path::Path, url: &str) {
    // A worker process for an upstream that does not exist does not start.
    let mut w = repoll();
    w.args(["worker", "--upstream", "nope", "--config"])
        .arg(config)
        .env("REDIS_URL", url)
        .env("REPOLL_QUEUE", "nq");
    let out = output_within(w, Duration::from_secs(20));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no such upstream") && stderr.contains("default, search"),
        "{stderr}"
    );
}

/// Named upstreams (`[upstreams.<name>]` in the config file): one `repoll serve` runs a worker
/// per upstream; the same text sent to two upstreams is two tasks with two ids, each finished
/// by its own upstream and stored under its own queue's hash tag; an unknown upstream is a 422
/// naming the known ones; a named upstream's callback completes its task (the token names the
/// upstream); the query page offers the choice; `repoll worker --upstream` refuses a name that
/// does not exist.
#[test]
fn named_upstreams_have_their_own_queue_ids_workers_and_callbacks() {
    const SECRET: &str = "callback-secret-of-the-upstreams-test-0123";
    let (web_port, redis_port, sim_port) = (free_port(), free_port(), free_port());
    let _redis = spawn_redis(redis_port, &[]);
    let mut children = Reaped::default();
    let url = format!("redis://127.0.0.1:{redis_port}");
    let dir = std::env::temp_dir().join(format!("repoll-upstreams-{}", std::process::id()));
    let config = write_the_search_upstream_config(&dir, sim_port);
    let mut cmd = serve_with_sim_and_callbacks(&url, "nq", web_port, sim_port, SECRET);
    cmd.arg("--config")
        .arg(&config)
        // The simulator's second upstream, `search`, under /search with its own state.
        .env("REPOLL_SIM_UPSTREAMS", "search")
        .env(
            "REPOLL_UPSTREAM_URL",
            format!("http://127.0.0.1:{sim_port}/api/query?q={{key}}"),
        )
        .env("REPOLL_POLL_INTERVAL_MS", "50");
    children
        .0
        .push(ChildGuard::adopt(cmd.spawn().expect("spawn repoll")));
    assert!(
        wait_ready(web_port, Duration::from_secs(30)),
        "serve not ready"
    );

    let post = |body: &str| http_post_json(web_port, "/api/v1/queries", body);
    let a = id_in(&post(r#"{"query":"same text"}"#));
    let b = id_in(&post(r#"{"query":"same text","upstream":"search"}"#));
    assert_ne!(a, b, "one text, two upstreams: two tasks");
    let unknown = post(r#"{"query":"x","upstream":"nope"}"#);
    assert_eq!(unknown.status, 422, "{unknown:?}");
    assert!(unknown.body.contains("unknown_upstream"), "{unknown:?}");
    assert!(
        unknown.body.contains("known: default, search"),
        "{unknown:?}"
    );

    // The final answer as JSON text (compact, so `"key":"value"` is found as written).
    let done = |id: &str| {
        BlockingHttp::local(web_port)
            .wait_done(id, Duration::from_secs(20))
            .to_string()
    };
    assert!(done(&a).contains(r#""upstream":"default""#));
    let t0 = Instant::now();
    let c = id_in(&post(r#"{"query":"find-x ms=800","upstream":"search"}"#));
    // Its live stream (Pub/Sub of the named upstream's queue) brings the final state.
    let mut events = send(
        web_port,
        &format!(
            "GET /api/v1/queries/{c}/events HTTP/1.1\r\nhost: x\r\n\
             accept: text/event-stream\r\n\r\n"
        ),
    );
    let streamed = read_until(&mut events, r#""status":"done""#);
    assert!(streamed.contains(r#""upstream":"search""#), "{streamed}");
    assert!(done(&b).contains(r#""upstream":"search""#));
    let body_c = done(&c);
    let c_done = t0.elapsed();
    // Its page names the upstream.
    let page = http_get(web_port, &format!("/q/{c}")).unwrap().body;
    assert!(page.contains("via search"), "{page}");
    println!(
        "named upstream callback: done {} ms after the submit (poll interval 10 s)",
        c_done.as_millis()
    );
    assert!(body_c.contains(r#""upstream":"search""#), "{body_c}");

    check_each_result_under_its_own_tag_and_each_upstreams_calls(redis_port, sim_port, &a, &b);

    // The query page offers both upstreams.
    let page = http_get(web_port, "/").unwrap().body;
    assert!(page.contains(r#"data-testid="query-upstream""#), "{page}");
    assert!(page.contains(r#"<option value="search""#), "{page}");

    check_a_worker_for_an_unknown_upstream_does_not_start(&config, &url);
    std::fs::remove_dir_all(&dir).ok();
}
