//! One redis-server spawner for every test and the chaos tool.
//!
//! A server listens on 127.0.0.1 on a free port (tried again with another only when the
//! server says "Address already in use": another process took the port between our choice
//! and its bind), in a directory of its own, with no RDB snapshots (`--save ""`), its output
//! in `redis.log` there. It is ready once it answers PING (after authenticating when a
//! password or an ACL user is set; after replaying its AOF on a restart). Any other failure is
//! an error carrying the log: tests panic with it and are never skipped.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::child::ChildGuard;

/// How the server is started. `Default` is a plain server: no persistence, log level
/// `warning`.
#[derive(Clone, Debug)]
pub struct RedisOptions {
    /// Append-only file with this `appendfsync` policy (`always`, `everysec`, `no`); none when
    /// `None` (`--appendonly no`).
    pub appendfsync: Option<String>,
    /// `requirepass`: the default user needs this password.
    pub password: Option<String>,
    /// An ACL user, as `(name, password, rules)` (rules such as `~{q}* &* +@all`); readiness is
    /// checked as this user.
    pub acl_user: Option<(String, String, String)>,
    /// `--loglevel`; `None` keeps Redis's default (`notice`).
    pub loglevel: Option<String>,
    /// Any other `redis-server` arguments, as separate words (`--cluster-enabled`, `yes`, …).
    pub extra: Vec<String>,
    /// How long a start (or a restart replaying an AOF) may take before it is an error.
    pub ready_within: Duration,
    /// The data directory, kept when the server is dropped; a fresh temp dir (removed on drop)
    /// when `None`.
    pub dir: Option<PathBuf>,
    /// Where the server's output is appended; `redis.log` in its directory when `None`.
    pub log_file: Option<PathBuf>,
}

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions {
            appendfsync: None,
            password: None,
            acl_user: None,
            loglevel: Some("warning".into()),
            extra: Vec::new(),
            ready_within: Duration::from_secs(10),
            dir: None,
            log_file: None,
        }
    }
}

impl RedisOptions {
    /// A free port for a server with these options: a cluster node's must be at most 55535
    /// with its bus port (10000 above) free too — Redis refuses a higher one, and the kernel
    /// hands out free ports up to 60999.
    fn free_port(&self) -> u16 {
        if self.extra.iter().any(|a| a == "--cluster-enabled") {
            crate::free_cluster_port()
        } else {
            crate::free_port()
        }
    }

    /// Extra arguments split on whitespace (`"--cluster-enabled yes"`).
    pub fn with_args(mut self, args: &str) -> Self {
        self.extra
            .extend(args.split_whitespace().map(str::to_string));
        self
    }

    /// Append-only with `appendfsync` = `policy`.
    pub fn aof(mut self, policy: &str) -> Self {
        self.appendfsync = Some(policy.into());
        self
    }

    pub fn password(mut self, password: &str) -> Self {
        self.password = Some(password.into());
        self
    }

    pub fn acl_user(mut self, name: &str, password: &str, rules: &str) -> Self {
        self.acl_user = Some((name.into(), password.into(), rules.into()));
        self
    }

    /// The `redis-server` arguments for `port` and `dir`.
    fn args(&self, port: u16, dir: &Path) -> Vec<String> {
        let mut a: Vec<String> = [
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--daemonize",
            "no",
            "--save",
            "",
            "--dir",
            &dir.to_string_lossy(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        match &self.appendfsync {
            Some(policy) => {
                a.extend(["--appendonly", "yes", "--appendfsync", policy].map(String::from))
            }
            None => a.extend(["--appendonly", "no"].map(String::from)),
        }
        if let Some(level) = &self.loglevel {
            a.extend(["--loglevel".to_string(), level.clone()]);
        }
        if let Some(pw) = &self.password {
            a.extend(["--requirepass".to_string(), pw.clone()]);
        }
        if let Some((name, pw, rules)) = &self.acl_user {
            a.extend([
                "--user".to_string(),
                name.clone(),
                "on".into(),
                format!(">{pw}"),
            ]);
            a.extend(rules.split_whitespace().map(str::to_string));
        }
        a.extend(self.extra.iter().cloned());
        a
    }

    /// The `AUTH` a readiness check sends, if any (the ACL user wins over the password).
    fn auth(&self) -> Option<(Option<&str>, &str)> {
        match (&self.acl_user, &self.password) {
            (Some((name, pw, _)), _) => Some((Some(name), pw)),
            (None, Some(pw)) => Some((None, pw)),
            (None, None) => None,
        }
    }
}

/// A running redis-server of its own, killed (with its process group) and its directory
/// removed when dropped.
pub struct RedisServer {
    pub port: u16,
    pub dir: PathBuf,
    pub opts: RedisOptions,
    proc: Option<ChildGuard>,
    /// Whether the directory is ours to remove (not when the caller gave it).
    owns_dir: bool,
}

/// Tries of a free port before giving up (each failed only by "Address already in use").
const PORT_TRIES: usize = 5;

impl RedisServer {
    /// A plain server (see [`RedisOptions::default`]); panics with the log if it cannot start.
    pub fn start() -> RedisServer {
        Self::start_with(RedisOptions::default()).unwrap_or_else(|e| panic!("{e}"))
    }

    /// A server with `opts` on a free port, in a fresh temp dir.
    pub fn start_with(opts: RedisOptions) -> Result<RedisServer, String> {
        let mut last = String::new();
        for _ in 0..PORT_TRIES {
            let mut r = Self::unstarted(opts.free_port(), opts.clone());
            match r.launch_blocking() {
                Ok(()) => return Ok(r),
                Err(Launch::PortTaken(log)) => last = log,
                Err(Launch::Failed(e)) => return Err(e),
            }
        }
        Err(format!(
            "redis-server found no free port in {PORT_TRIES} tries:\n{last}"
        ))
    }

    /// As [`start_with`](Self::start_with), waiting without blocking the async runtime (the
    /// chaos tool's workers keep running meanwhile).
    pub async fn start_async(opts: RedisOptions) -> Result<RedisServer, String> {
        let mut last = String::new();
        for _ in 0..PORT_TRIES {
            let mut r = Self::unstarted(opts.free_port(), opts.clone());
            match r.launch().await {
                Ok(()) => return Ok(r),
                Err(Launch::PortTaken(log)) => last = log,
                Err(Launch::Failed(e)) => return Err(e),
            }
        }
        Err(format!(
            "redis-server found no free port in {PORT_TRIES} tries:\n{last}"
        ))
    }

    /// A server on `port` exactly (a test that told another process the port before the
    /// server exists). No retry: a taken port is an error.
    pub fn start_on(port: u16, opts: RedisOptions) -> Result<RedisServer, String> {
        let mut r = Self::unstarted(port, opts);
        r.launch_blocking().map_err(Launch::into_message)?;
        Ok(r)
    }

    fn unstarted(port: u16, opts: RedisOptions) -> RedisServer {
        let (dir, owns_dir) = match &opts.dir {
            Some(d) => (d.clone(), false),
            None => (crate::fresh_dir("redis"), true),
        };
        RedisServer {
            port,
            dir,
            opts,
            proc: None,
            owns_dir,
        }
    }

    /// `redis://127.0.0.1:<port>/` (with the password or the ACL user when set).
    pub fn url(&self) -> String {
        match self.opts.auth() {
            Some((Some(user), pw)) => format!("redis://{user}:{pw}@127.0.0.1:{}/", self.port),
            Some((None, pw)) => format!("redis://:{pw}@127.0.0.1:{}/", self.port),
            None => format!("redis://127.0.0.1:{}/", self.port),
        }
    }

    pub fn log_path(&self) -> PathBuf {
        self.opts
            .log_file
            .clone()
            .unwrap_or_else(|| self.dir.join("redis.log"))
    }

    /// The server's log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// The pid of the server (also its process group), if it runs.
    pub fn pid(&self) -> Option<u32> {
        self.proc.as_ref().map(ChildGuard::id)
    }

    fn spawn_process(&mut self) -> Result<(), String> {
        let log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(self.log_path())
            .map_err(|e| format!("redis log {}: {e}", self.log_path().display()))?;
        let err = log.try_clone().map_err(|e| e.to_string())?;
        let mut cmd = Command::new("redis-server");
        cmd.args(self.opts.args(self.port, &self.dir))
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err);
        let guard = ChildGuard::spawn_group(cmd)
            .map_err(|e| format!("redis-server did not start (package redis-server): {e}"))?;
        self.proc = Some(guard);
        Ok(())
    }

    /// One check of the starting server: ready, still starting, or failed.
    fn check(&mut self, started: Instant) -> Result<bool, Launch> {
        let ours = self.pid();
        if ours.is_some() && answering_pid(self.port, self.opts.auth()) == ours {
            return Ok(true);
        }
        if let Some(status) = self.proc.as_mut().and_then(ChildGuard::exited) {
            self.proc = None;
            let log = self.log();
            if log.contains("Address already in use") {
                return Err(Launch::PortTaken(log));
            }
            return Err(Launch::Failed(format!(
                "redis-server on :{} exited ({status}):\n{log}",
                self.port
            )));
        }
        if started.elapsed() > self.opts.ready_within {
            if let Some(mut p) = self.proc.take() {
                p.kill();
            }
            return Err(Launch::Failed(format!(
                "redis-server on :{} did not answer PING within {:?}:\n{}",
                self.port,
                self.opts.ready_within,
                self.log()
            )));
        }
        Ok(false)
    }

    fn launch_blocking(&mut self) -> Result<(), Launch> {
        self.spawn_process().map_err(Launch::Failed)?;
        let t0 = Instant::now();
        while !self.check(t0)? {
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    async fn launch(&mut self) -> Result<(), Launch> {
        self.spawn_process().map_err(Launch::Failed)?;
        let t0 = Instant::now();
        // The PING itself is a blocking local round trip of well under a millisecond (500 ms
        // at worst, against a stopped server), which the runtime can afford.
        while !self.check(t0)? {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// SIGKILL (no shutdown save or fsync) and reap; the data directory stays.
    pub fn kill(&mut self) {
        if let Some(mut p) = self.proc.take() {
            p.kill();
        }
    }

    /// Starts the same command again on the same port and directory (an AOF is replayed)
    /// and waits until it answers.
    pub fn restart(&mut self) -> Result<(), String> {
        self.kill();
        self.launch_blocking().map_err(Launch::into_message)
    }

    /// As [`restart`](Self::restart), waiting without blocking the async runtime.
    pub async fn restart_async(&mut self) -> Result<(), String> {
        self.kill();
        self.launch().await.map_err(Launch::into_message)
    }

    /// Sends `sig` (SIGSTOP, SIGCONT, …) to the server.
    pub fn signal(&self, sig: i32) {
        if let Some(p) = &self.proc {
            p.signal(sig);
        }
    }

    /// SIGSTOP for `d`, then SIGCONT: connections stay open, every command just waits.
    pub async fn stall(&self, d: Duration) {
        self.signal(libc::SIGSTOP);
        tokio::time::sleep(d).await;
        self.signal(libc::SIGCONT);
    }

    /// A multiplexed connection (as [`url`](Self::url)).
    pub async fn connection(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url())
            .expect("redis client")
            .get_multiplexed_async_connection()
            .await
            .unwrap_or_else(|e| panic!("connect to redis on :{}: {e}\n{}", self.port, self.log()))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        if self.owns_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Why a launch did not come up.
enum Launch {
    /// The port was taken (the log says so): try another one.
    PortTaken(String),
    Failed(String),
}

impl Launch {
    fn into_message(self) -> String {
        match self {
            Launch::PortTaken(log) => format!("redis-server: address already in use:\n{log}"),
            Launch::Failed(e) => e,
        }
    }
}

/// The pid of the redis-server answering on `port`, once it answers PING with PONG
/// (authenticated with `auth` first; a server still replaying its AOF says LOADING). The pid
/// tells our server from another process that took the port first.
fn answering_pid(port: u16, auth: Option<(Option<&str>, &str)>) -> Option<u32> {
    use std::io::BufRead;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
    let mut request = Vec::new();
    if let Some((user, pw)) = auth {
        let words: Vec<&str> = ["AUTH"].into_iter().chain(user).chain([pw]).collect();
        request.extend(format!("*{}\r\n", words.len()).bytes());
        for w in words {
            request.extend(format!("${}\r\n{w}\r\n", w.len()).bytes());
        }
    }
    request.extend(b"PING\r\nINFO server\r\n");
    s.write_all(&request).ok()?;
    let mut r = std::io::BufReader::new(s);
    let mut line = String::new();
    if auth.is_some() {
        r.read_line(&mut line).ok()?;
        (line == "+OK\r\n").then_some(())?;
        line.clear();
    }
    r.read_line(&mut line).ok()?;
    (line == "+PONG\r\n").then_some(())?;
    line.clear();
    r.read_line(&mut line).ok()?;
    let len: usize = line.strip_prefix('$')?.trim().parse().ok()?;
    let mut info = vec![0u8; len];
    r.read_exact(&mut info).ok()?;
    String::from_utf8_lossy(&info)
        .lines()
        .find_map(|l| l.strip_prefix("process_id:"))?
        .trim()
        .parse()
        .ok()
}

/// The redis-server shared by every test of this process (started on first use; it stops
/// when the process exits). Tests isolate themselves by key names (a queue name each).
pub fn shared() -> &'static RedisServer {
    static SHARED: OnceLock<RedisServer> = OnceLock::new();
    SHARED.get_or_init(|| {
        let server = RedisServer::start();
        // A static is never dropped, so nothing else would remove the directory; a server
        // without persistence writes nothing there after its start (its log file stays open).
        let _ = std::fs::remove_dir_all(&server.dir);
        server
    })
}
