//! `repoll worker` as a real process against a private redis-server and the simulator over
//! HTTP: a SIGKILLed worker's tasks are finished by another worker after the lease, none is
//! lost or completed twice; a SIGSTOPped worker that wakes up after another finished its tasks
//! writes nothing, and a worker whose call outlives its lease cannot complete the task while
//! the newer owner still holds it; SIGTERM releases in-flight leases and exits 0.

use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use server::managed_redis::ManagedRedis;

use crate::common;
use common::held_upstream::HeldUpstream;

// The queue tests' Redis-time travel (`expire_lease`: a lease's deadline moved one millisecond
// into the past, as if it had passed while its holder was still calling).
#[path = "../../queue/tests/common/clock.rs"]
mod clock;
use clock::expire_lease;
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
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_repoll"));
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

/// README: "a late worker can never overwrite a newer one's work". Worker A (a real process)
/// claims two tasks and calls the upstream, which takes 4 s to answer A; A is SIGSTOPped
/// mid-call, so it cannot renew its 1.5 s leases either. Worker B reaps the expired leases,
/// claims and completes both. Only then is A continued, with the upstream's answers waiting
/// for it: a final one (marked `payload=late`) for one task, a "processing" one for the
/// other. A must write nothing: on waking it finds each lease lost (counted in
/// `repoll_stale_tokens_total`) — in practice by its overdue renewal, before any outcome
/// write (A's log says `op="renew"`) — and drops both answers; B's results stand, each
/// history has exactly one `completed` (B's), and no task record comes back. (A's outcome
/// write itself, refused by its token while B still holds the lease, is the next test's.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_worker_cannot_overwrite_the_newer_result() {
    let env = setup("wplate", sim::SimArgs::default()).await;
    // Done at the first call: A's late answer is final too, so only B's `done` may be stored.
    let final_key = "late-final polls=0";
    // Done 500 ms after the first call: A (the first call) hears "processing", B hears done.
    let partial_key = "late-partial ms=500";
    let mut ids = Vec::new();
    for key in [final_key, partial_key] {
        match env
            .queue
            .enqueue(key, "", &queue::EnqueuePolicy::default())
            .await
            .unwrap()
        {
            queue::Enqueued::Created(t) => ids.push(t.id),
            other => panic!("expected a new task, got {other:?}"),
        }
    }
    let lease_ms = 1_500;
    let answer_ms = 4_000;
    let metrics_port = free_port();
    let mut a = ChildGuard::adopt(
        worker_command(&env, lease_ms, 1_000)
            .env(
                "REPOLL_UPSTREAM_URL",
                format!(
                    "http://127.0.0.1:{}/api/query?q={{key}}&latency={answer_ms}&payload=late",
                    env.sim_port
                ),
            )
            .env("REPOLL_WORKER_ID", "late-a")
            .env("REPOLL_METRICS_ADDR", format!("127.0.0.1:{metrics_port}"))
            .spawn()
            .expect("spawn worker A"),
    );
    wait_for(
        "worker A's calls to reach the upstream",
        Duration::from_secs(20),
        async || {
            sim_key(&env, final_key).await.calls >= 1 && sim_key(&env, partial_key).await.calls >= 1
        },
    )
    .await;
    signal(a.child_mut(), "STOP");
    // Stopped mid-call: both tasks still leased by A, nothing written by it.
    for id in &ids {
        let t = env.queue.get(id).await.unwrap().and_then(|d| d.task);
        let t = t.expect("task record");
        assert_eq!(
            (t.state, t.worker.as_deref()),
            (queue::TaskState::Leased, Some("late-a")),
            "A was stopped before its {answer_ms} ms calls returned: {t:?}"
        );
    }

    let mut b = ChildGuard::adopt(
        worker_command(&env, lease_ms, 1_000)
            .env("REPOLL_WORKER_ID", "late-b")
            .spawn()
            .expect("spawn worker B"),
    );
    let q = env.queue.clone();
    wait_for(
        "B to finish both tasks",
        Duration::from_secs(60),
        async || {
            q.stats()
                .await
                .map(|s| s.results == 2 && s.leased == 0 && s.ready + s.waiting + s.retrying == 0)
                .unwrap_or(false)
        },
    )
    .await;
    // The upstream has answered A (into its socket) by now; then A runs again.
    let first_calls: Vec<i64> = [
        sim_key(&env, final_key).await,
        sim_key(&env, partial_key).await,
    ]
    .iter()
    .map(|k| k.call_ms[0])
    .collect();
    wait_for(
        "the upstream's answers to A",
        Duration::from_secs(20),
        async || {
            first_calls
                .iter()
                .all(|&c| epoch_ms() > c + answer_ms as i64 + 200)
        },
    )
    .await;
    signal(a.child_mut(), "CONT");
    wait_for(
        "A to find both its leases lost",
        Duration::from_secs(30),
        async || {
            counter(
                metrics_port,
                "repoll_stale_tokens_total{upstream=\"default\"}",
            )
            .await
                == Some(2.0)
        },
    )
    .await;

    terminate(a.child_mut());
    assert!(a.child_mut().wait().unwrap().success(), "worker A exits 0");
    terminate(b.child_mut());
    assert!(b.child_mut().wait().unwrap().success(), "worker B exits 0");

    // B's results stand; A's final answer (payload "late") was not stored.
    let s = env.queue.stats().await.unwrap();
    assert_eq!(
        (
            s.results,
            s.dead,
            s.leased,
            s.ready + s.waiting + s.retrying
        ),
        (2, 0, 0, 0),
        "{s:?}"
    );
    for id in &ids {
        let d = env.queue.get(id).await.unwrap().expect("detail");
        assert!(d.task.is_none(), "no task record came back: {:?}", d.task);
        let r = d.result.expect("result");
        let data: serde_json::Value = serde_json::from_str(&r.data).unwrap();
        assert_eq!(data["progress"], 1.0, "{data}");
        assert!(
            data.get("payload").is_none(),
            "A's answer was stored: {data}"
        );
        let h: Vec<_> = d.history.iter().rev().collect();
        let kinds: Vec<_> = h.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "enqueued",
                "claimed",
                "lease_expired",
                "claimed",
                "completed"
            ],
            "{h:?}"
        );
        assert!(h[1].detail.contains("by late-a"), "{h:?}");
        assert!(h[2].detail.contains("from late-a"), "{h:?}");
        assert!(h[4].detail.contains("by late-b"), "{h:?}");
    }
    // The upstream's view: A's call and B's for each key. Only the final key answered A
    // `done` (dropped); the other answered A "processing" and B `done`.
    let k = sim_key(&env, final_key).await;
    assert_eq!((k.calls, k.done), (2, 2), "{k:?}");
    let k = sim_key(&env, partial_key).await;
    assert_eq!((k.calls, k.done), (2, 1), "exactly one done: {k:?}");
    env.redis.stop().await;
}

/// The fencing token of `complete` while the newer owner still holds its lease (the case the
/// test above cannot reach: there, B has finished and the task record is gone, so any write
/// of A finds nothing). Worker A (a real process, one slot) claims the task and calls an
/// upstream the test holds. Its lease runs out meanwhile (moved into the past in Redis time;
/// A's real lease of 10 min means it never renews within the test, so nothing but the write
/// can tell it the lease is lost). Worker B reaps, claims it with a newer token and calls
/// too, held as well. Only then does the upstream answer A `done`: A's completion meets a
/// task leased (to B) under another token, and must be refused (A's
/// `repoll_stale_tokens_total` 1). Then B is answered: B's result is the one stored, with one
/// `completed` in the history, B's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_completion_is_refused_while_the_new_owner_holds_the_lease() {
    let env = setup("wpfence", sim::SimArgs::default()).await;
    let mut upstream = HeldUpstream::start().await;
    let id = match env
        .queue
        .enqueue("fenced", "", &queue::EnqueuePolicy::default())
        .await
        .unwrap()
    {
        queue::Enqueued::Created(t) => t.id,
        other => panic!("expected a new task, got {other:?}"),
    };
    // Leases and call timeouts far beyond every hang guard: no renewal, no timeout, so the
    // only write A makes is its completion.
    let lease_ms = 600_000;
    let (url_a, url_b) = (upstream.url("a"), upstream.url("b"));
    let worker = |who: &str, url: &str| {
        let mut cmd = worker_command(&env, lease_ms, 1_000);
        cmd.env("REPOLL_UPSTREAM_URL", url)
            .env("REPOLL_UPSTREAM_TIMEOUT_MS", "600000")
            .env("REPOLL_CONCURRENCY", "1")
            .env("REPOLL_WORKER_ID", format!("fence-{who}"));
        cmd
    };
    let metrics_a = free_port();
    let mut a = ChildGuard::adopt(
        worker("a", &url_a)
            .env("REPOLL_METRICS_ADDR", format!("127.0.0.1:{metrics_a}"))
            .spawn()
            .expect("spawn worker A"),
    );
    assert_eq!(upstream.next_call().await, "a");
    let leased_by = |who: &'static str| {
        let q = env.queue.clone();
        let id = id.clone();
        async move {
            let t = q
                .get(&id)
                .await
                .unwrap()
                .and_then(|d| d.task)
                .expect("task");
            assert_eq!(
                (t.state, t.worker.as_deref()),
                (queue::TaskState::Leased, Some(who)),
                "{t:?}"
            );
            t.token
        }
    };
    let token_a = leased_by("fence-a").await;
    // Metrics up (the counter reads 0, not "no page"), before anything is refused.
    wait_for("A's metrics", Duration::from_secs(30), async || {
        counter(metrics_a, "repoll_stale_tokens_total{upstream=\"default\"}").await == Some(0.0)
    })
    .await;

    expire_lease(&env.queue, &id).await;
    let mut b = ChildGuard::adopt(worker("b", &url_b).spawn().expect("spawn worker B"));
    assert_eq!(upstream.next_call().await, "b");
    let token_b = leased_by("fence-b").await;
    assert!(
        token_b > token_a,
        "B's token {token_b} is newer than A's {token_a}"
    );

    // A hears `done` while B holds the lease: its completion is written, and must be
    // refused. Waited for: A's write, refused (stale token) or accepted (a completion).
    upstream.answer("a");
    let a_counter = async |name: &str| {
        counter(metrics_a, &format!("{name}{{upstream=\"default\"}}"))
            .await
            .unwrap_or(0.0)
    };
    wait_for(
        "A's completion to be written",
        Duration::from_secs(60),
        async || {
            a_counter("repoll_stale_tokens_total").await
                + a_counter("repoll_completions_total").await
                >= 1.0
        },
    )
    .await;
    let d = env.queue.get(&id).await.unwrap().expect("detail");
    assert!(d.result.is_none(), "A's answer was stored: {:?}", d.result);
    assert_eq!(
        (
            a_counter("repoll_stale_tokens_total").await,
            a_counter("repoll_completions_total").await
        ),
        (1.0, 0.0),
        "A's completion refused by the fencing token"
    );
    assert_eq!(leased_by("fence-b").await, token_b, "B's lease stands");

    // B is answered: its result is stored.
    upstream.answer("b");
    let q = env.queue.clone();
    wait_for("B's result", Duration::from_secs(60), async || {
        q.stats()
            .await
            .map(|s| s.results == 1 && s.leased == 0)
            .unwrap_or(false)
    })
    .await;
    terminate(a.child_mut());
    assert!(a.child_mut().wait().unwrap().success(), "worker A exits 0");
    terminate(b.child_mut());
    assert!(b.child_mut().wait().unwrap().success(), "worker B exits 0");

    let d = env.queue.get(&id).await.unwrap().expect("detail");
    assert!(d.task.is_none(), "no task record left: {:?}", d.task);
    let data: serde_json::Value = serde_json::from_str(&d.result.expect("result").data).unwrap();
    assert_eq!(data, serde_json::json!({"by": "b"}));
    let h: Vec<_> = d.history.iter().rev().collect();
    let kinds: Vec<_> = h.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "enqueued",
            "claimed",
            "lease_expired",
            "claimed",
            "completed"
        ],
        "{h:?}"
    );
    assert!(h[1].detail.contains("by fence-a"), "{h:?}");
    assert!(h[4].detail.contains("by fence-b"), "{h:?}");
    env.redis.stop().await;
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
        Command::new(env!("CARGO_BIN_EXE_repoll"))
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
