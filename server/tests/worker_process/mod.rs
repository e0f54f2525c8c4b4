//! `repoll worker` as a real process against a private redis-server and the simulator over
//! HTTP: a SIGKILLed worker's tasks are finished by another worker after the lease, none is
//! lost or completed twice; SIGTERM releases in-flight leases and exits 0; a worker started
//! before its Redis waits for it. Late workers (stopped past the lease, or whose call outlives
//! it) writing nothing over the newer owner's work: late.rs.

mod late;

use crate::common::wait_for;
use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use server::managed_redis::ManagedRedis;

// The queue tests' Redis-time travel (`expire_lease`: a lease's deadline moved one millisecond
// into the past, as if it had passed while its holder was still calling).
#[path = "../../../queue/tests/common/clock.rs"]
mod clock;
use testkit::{free_port, ChildGuard};

struct Env {
    redis: ManagedRedis,
    sim_port: u16,
    queue: queue::Queue,
    name: String,
    _dir: TempDir,
}

struct TempDir(PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn setup(name: &str, sim: sim::SimArgs) -> Env {
    let dir = std::env::temp_dir().join(format!("repoll-wp-{name}-{}", std::process::id()));
    let redis = ManagedRedis::start("redis-server".as_ref(), &dir, 0)
        .await
        .expect("redis-server");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let sim_port = listener.local_addr().unwrap().port();
    tokio::spawn(sim::serve(listener, sim, std::future::pending::<()>()));
    let queue = queue::Queue::connect(
        redis.url(),
        queue::QueueConfig {
            name: name.into(),
            history: queue::HistoryLevel::Full,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    Env {
        redis,
        sim_port,
        queue,
        name: name.into(),
        _dir: TempDir(dir),
    }
}

fn spawn_worker(env: &Env, lease_ms: u64, grace_ms: u64) -> Child {
    worker_command(env, lease_ms, grace_ms)
        .spawn()
        .expect("spawn repoll worker")
}

fn worker_command(env: &Env, lease_ms: u64, grace_ms: u64) -> Command {
    let mut cmd = crate::common::process::repoll();
    cmd.arg("worker")
        .env("REDIS_URL", env.redis.url())
        .env("REPOLL_QUEUE", &env.name)
        // The tests read each worker's every claim from the history.
        .env("REPOLL_HISTORY", "full")
        .env(
            "REPOLL_UPSTREAM_URL",
            format!("http://127.0.0.1:{}/api/query?q={{key}}", env.sim_port),
        )
        .env("REPOLL_LEASE_MS", lease_ms.to_string())
        .env("REPOLL_GRACE_MS", grace_ms.to_string())
        .env("REPOLL_CONCURRENCY", "8")
        .env("REPOLL_POLL_INTERVAL_MS", "100")
        .env("REPOLL_UPSTREAM_TIMEOUT_MS", "10000")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_worker_tasks_are_finished_by_another_exactly_once() {
    let env = setup(
        "wpkill",
        sim::SimArgs {
            polls: 2,
            latency_ms: 400,
            ..Default::default()
        },
    )
    .await;
    let policy = queue::EnqueuePolicy::default();
    let mut ids = Vec::new();
    for i in 0..24 {
        match env
            .queue
            .enqueue(&format!("kill-{i}"), "", &policy)
            .await
            .unwrap()
        {
            queue::Enqueued::Created(t) => ids.push(t.id),
            other => panic!("expected a new task, got {other:?}"),
        }
    }

    let mut a = spawn_worker(&env, 1_000, 5_000);
    let q = env.queue.clone();
    wait_for(
        "worker A to hold leases",
        Duration::from_secs(20),
        async || q.stats().await.map(|s| s.leased >= 4).unwrap_or(false),
    )
    .await;
    a.kill().expect("SIGKILL worker A");
    a.wait().unwrap();
    let held = env.queue.stats().await.unwrap().leased;
    eprintln!("worker A killed holding {held} leases");
    assert!(held > 0);

    let killed_at = Instant::now();
    let mut b = spawn_worker(&env, 1_000, 1_000);
    let q = env.queue.clone();
    wait_for("all results", Duration::from_secs(60), async || {
        q.stats()
            .await
            .map(|s| s.results == 24 && s.leased == 0 && s.ready + s.waiting + s.retrying == 0)
            .unwrap_or(false)
    })
    .await;
    eprintln!(
        "all 24 tasks done {:?} after worker A was killed",
        killed_at.elapsed()
    );

    let mut expired = 0;
    for id in &ids {
        let detail = env.queue.get(id).await.unwrap().expect("task detail");
        let completed = detail
            .history
            .iter()
            .filter(|h| h.kind == "completed")
            .count();
        assert_eq!(
            completed, 1,
            "task {id} completed once: {:?}",
            detail.history
        );
        assert!(detail.result.is_some(), "result stored for {id}");
        expired += detail
            .history
            .iter()
            .filter(|h| h.kind == "lease_expired")
            .count();
    }
    assert!(
        expired as u64 >= held,
        "every lease A held expired and was recovered ({expired} >= {held})"
    );
    assert_eq!(env.queue.stats().await.unwrap().dead, 0, "none dead");

    terminate(&b);
    let status = b.wait().unwrap();
    assert!(status.success(), "worker B exits 0 on SIGTERM: {status}");
    env.redis.stop().await;
}

async fn sim_key(env: &Env, key: &str) -> sim::state::KeyDetail {
    reqwest::Client::new()
        .get(format!("http://127.0.0.1:{}/_sim/key", env.sim_port))
        .query(&[("q", key)])
        .send()
        .await
        .expect("sim key")
        .json()
        .await
        .expect("sim key json")
}

/// The value of an unlabelled counter on a worker's `/metrics` page (0 while it is absent).
async fn counter(port: u16, name: &str) -> Option<f64> {
    let page = reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    let value = page
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .map_or(Some(0.0), |v| v.trim().parse().ok());
    value
}

fn epoch_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// SIGTERM with five calls in flight that the upstream answers only after 30 s, against a
/// 400 ms grace: the worker must not wait for them. It exits 0 having released every lease
/// (each task due again, a `released` entry in its history) and without having written any
/// call's outcome (no poll, no error counted) — so it left before the upstream answered,
/// whatever the machine's speed. The wait for the exit is a hang guard only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_releases_in_flight_leases_and_exits_zero_within_grace() {
    let env = setup(
        "wpterm",
        sim::SimArgs {
            latency_ms: 30_000,
            ..Default::default()
        },
    )
    .await;
    let policy = queue::EnqueuePolicy::default();
    let mut ids = Vec::new();
    for i in 0..5 {
        match env
            .queue
            .enqueue(&format!("term-{i}"), "", &policy)
            .await
            .unwrap()
        {
            queue::Enqueued::Created(t) => ids.push(t.id),
            other => panic!("expected a new task, got {other:?}"),
        }
    }
    let grace = Duration::from_millis(400);
    let mut w = ChildGuard::adopt(spawn_worker(&env, 60_000, grace.as_millis() as u64));
    let q = env.queue.clone();
    wait_for("all 5 leased", Duration::from_secs(20), async || {
        q.stats().await.map(|s| s.leased == 5).unwrap_or(false)
    })
    .await;
    // The calls are under way (the upstream has them), not just the claims.
    wait_for("all 5 called", Duration::from_secs(20), async || {
        let mut called = 0;
        for i in 0..5 {
            called += sim_key(&env, &format!("term-{i}")).await.calls;
        }
        called == 5
    })
    .await;

    terminate(w.child_mut());
    let mut w = w;
    let status = tokio::task::spawn_blocking(move || {
        let status = w.child_mut().wait();
        (status, w)
    });
    let (status, _w) = tokio::time::timeout(Duration::from_secs(25), status)
        .await
        .expect("exited before the upstream answered (25 s hang guard, calls take 30 s)")
        .unwrap();
    let status = status.unwrap();
    assert!(status.success(), "exit 0: {status}");
    let s = env.queue.stats().await.unwrap();
    assert_eq!(s.leased, 0, "no lease left behind");
    assert_eq!(
        (s.ready, s.waiting, s.retrying),
        (5, 0, 0),
        "released tasks are due now (ready, waiting, retrying)"
    );
    for id in &ids {
        let d = env.queue.get(id).await.unwrap().expect("task detail");
        let t = d.task.expect("still a task");
        assert_eq!(
            (t.polls, t.attempts),
            (0, 0),
            "an outcome was written: {t:?}"
        );
        assert!(
            d.history.iter().any(|h| h.kind == "released"),
            "{:?}",
            d.history
        );
    }
    env.redis.stop().await;
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([format!("-{sig}"), child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{sig}");
}

fn terminate(child: &Child) {
    let ok = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -TERM");
}

/// A worker started while its Redis is down (restarting, replaying its append-only file)
/// waits for it instead of exiting: under a process supervisor an exit would only mean
/// another restart, and the chaos run saw workers started mid-restart exit with "LOADING".
/// The waiting is observed, not timed: the worker logs each failed attempt ("Redis not
/// available yet; retrying") and must still be running after it; then Redis starts and the
/// worker registers (heartbeat), so it kept waiting. A worker that gave up at the first
/// failure would have exited instead of logging a retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_started_before_its_redis_waits_for_it() {
    use std::io::{BufRead, BufReader};
    let dir = std::env::temp_dir().join(format!("repoll-wp-early-{}", std::process::id()));
    let _cleanup = TempDir(dir.clone());
    let port = free_port();
    let mut worker = ChildGuard::adopt(
        crate::common::process::repoll()
            .arg("worker")
            .env(
                "REDIS_URL",
                format!("redis://default:early@127.0.0.1:{port}/0"),
            )
            .env("REPOLL_QUEUE", "wpearly")
            .env("REPOLL_HEARTBEAT_MS", "200")
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn repoll worker"),
    );
    // The logs go to stdout: each line, as it comes, to a channel.
    let (lines_tx, mut lines) = tokio::sync::mpsc::unbounded_channel();
    let stdout = worker.child_mut().stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut retried = false;
    let mut seen = String::new();
    while !retried {
        let line = tokio::time::timeout(Duration::from_secs(30), lines.recv())
            .await
            .unwrap_or_else(|_| panic!("no retry logged (30 s hang guard):\n{seen}"));
        let Some(line) = line else {
            let status = worker.child_mut().wait().unwrap();
            panic!("the worker exited ({status}) while Redis was down:\n{seen}");
        };
        retried = line.contains("Redis not available yet; retrying");
        seen.push_str(&line);
        seen.push('\n');
    }
    assert!(
        worker.child_mut().try_wait().unwrap().is_none(),
        "the worker exited while Redis was down:\n{seen}"
    );
    let redis =
        ManagedRedis::start_with_password("redis-server".as_ref(), &dir, port, Some("early"))
            .await
            .expect("redis-server");
    let queue = queue::Queue::connect(
        redis.url(),
        queue::QueueConfig {
            name: "wpearly".into(),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    // It connects and registers (heartbeat) once Redis is there.
    wait_for(
        "the worker's heartbeat",
        Duration::from_secs(30),
        async || !queue.workers().await.unwrap_or_default().is_empty(),
    )
    .await;
    drop(worker);
    redis.stop().await;
}
