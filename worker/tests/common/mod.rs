//! Test helpers: a private redis-server per test binary, the simulator over real HTTP on
//! 127.0.0.1:0, and small wrappers to run workers and read the witnesses.
//!
//! The redis-server is the test kit's shared one (a free port, no persistence, stopped when
//! the test process exits). Tests share it and isolate themselves by queue name; a test that
//! reads server-wide state starts its own ([`PrivateRedis`]).
#![allow(dead_code)]

use std::time::{Duration, Instant};

use queue::{Queue, QueueConfig, Stats};
use sim::state::{KeyDetail, Stats as SimStats};
use sim::SimArgs;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use worker::{PolicyArgs, Upstream, UpstreamArgs, Worker, WorkerArgs, WorkerReport};

/// The redis-server shared by this test binary (the test kit's); its URL.
pub fn redis_url() -> String {
    testkit::redis::shared().url()
}

/// A redis-server of one test's own, for a test that reads server-wide state (`CLIENT LIST`)
/// which the other tests of the binary would blur. Killed when dropped.
pub struct PrivateRedis {
    pub port: u16,
    server: testkit::RedisServer,
}

impl PrivateRedis {
    pub fn start() -> PrivateRedis {
        let server = testkit::RedisServer::start();
        PrivateRedis {
            port: server.port,
            server,
        }
    }

    pub fn url(&self) -> String {
        self.server.url()
    }

    /// A full-history queue (as [`queue`]) on this server.
    pub async fn queue(&self, cfg: QueueConfig) -> Queue {
        Queue::connect(
            &self.url(),
            QueueConfig {
                history: queue::HistoryLevel::Full,
                ..cfg
            },
        )
        .await
        .expect("queue")
    }

    /// A worker (as [`worker`]) whose wake-up connections go to this server.
    pub fn worker(
        &self,
        queue: &Queue,
        up: &UpstreamArgs,
        policy: PolicyArgs,
        args: WorkerArgs,
    ) -> Worker {
        let pubsub = redis::Client::open(self.url()).expect("redis client");
        let upstream = Upstream::new(up).expect("upstream");
        Worker::new(queue.clone(), pubsub, upstream, policy, args)
    }

    /// How many clients are blocked in a `BLPOP` now (`CLIENT LIST`: `cmd=blpop`, flag `b`),
    /// and the list itself for a failure message.
    pub async fn blocked_blpops(&self) -> (usize, String) {
        let mut c = redis::Client::open(self.url())
            .expect("redis client")
            .get_multiplexed_async_connection()
            .await
            .expect("redis connection");
        let clients: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query_async(&mut c)
            .await
            .expect("CLIENT LIST");
        (count_blocked_blpops(&clients), clients)
    }

    /// Waits until exactly `n` clients are blocked in a `BLPOP` (panics after `limit`).
    pub async fn wait_blocked_blpops(&self, n: usize, limit: Duration) {
        let t0 = Instant::now();
        loop {
            let (blocked, clients) = self.blocked_blpops().await;
            if blocked == n {
                return;
            }
            assert!(
                t0.elapsed() < limit,
                "{blocked} clients blocked in BLPOP after {limit:?}, {n} expected:\n{clients}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_test_writer()
        .try_init();
}

/// A running simulator; stops when dropped.
pub struct SimServer {
    pub base: String,
    stop: Option<oneshot::Sender<()>>,
}

impl Drop for SimServer {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

pub async fn start_sim(args: SimArgs) -> SimServer {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind sim");
    let addr = listener.local_addr().expect("sim addr");
    let (tx, rx) = oneshot::channel::<()>();
    tokio::spawn(sim::serve(listener, args, async move {
        let _ = rx.await;
    }));
    SimServer {
        base: format!("http://{addr}"),
        stop: Some(tx),
    }
}

impl SimServer {
    pub fn upstream_args(&self, timeout_ms: u64) -> UpstreamArgs {
        UpstreamArgs {
            url: format!("{}/api/query?q={{key}}", self.base),
            timeout_ms,
            ..UpstreamArgs::default()
        }
    }

    pub async fn stats(&self) -> SimStats {
        reqwest::get(format!("{}/_sim/stats", self.base))
            .await
            .expect("sim stats")
            .json()
            .await
            .expect("sim stats json")
    }

    pub async fn key(&self, key: &str) -> KeyDetail {
        reqwest::Client::new()
            .get(format!("{}/_sim/key", self.base))
            .query(&[("q", key)])
            .send()
            .await
            .expect("sim key")
            .json()
            .await
            .expect("sim key json")
    }
}

/// A queue at the `full` history level: these tests read the worker's every step (each claim
/// and poll) from the task history, which the default level does not list.
pub async fn queue(name: &str) -> Queue {
    let cfg = QueueConfig {
        name: name.to_string(),
        history: queue::HistoryLevel::Full,
        ..QueueConfig::default()
    };
    Queue::connect(&redis_url(), cfg).await.expect("queue")
}

/// A worker on `queue` polling `sim`.
pub fn worker(queue: &Queue, up: &UpstreamArgs, policy: PolicyArgs, args: WorkerArgs) -> Worker {
    let pubsub = redis::Client::open(redis_url()).expect("redis client");
    let upstream = Upstream::new(up).expect("upstream");
    Worker::new(queue.clone(), pubsub, upstream, policy, args)
}

/// A worker running in its own task; `stop` asks it to shut down gracefully.
pub struct Running {
    stop: Option<oneshot::Sender<()>>,
    pub handle: JoinHandle<Result<WorkerReport, worker::WorkerError>>,
}

pub fn spawn(w: Worker) -> Running {
    let (tx, rx) = oneshot::channel::<()>();
    let handle = tokio::spawn(w.run(async move {
        let _ = rx.await;
    }));
    Running {
        stop: Some(tx),
        handle,
    }
}

impl Running {
    pub async fn stop(mut self) -> WorkerReport {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        self.handle.await.expect("worker task").expect("worker run")
    }
}

/// Fast policies for tests.
pub fn fast_policy() -> PolicyArgs {
    PolicyArgs {
        poll_interval_ms: 20,
        poll_multiplier: 1.5,
        poll_max_interval_ms: 200,
        poll_jitter: 0.1,
        max_polls: 10,
        deadline_ms: 0,
        max_attempts: 5,
        backoff_base_ms: 20,
        backoff_max_ms: 200,
    }
}

pub fn fast_worker_args(concurrency: usize) -> WorkerArgs {
    WorkerArgs {
        concurrency,
        lease_ms: 2_000,
        grace_ms: 1_000,
        heartbeat_ms: 500,
        worker_id: None,
        reap_interval_ms: 200,
        reap_batch: 100,
        stats_interval_ms: 500,
        max_idle_ms: 1_000,
    }
}

/// Waits until nothing is due, waiting or leased and `n` tasks are done or dead.
pub async fn wait_settled(q: &Queue, n: u64, limit: Duration) -> Stats {
    let t0 = Instant::now();
    loop {
        let s = q.stats().await.expect("stats");
        let open = s.ready + s.waiting + s.retrying + s.leased;
        if open == 0 && s.results + s.dead >= n {
            return s;
        }
        assert!(t0.elapsed() < limit, "not settled after {limit:?}: {s:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn id_of(query: &str) -> queue::TaskId {
    queue::TaskId::of_query(&queue::normalise_query(query).expect("valid query"))
}

/// Serves `app` (an upstream made for one test) on a free port of 127.0.0.1; its base URL.
pub async fn serve_upstream(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind upstream");
    let addr = listener.local_addr().expect("upstream addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

/// How many clients of a `CLIENT LIST` answer are blocked in a `BLPOP` (`cmd=blpop`, flag
/// `b`): workers asleep on their wake-up lists.
pub fn count_blocked_blpops(client_list: &str) -> usize {
    client_list
        .lines()
        .filter(|l| {
            let field = |name: &str| {
                l.split_whitespace()
                    .find_map(|f| f.strip_prefix(name))
                    .unwrap_or_default()
            };
            field("cmd=") == "blpop" && field("flags=").contains('b')
        })
        .count()
}
