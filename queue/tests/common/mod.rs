//! Test helper: one private redis-server per test binary (never the shared one on 6379).
//! It listens on a free port with no persistence, in a temp dir, and a small shell watchdog
//! kills it when the test process exits. Tests share it and isolate themselves by using a
//! distinct queue name (the `{name}` hash tag prefixes every key).
#![allow(dead_code)]

use queue::{Queue, QueueConfig};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub struct Server {
    pub port: u16,
}

impl Server {
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}

static SERVER: OnceLock<Server> = OnceLock::new();

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free port")
}

fn ping(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    if s.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 7];
    s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
}

/// Starts a redis-server that lives exactly as long as this process. Public so the benchmark
/// example can reuse the same recipe.
// The watchdog shell is deliberately never waited for: it outlives every test and ends (with
// its redis-server) when this process exits, which is the point.
#[allow(clippy::zombie_processes)]
pub fn spawn_redis() -> Server {
    for _ in 0..5 {
        let port = free_port();
        let dir =
            std::env::temp_dir().join(format!("repoll-queue-test-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let me = std::process::id();
        let script = format!(
            "redis-server --port {port} --bind 127.0.0.1 --save '' --appendonly no --dir '{dir}' \
             --loglevel warning & R=$!; \
             while kill -0 {me} 2>/dev/null && kill -0 $R 2>/dev/null; do sleep 0.2; done; \
             kill $R 2>/dev/null; wait $R; rm -rf '{dir}'",
            dir = dir.display()
        );
        Command::new("sh")
            .arg("-c")
            .arg(script)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server (is it installed?)");
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(5) {
            if ping(port) {
                return Server { port };
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    panic!("redis-server did not start");
}

pub fn server() -> &'static Server {
    SERVER.get_or_init(spawn_redis)
}

pub fn cfg(name: &str) -> QueueConfig {
    QueueConfig {
        name: name.to_string(),
        ..QueueConfig::default()
    }
}

pub async fn queue(name: &str) -> Queue {
    queue_with(cfg(name)).await
}

pub async fn queue_with(cfg: QueueConfig) -> Queue {
    Queue::connect(&server().url(), cfg).await.expect("connect")
}

/// A raw connection for inspecting keys directly.
pub async fn raw() -> redis::aio::MultiplexedConnection {
    redis::Client::open(server().url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Every key (and its type+content digest) of one queue: used to prove "nothing written".
pub async fn snapshot(name: &str) -> Vec<(String, String)> {
    let mut c = raw().await;
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{{{name}}}*"))
        .query_async(&mut c)
        .await
        .unwrap();
    keys.sort();
    let mut out = Vec::new();
    for k in keys {
        let dump: Option<Vec<u8>> = redis::cmd("DUMP")
            .arg(&k)
            .query_async(&mut c)
            .await
            .unwrap();
        let ttl: i64 = redis::cmd("PTTL")
            .arg(&k)
            .query_async(&mut c)
            .await
            .unwrap();
        out.push((k, format!("{:?} ttl>0:{}", dump, ttl > 0)));
    }
    out
}

pub async fn sleep_ms(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}
