//! An admin's quiet and stop reach real worker processes through Redis (the worker's registry
//! entry, read on its heartbeat), as the dashboard sends them (`act`, audited):
//! - a quieted `repoll worker` claims nothing new while a task waits, yet finishes and
//!   completes the call it held, and keeps heartbeating as "quiet";
//! - a stopped one releases its in-flight lease within its grace and exits 0, leaving the
//!   registry;
//! - stopping the embedded workers of a `repoll serve` stops them, not the web server.
//!
//! Each heartbeat also carries the process's memory, read by the process itself.

use crate::common;
use crate::common::wait_for;

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
    let mut cmd = crate::common::process::repoll();
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

/// Issue 39 row 5: commands that change nothing are not audited as changes, so noise cannot
/// push the last changes out of the capped audit log. 300 commands to workers that are not
/// there, and pauses of a paused queue, leave only the one real pause in the log (they were
/// each an entry before: 1,000 such posts emptied the log of everything else).
#[tokio::test]
async fn commands_that_change_nothing_leave_the_audit_log_alone() {
    let env = admin::start().await;
    let cookie = sign_in(&env.router, ADMIN_PW, [10, 0, 0, 2]).await.unwrap();
    let r = act_as(&env.router, &cookie, &[("op", "retry_all_dead")]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let before = env.queue.audit_log(1000).await.unwrap().len();
    for i in 0..300 {
        let op = if i % 2 == 0 {
            "quiet_worker"
        } else {
            "stop_worker"
        };
        let gone = format!("gone-{i}");
        let r = act_as(&env.router, &cookie, &[("op", op), ("id", &gone)]).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert!(r.body.contains("no worker gone-"), "{}", r.body);
    }
    let mut answers = vec![];
    for _ in 0..3 {
        let r = act_as(&env.router, &cookie, &[("op", "pause")]).await;
        assert_eq!(r.status, 200, "{}", r.body);
        answers.push(r.body);
    }
    assert!(answers[0].contains("\"paused:"), "{answers:?}");
    assert!(
        answers[1..].iter().all(|a| a.contains("already paused")),
        "{answers:?}"
    );
    let log = env.queue.audit_log(1000).await.unwrap();
    let added: Vec<(&str, &str, u64)> = log[..log.len() - before]
        .iter()
        .map(|a| (a.action.as_str(), a.target.as_str(), a.count))
        .collect();
    assert_eq!(added, [("pause", "queue:default", 1)], "new entries");
    env.redis.stop().await;
}

/// Issue 39's probe, what held: `quiet_worker` and `stop_worker` are refused to a viewer and
/// to a cross-site post of a signed-in admin (403, before the action runs), so the worker's
/// registry entry carries no command and its next heartbeat is told nothing; nothing is
/// audited. The worker is a registry entry written as a worker's heartbeat writes it (what a
/// command is read from), no process: the refusal is the web side's.
#[tokio::test]
async fn worker_commands_are_refused_to_viewers_and_cross_site() {
    let env = admin::start().await;
    let (r, q) = (&env.router, &env.queue);
    let id = "ctl-guarded";
    let info = queue::WorkerInfo {
        id: id.to_string(),
        host: "test-host".into(),
        pid: 4242,
        started_ms: 0,
        in_flight: 0,
        completed: 0,
        dead: 0,
        last_seen_ms: 0,
        rss_bytes: None,
        mode: queue::WorkerMode::Running,
        command: None,
    };
    // A minute to live: far past the test, so a missing command is never an expired entry.
    let beat = async || q.heartbeat(&info, 60_000).await.unwrap();
    assert_eq!(beat().await, None);
    let audit_before = q.audit_log(1000).await.unwrap().len();

    let viewer = sign_in(r, admin::VIEWER_PW, [10, 0, 0, 60]).await.unwrap();
    let cookie = sign_in(r, ADMIN_PW, [10, 0, 0, 61]).await.unwrap();
    let cross_site: [&[(&str, &str)]; 4] = [
        &[("sec-fetch-site", "cross-site")],
        &[("sec-fetch-site", "same-site")],
        &[("origin", "https://evil.example")],
        &[("origin", "null")],
    ];
    for op in ["quiet_worker", "stop_worker"] {
        let fields = [("op", op), ("id", id)];
        let reply = act_as(r, &viewer, &fields).await;
        assert_eq!(reply.status, 403, "viewer {op}: {}", reply.body);
        assert!(reply.body.contains("read-only"), "{}", reply.body);
        for headers in cross_site {
            let reply =
                admin::call::<app::pages::admin::actions::Act>(r, &fields, Some(&cookie), headers)
                    .await;
            assert_eq!(reply.status, 403, "{headers:?} {op}: {}", reply.body);
        }
    }
    let seen = entry(q, id).await.expect("the worker is still registered");
    assert_eq!(seen.command, None, "{seen:?}");
    assert_eq!(beat().await, None, "the heartbeat is told nothing");
    assert_eq!(q.audit_log(1000).await.unwrap().len(), audit_before);

    // The admin's own post from the dashboard's origin is sent: the refusals were the checks.
    let same_origin = [
        ("origin", "http://admin.test:3000"),
        ("sec-fetch-site", "same-origin"),
    ];
    let fields = [("op", "quiet_worker"), ("id", id)];
    let reply =
        admin::call::<app::pages::admin::actions::Act>(r, &fields, Some(&cookie), &same_origin)
            .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(beat().await, Some(queue::WorkerCommand::Quiet));
    audited(q, "quiet_worker", id).await;
    env.redis.stop().await;
}
