//! An admin's quiet and stop reach real worker processes through Redis (the worker's registry
//! entry, read on its heartbeat), as the dashboard sends them (`act`, audited):
//! - a quieted `repoll worker` claims nothing new while a task waits, yet finishes and
//!   completes the call it held, and keeps heartbeating as "quiet";
//! - a stopped one releases its in-flight lease within its grace and exits 0, leaving the
//!   registry;
//! - stopping the embedded workers of a `repoll serve` stops them, not the web server.
//!
//! Each heartbeat also carries the process's memory, read by the process itself.

mod common;

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use common::admin::{self, act_as, sign_in, ADMIN_PW};
use common::held_upstream::HeldUpstream;
use testkit::{free_port, ChildGuard};

/// The admin test world's default queue (`common::admin`).
const QUEUE: &str = "admintest";

/// `repoll worker` `id` on the admin world's Redis, calling `url`, with two slots, fast
/// heartbeats and claim loop, and leases and call timeouts far beyond every hang guard (no
/// renewal, no timeout: nothing but the commands moves it).
fn worker_command(env: &admin::Env, id: &str, url: &str, grace_ms: u64) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_repoll"));
    cmd.arg("worker")
        .env("REDIS_URL", env.redis.url())
        .env("REPOLL_QUEUE", QUEUE)
        .env("REPOLL_HISTORY", "full")
        .env("REPOLL_UPSTREAM_URL", url)
        .env("REPOLL_WORKER_ID", id)
        .env("REPOLL_CONCURRENCY", "2")
        .env("REPOLL_HEARTBEAT_MS", "200")
        .env("REPOLL_MAX_IDLE_MS", "100")
        .env("REPOLL_LEASE_MS", "600000")
        .env("REPOLL_UPSTREAM_TIMEOUT_MS", "600000")
        .env("REPOLL_GRACE_MS", grace_ms.to_string())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    cmd
}

async fn wait_for(what: &str, limit: Duration, mut check: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn enqueue(q: &queue::Queue, key: &str) -> queue::TaskId {
    match q
        .enqueue(key, "", &queue::EnqueuePolicy::default())
        .await
        .unwrap()
    {
        queue::Enqueued::Created(t) => t.id,
        other => panic!("expected a new task, got {other:?}"),
    }
}

/// The registry entry of worker `id` in `q`, if it is there.
async fn entry(q: &queue::Queue, id: &str) -> Option<queue::WorkerInfo> {
    q.workers().await.unwrap().into_iter().find(|w| w.id == id)
}

/// Waits until the process ends (hang guard `limit`: then it is killed, as the guard drops);
/// its exit status.
async fn exit_of(mut child: ChildGuard, limit: Duration) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.exited() {
            return status;
        }
        assert!(
            start.elapsed() < limit,
            "the process did not exit ({limit:?} hang guard)"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The audit log holds `action` on `worker:<id>` by the admin.
async fn audited(q: &queue::Queue, action: &str, id: &str) {
    let log = q.audit_log(20).await.unwrap();
    assert!(
        log.iter().any(|a| a.who == "admin"
            && a.action == action
            && a.target == format!("worker:{id}")
            && a.count == 1),
        "no audit entry of {action} on worker:{id}: {log:?}"
    );
}

/// Quiet: the worker holds task A (its call held by the test), is told to go quiet from the
/// dashboard, and says so in its heartbeat. Then task B arrives while a slot is free, and A's
/// call is answered: A is completed (the completion would hand B over to a running worker,
/// as would the claim loop's wake-up), yet B stays ready through many more heartbeats and
/// claim-loop rounds; the worker is still there, quiet. Its memory is a positive number.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_worker_finishes_what_it_holds_and_claims_nothing_new() {
    let env = admin::start().await;
    let mut upstream = HeldUpstream::start().await;
    let id = "ctl-quiet";
    let a = enqueue(&env.queue, "quiet-a").await;
    let w = ChildGuard::adopt(
        worker_command(&env, id, &upstream.url("q"), 1_000)
            .spawn()
            .expect("spawn repoll worker"),
    );
    assert_eq!(upstream.next_call().await, "q", "A's call");
    let q = env.queue.clone();
    wait_for("its heartbeat", Duration::from_secs(30), async || {
        entry(&q, id).await.is_some()
    })
    .await;
    let first = entry(&q, id).await.unwrap();
    assert_eq!(first.mode, queue::WorkerMode::Running, "{first:?}");
    assert!(
        first.rss_bytes.is_some_and(|n| n > 0),
        "memory read by the process: {first:?}"
    );

    let cookie = sign_in(&env.router, ADMIN_PW, [10, 0, 0, 1]).await.unwrap();
    let r = act_as(&env.router, &cookie, &[("op", "quiet_worker"), ("id", id)]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("told to go quiet"), "{}", r.body);
    audited(&env.queue, "quiet_worker", id).await;
    wait_for(
        "the worker to say quiet",
        Duration::from_secs(30),
        async || {
            entry(&q, id)
                .await
                .is_some_and(|w| w.mode == queue::WorkerMode::Quiet)
        },
    )
    .await;

    let b = enqueue(&env.queue, "quiet-b").await;
    upstream.answer("q");
    wait_for("A's result", Duration::from_secs(30), async || {
        q.get(&a).await.unwrap().is_some_and(|d| d.result.is_some())
    })
    .await;
    // Ten heartbeats after A's completion (2 s of a 200 ms period, claim-loop rounds every
    // 100 ms): observed, not timed.
    let mut last = entry(&q, id).await.expect("still registered").last_seen_ms;
    for _ in 0..10 {
        wait_for("the next heartbeat", Duration::from_secs(30), async || {
            entry(&q, id).await.is_some_and(|w| w.last_seen_ms > last)
        })
        .await;
        last = entry(&q, id).await.unwrap().last_seen_ms;
    }
    let t = q.get(&b).await.unwrap().and_then(|d| d.task).expect("B");
    assert_eq!(t.state, queue::TaskState::Due, "B was claimed: {t:?}");
    let s = q.stats().await.unwrap();
    assert_eq!((s.ready, s.leased, s.results), (1, 0, 1), "{s:?}");
    let now = entry(&q, id)
        .await
        .expect("a quiet worker stays registered");
    assert_eq!(
        (now.mode, now.in_flight, now.completed),
        (queue::WorkerMode::Quiet, 0, 1),
        "{now:?}"
    );

    // A quiet worker still stops on SIGTERM, exit 0.
    let ok = Command::new("kill")
        .args(["-TERM", &w.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    assert!(exit_of(w, Duration::from_secs(30)).await.success());
    env.redis.stop().await;
}

/// Stop: the worker holds task C, whose call the upstream never answers; told to stop from
/// the dashboard, it must not wait for the call: it releases C's lease after its 400 ms grace
/// (C due again, `released` in its history, no outcome written) and exits 0, gone from the
/// registry. The wait for the exit is a hang guard only (the call would hold it forever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_worker_releases_its_leases_and_exits_zero() {
    let env = admin::start().await;
    let mut upstream = HeldUpstream::start().await;
    let id = "ctl-stop";
    let c = enqueue(&env.queue, "stop-c").await;
    let w = ChildGuard::adopt(
        worker_command(&env, id, &upstream.url("s"), 400)
            .spawn()
            .expect("spawn repoll worker"),
    );
    assert_eq!(upstream.next_call().await, "s", "C's call");
    let q = env.queue.clone();
    wait_for("its heartbeat", Duration::from_secs(30), async || {
        entry(&q, id).await.is_some()
    })
    .await;

    let cookie = sign_in(&env.router, ADMIN_PW, [10, 0, 0, 1]).await.unwrap();
    let r = act_as(&env.router, &cookie, &[("op", "stop_worker"), ("id", id)]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("told to stop"), "{}", r.body);
    audited(&env.queue, "stop_worker", id).await;

    let status = exit_of(w, Duration::from_secs(30)).await;
    assert!(status.success(), "exit 0: {status}");
    assert!(entry(&q, id).await.is_none(), "left the registry");
    let d = q.get(&c).await.unwrap().expect("C");
    let t = d.task.expect("still a task");
    assert_eq!(
        (t.state, t.polls, t.attempts),
        (queue::TaskState::Due, 0, 0),
        "{t:?}"
    );
    assert!(
        d.history.iter().any(|h| h.kind == "released"),
        "{:?}",
        d.history
    );
    let s = q.stats().await.unwrap();
    assert_eq!((s.ready, s.leased), (1, 0), "{s:?}");

    // A command for a worker that is not there writes nothing (no entry is made up).
    let r = act_as(&env.router, &cookie, &[("op", "quiet_worker"), ("id", id)]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("no worker ctl-stop"), "{}", r.body);
    assert!(entry(&q, id).await.is_none());
    let r = act_as(&env.router, &cookie, &[("op", "stop_worker"), ("id", "")]).await;
    assert_eq!(r.status, 400, "{}", r.body);
    env.redis.stop().await;
}

/// A `repoll serve`'s embedded workers told to stop (the command a dashboard sends, to one of
/// its workers' entries): they leave the registry, and the web server serves on (ready, and
/// it still takes queries); SIGTERM then ends it, exit 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_embedded_workers_leaves_the_web_server_serving() {
    let (redis, _dir) = common::start_redis().await;
    let q = common::connect_queue(redis.url(), "ctlserve").await;
    let web_port = free_port();
    let serve = ChildGuard::adopt(
        common::process::serve_command(redis.url(), web_port)
            .env("REPOLL_QUEUE", "ctlserve")
            .env("REPOLL_WORKERS", "2")
            .env("REPOLL_HEARTBEAT_MS", "200")
            .env(
                "REPOLL_UPSTREAM_URL",
                "http://127.0.0.1:9/api/query?q={key}",
            )
            .env("REPOLL_ADMIN_PASSWORD", ADMIN_PW)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn repoll serve"),
    );
    let ready = tokio::task::spawn_blocking(move || {
        common::process::wait_ready(web_port, Duration::from_secs(30))
    });
    assert!(ready.await.unwrap(), "repoll serve ready (30 s hang guard)");
    wait_for("its embedded worker", Duration::from_secs(30), async || {
        !q.workers().await.unwrap().is_empty()
    })
    .await;
    let embedded = q.workers().await.unwrap().remove(0);
    assert_eq!(embedded.pid, serve.id(), "the serve process's own worker");
    let sent = q
        .command_worker(&embedded.id, queue::WorkerCommand::Stop)
        .await
        .unwrap();
    assert_eq!(sent, queue::CommandSent::Sent);
    wait_for(
        "the embedded workers to stop",
        Duration::from_secs(30),
        async || q.workers().await.unwrap().is_empty(),
    )
    .await;

    let answers = tokio::task::spawn_blocking(move || {
        let ready = common::process::wait_ready(web_port, Duration::from_secs(10));
        let id = common::process::submit_query(web_port, "after the stop");
        (ready, id)
    });
    let (ready, id) = answers.await.unwrap();
    assert!(ready, "the web server still answers /readyz");
    assert!(!id.is_empty(), "and still takes queries");
    let ok = Command::new("kill")
        .args(["-TERM", &serve.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    assert!(exit_of(serve, Duration::from_secs(30)).await.success());
    redis.stop().await;
}
