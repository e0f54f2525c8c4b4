//! `repoll admin repartition` against real `repoll` processes: it refuses while any repoll
//! process of the queue runs (a web-only `serve --workers 0` included, named in the refusal),
//! runs once they have stopped, and a process still running the old layout afterwards accepts
//! nothing (503, `/readyz` 503) instead of writing where the queue no longer looks.

use crate::common;
use common::process::*;

use std::{
    process::Stdio,
    time::{Duration, Instant},
};

use testkit::http::BlockingHttp;
use testkit::{free_port, ChildGuard};

/// `repoll admin repartition --to <to>` of queue `queue` on `url`, run to its end.
fn admin_repartition(url: &str, queue: &str, to: &str) -> std::process::Output {
    let mut cmd = repoll();
    cmd.args(["admin", "repartition", "--to", to])
        .env("REDIS_URL", url)
        .env("REPOLL_QUEUE", queue);
    output_within(cmd, Duration::from_secs(20))
}

/// A web-only `repoll serve` (`--workers 0`) of queue `queue`, ready on `web_port`.
fn web_only(url: &str, queue: &str, web_port: u16, heartbeat_ms: &str) -> ChildGuard {
    let mut cmd = serve_command(url, web_port);
    cmd.env("REPOLL_QUEUE", queue)
        .env("REPOLL_HEARTBEAT_MS", heartbeat_ms)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let guard = ChildGuard::spawn(cmd).expect("spawn repoll serve");
    assert!(
        wait_ready(web_port, Duration::from_secs(30)),
        "repoll serve became ready (30 s hang guard)"
    );
    guard
}

/// SIGTERM, then the exit status (30 s hang guard).
fn sigterm_and_wait(child: &mut ChildGuard) -> std::process::ExitStatus {
    child.signal(libc::SIGTERM);
    let t0 = Instant::now();
    loop {
        if let Some(status) = child.exited() {
            return status;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no exit after SIGTERM (30 s hang guard)"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The case: a web-only process ran while the queue was repartitioned, kept accepting
/// queries into the old partitions, and after its restart they were gone. Now the repartition
/// refuses while it runs, naming it (its pid) and saying what to do; a clean stop takes it out
/// of the registry at once, and the repartition then runs.
#[test]
fn a_repartition_is_refused_while_a_web_only_process_runs() {
    let port = free_port();
    let _redis = spawn_redis(port, &[]);
    let url = format!("redis://127.0.0.1:{port}/");
    let web_port = free_port();
    let mut web = web_only(&url, "rpw", web_port, "5000");

    let out = admin_repartition(&url, "rpw", "2");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("1 repoll process of queue \"rpw\" is running: web process ")
            && stderr.contains(&format!("(pid {} on ", web.id()))
            && stderr.contains("Stop each first (SIGTERM or Ctrl-C"),
        "{stderr}"
    );

    let status = sigterm_and_wait(&mut web);
    assert!(status.success(), "{status}");
    let out = admin_repartition(&url, "rpw", "2");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("1 -> 2 partitions"),
        "{out:?}"
    );
}

/// A web process the repartition could not see (its registry entry gone, as after heartbeats
/// that failed for three periods) finds the layout changed at its next enqueue: every query
/// is refused with 503 in the API's JSON shape and nothing is written into either layout,
/// and `/readyz` answers 503 saying why, so an orchestrator restarts it.
#[test]
fn a_web_process_whose_queue_was_repartitioned_under_it_accepts_nothing() {
    let port = free_port();
    let _redis = spawn_redis(port, &[]);
    let url = format!("redis://127.0.0.1:{port}/");
    let web_port = free_port();
    // Heartbeats ten minutes apart: it does not register again during the test.
    let _web = web_only(&url, "rpx", web_port, "600000");

    let rt = tokio::runtime::Runtime::new().unwrap();
    let q = rt
        .block_on(queue::Queue::connect(
            &url,
            queue::QueueConfig {
                name: "rpx".into(),
                ..queue::QueueConfig::default()
            },
        ))
        .unwrap();
    let entries = rt.block_on(q.web_processes()).unwrap();
    assert_eq!(entries.len(), 1, "{entries:?}");
    rt.block_on(q.remove_web_process(&entries[0].id)).unwrap();
    let out = admin_repartition(&url, "rpx", "2");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let http = BlockingHttp::local(web_port);
    for i in 0..5 {
        let answer = http.post_json(
            "/api/v1/queries",
            &serde_json::json!({ "query": format!("after the repartition {i}") }),
        );
        assert_eq!(answer.status, 503, "{answer:?}");
        let error = &answer.json()["error"];
        assert_eq!(error["code"], "unavailable", "{answer:?}");
        assert!(
            error["message"]
                .as_str()
                .is_some_and(|m| m.contains("repartitioned") && m.contains("restarted")),
            "{answer:?}"
        );
    }
    let mut c = q.connection();
    let tasks: Vec<String> = rt
        .block_on(redis::cmd("KEYS").arg("{rpx*:t:*").query_async(&mut c))
        .unwrap();
    assert!(tasks.is_empty(), "written into a layout: {tasks:?}");
    let ready = http.get("/readyz");
    assert_eq!(ready.status, 503, "{ready:?}");
    assert!(ready.body.contains("repartitioned"), "{ready:?}");
}

/// `repoll admin repartition`: refused (exit 1, saying why) while a task is live; moves a
/// drained queue; a worker started with the old count afterwards refuses to start and says
/// which count the queue has.
#[test]
fn admin_repartition_moves_a_drained_queue_and_old_counts_are_refused() {
    let port = free_port();
    let _redis = spawn_redis(port, &[]);
    let url = format!("redis://127.0.0.1:{port}/");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cfg = queue::QueueConfig {
        name: "rp".into(),
        ..queue::QueueConfig::default()
    };
    let q = rt
        .block_on(queue::Queue::connect(&url, cfg.clone()))
        .unwrap();
    rt.block_on(q.enqueue("repartition me", "", &Default::default()))
        .unwrap();
    let admin = |to: &str| {
        let mut cmd = repoll();
        cmd.args(["admin", "repartition", "--to", to])
            .env("REDIS_URL", &url)
            .env("REPOLL_QUEUE", "rp");
        output_within(cmd, Duration::from_secs(20))
    };
    let out = admin("4");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("1 tasks are live"), "{stderr}");

    let c = rt.block_on(q.claim("w", 1, 60_000)).unwrap().pop().unwrap();
    rt.block_on(q.complete(&c.id, c.token, "the answer", 1))
        .unwrap();
    let out = admin("4");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("1 -> 4 partitions; moved 1 stored results"),
        "{stdout}"
    );

    // The result is served by a handle of the new count.
    let four = rt
        .block_on(queue::Queue::connect(
            &url,
            queue::QueueConfig {
                partitions: 4,
                ..cfg
            },
        ))
        .unwrap();
    let r = rt.block_on(four.result_by_id(&c.id)).unwrap().unwrap();
    assert_eq!(r.data, "the answer");
    // A process with the old count stops at once and says why.
    let mut cmd = repoll();
    cmd.arg("worker")
        .env("REDIS_URL", &url)
        .env("REPOLL_QUEUE", "rp");
    let out = output_within(cmd, Duration::from_secs(20));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("has 4 partitions"), "{stderr}");
}
