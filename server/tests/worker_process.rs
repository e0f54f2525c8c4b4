//! `repoll worker` as a real process against a private redis-server and the simulator over
//! HTTP: a SIGKILLed worker's tasks are finished by another worker after the lease, none is
//! lost or completed twice; SIGTERM releases in-flight leases and exits 0.

use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use server::managed_redis::ManagedRedis;

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
    Command::new(env!("CARGO_BIN_EXE_repoll"))
        .arg("worker")
        .env("REDIS_URL", env.redis.url())
        .env("REPOLL_QUEUE", &env.name)
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
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn repoll worker")
}

async fn wait_for(what: &str, limit: Duration, mut check: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_releases_in_flight_leases_and_exits_zero_within_grace() {
    let env = setup(
        "wpterm",
        sim::SimArgs {
            latency_ms: 5_000,
            ..Default::default()
        },
    )
    .await;
    let policy = queue::EnqueuePolicy::default();
    for i in 0..5 {
        env.queue
            .enqueue(&format!("term-{i}"), "", &policy)
            .await
            .unwrap();
    }
    let grace = Duration::from_millis(400);
    let mut w = spawn_worker(&env, 30_000, grace.as_millis() as u64);
    let q = env.queue.clone();
    wait_for("all 5 leased", Duration::from_secs(20), async || {
        q.stats().await.map(|s| s.leased == 5).unwrap_or(false)
    })
    .await;

    let sent = Instant::now();
    terminate(&w);
    let status = w.wait().unwrap();
    let took = sent.elapsed();
    eprintln!("worker exited {status} {took:?} after SIGTERM (grace {grace:?})");
    assert!(status.success(), "exit 0: {status}");
    assert!(
        took < grace + Duration::from_secs(3),
        "exited within the grace period plus slack: {took:?}"
    );
    let s = env.queue.stats().await.unwrap();
    assert_eq!(s.leased, 0, "no lease left behind");
    assert_eq!(s.ready, 5, "released tasks are due now: {s:?}");
    env.redis.stop().await;
}

fn terminate(child: &Child) {
    let ok = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -TERM");
}
