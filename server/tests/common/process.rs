//! The process tests' helpers (process.rs, process_startup.rs, process_features.rs): the
//! `repoll` commands they start, a redis-server of the test kit on a chosen port, and HTTP
//! through the kit's reqwest client (raw sockets only where a test watches the connection
//! itself: a live stream, its close after SIGTERM).
#![allow(dead_code)] // each test binary uses a different subset

use std::{
    process::{Command, Stdio},
    time::Duration,
};

use testkit::http::{Answer, BlockingHttp};
use testkit::{ChildGuard, RedisOptions, RedisServer};

/// The `repoll` binary cargo built for these tests, as a command to add a subcommand and
/// settings to: every test starts it here, and nothing of the shell the tests run in reaches
/// it — a developer's `REPOLL_*`, `REDIS_*` or `OTEL_*` variable would change what a test
/// checks, so each is removed (a test sets what it means with `.env`).
pub fn repoll() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_repoll"));
    for (name, _) in std::env::vars_os() {
        let own = name.to_str().is_some_and(|n| {
            ["REPOLL_", "REDIS_", "OTEL_"]
                .iter()
                .any(|p| n.starts_with(p))
        });
        if own {
            cmd.env_remove(name);
        }
    }
    cmd
}

/// Whether `GET /readyz` on `port` answered 200 within `limit`.
pub fn wait_ready(port: u16, limit: Duration) -> bool {
    BlockingHttp::local(port).wait_ok("/readyz", limit)
}

/// `GET path` on `port`: the answer, or the transport error (nothing listening yet).
pub fn http_get(port: u16, path: &str) -> reqwest::Result<Answer> {
    let http = BlockingHttp::local(port);
    http.try_send(http.client.get(http.url(path)))
}

/// `repoll serve` on `web_port` with a managed redis-server on `redis_port` keeping its data
/// in `dir` (never a `REDIS_URL` from the environment).
pub fn serve_managed_command(web_port: u16, redis_port: u16, dir: &std::path::Path) -> Command {
    let mut cmd = repoll();
    cmd.arg("serve")
        .env_remove("REDIS_URL")
        .env("REPOLL_ADDR", format!("127.0.0.1:{web_port}"))
        .env("REPOLL_MANAGED_REDIS_PORT", redis_port.to_string())
        .env("REPOLL_MANAGED_REDIS_DIR", dir);
    cmd
}

/// Submits `query` to `POST /api/v1/queries`; its task id.
pub fn submit_query(web_port: u16, query: &str) -> String {
    let answer = BlockingHttp::local(web_port)
        .post_json("/api/v1/queries", &serde_json::json!({ "query": query }));
    id_in(&answer)
}

/// The task id of an answer to `POST /api/v1/queries` (panics with the answer if none).
pub fn id_in(answer: &Answer) -> String {
    answer.json()["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no id in {answer:?}"))
        .to_string()
}

/// One request on its own connection; the connection, after the request is written.
pub fn send(port: u16, request: &str) -> std::net::TcpStream {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    s
}

/// Reads until `needle` has arrived (panics if the connection ends first); all read so far.
pub fn read_until(s: &mut std::net::TcpStream, needle: &str) -> String {
    use std::io::Read;
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains(needle) {
        let n = s.read(&mut buf).expect("read (30 s hang guard)");
        assert!(
            n > 0,
            "ended before {needle:?}: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&seen).into_owned()
}

/// Runs `cmd` to its end, killing it after `limit` (a hang guard: the caller's point is that
/// it ends well before). Its output is read while it runs, so a long one cannot fill a pipe
/// and hold the child.
pub fn output_within(mut cmd: Command, limit: Duration) -> std::process::Output {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run repoll");
    let pid = child.id() as libc::pid_t;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.expect("output"),
        Err(_) => {
            // SAFETY: kill(2) on our own child's pid; nothing else is touched.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("still running after {limit:?}");
        }
    }
}

/// A plain `redis-server` (the test kit's: no persistence) on `port` exactly, with `args`
/// added, once it answers; killed when dropped.
pub fn spawn_redis(port: u16, args: &[&str]) -> RedisServer {
    let opts = RedisOptions {
        extra: args.iter().map(|a| a.to_string()).collect(),
        ..RedisOptions::default()
    };
    // The readiness check authenticates with the password the test gave.
    let opts = match args.iter().position(|a| *a == "--requirepass") {
        Some(i) => {
            let mut extra = opts.extra.clone();
            let pair: Vec<String> = extra.drain(i..i + 2).collect();
            RedisOptions {
                password: Some(pair[1].clone()),
                extra,
                ..opts
            }
        }
        None => opts,
    };
    RedisServer::start_on(port, opts).unwrap_or_else(|e| panic!("{e}"))
}

/// The test's `repoll` processes (the kit's guards), killed however the test ends.
#[derive(Default)]
pub struct Reaped(pub Vec<ChildGuard>);

impl Reaped {
    /// Starts `cmd` (a `repoll serve` on `web_port`), kept until the test ends, and waits
    /// for its readiness probe: the one start every process test of a serve goes through.
    pub fn serve(&mut self, cmd: Command, web_port: u16) {
        self.0
            .push(ChildGuard::spawn(cmd).expect("spawn repoll serve"));
        assert!(
            wait_ready(web_port, Duration::from_secs(30)),
            "repoll serve not ready on {web_port}"
        );
    }
}

/// `repoll serve` on `REDIS_URL` = `url`, web only, listening on `web_port`; the admin
/// password is left to the caller (none configured here).
pub fn serve_command(url: &str, web_port: u16) -> Command {
    let mut cmd = repoll();
    cmd.arg("serve")
        .env("REDIS_URL", url)
        .env("REPOLL_ADDR", format!("127.0.0.1:{web_port}"))
        .env("REPOLL_WORKERS", "0")
        .env("RUST_LOG", "warn");
    cmd
}

/// The simulated upstream, in the process, as a `repoll` command's one upstream: what
/// `repoll serve --sim` does, on the test's own free `sim_port`.
pub trait WithSim {
    fn with_sim(&mut self, sim_port: u16) -> &mut Self;
}

impl WithSim for Command {
    fn with_sim(&mut self, sim_port: u16) -> &mut Self {
        self.env("REPOLL_SIM", "true")
            .env("REPOLL_SIM_ADDR", format!("127.0.0.1:{sim_port}"))
            .env(
                "REPOLL_UPSTREAM_URL",
                format!("http://127.0.0.1:{sim_port}/api/query?q={{key}}"),
            )
    }
}
