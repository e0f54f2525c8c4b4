//! A local `redis-server` owned by this process, for when no `REDIS_URL` is configured.
//!
//! Why: the demo (`scripts/run`) and a single-host deployment should work with nothing but
//! the binary and a `redis-server` on PATH. The child keeps an append-only file under the
//! data directory, so queued tasks and results survive a restart of `repoll serve`. It is
//! started before anything touches Redis and stopped (with `SHUTDOWN`, which fsyncs the AOF)
//! after everything else has drained; `kill_on_drop` covers early returns and panics.
//!
//! Because it is reachable by every local user on 127.0.0.1, and holds the admin sessions,
//! it is hardened (security review, issue 9):
//!
//! - **Password.** A random one (OS RNG) unless given. It is written only into
//!   `<dir>/redis.conf` (mode 0600) and the child is started as `redis-server <that file>`:
//!   a command line is readable by every local user (`ps`, `/proc/<pid>/cmdline`). Logs and
//!   `Debug` show [`ManagedRedis::redacted_url`] only.
//! - **Lock.** An exclusive `flock` on `<dir>/repoll.lock`, so two servers never append to
//!   one AOF. The child inherits the locked file description, so the lock lives as long as
//!   the parent *or* any child it started; and a `redis-server` already running in the
//!   directory (an orphan of an older repoll, which took no lock) is refused too.
//! - **No orphan.** The child gets `PR_SET_PDEATHSIG(SIGTERM)` (Linux), so it shuts down
//!   (fsyncing the AOF) when repoll dies, even by `abort` or `kill -9`. It also runs in its
//!   own process group, so a terminal's Ctrl-C reaches repoll only, which then drains and
//!   stops Redis last, as [`crate::serve`] intends.
//! - **Supervised.** A child that dies (crash, `kill -9`, OOM killer) is restarted with
//!   capped exponential backoff on the same port, directory and password, so the app's
//!   connection managers reconnect by themselves; `/readyz` (which PINGs) is 503 meanwhile.

use std::{
    fs::File,
    io::Write,
    os::unix::{
        ffi::OsStrExt,
        fs::{DirBuilderExt, OpenOptionsExt},
        io::{AsRawFd, RawFd},
    },
    path::{Path, PathBuf},
    process::Stdio,
    sync::{
        atomic::{AtomicU32, AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use tokio::{
    process::{Child, Command},
    task::JoinHandle,
};
use tokio_util::sync::{CancellationToken, DropGuard};

use backon::{BackoffBuilder, ExponentialBuilder};

/// The data directory's lock file (held for the life of the [`ManagedRedis`] and its child).
pub const LOCK_FILE: &str = "repoll.lock";
/// The child's configuration file (mode 0600: it holds the password).
pub const CONFIG_FILE: &str = "redis.conf";
/// Prometheus counter of restarts of the managed Redis after it died.
pub const RESTARTS_METRIC: &str = "repoll_managed_redis_restarts_total";

/// First wait before restarting a dead child; doubled for each quick death.
const BACKOFF_MIN: Duration = Duration::from_millis(100);
/// Longest wait between restarts: a crash loop costs little, and a recovered cause (memory
/// freed, disk space back) is noticed within this time.
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// A child that ran this long was healthy; its death starts the backoff from the minimum again.
const STABLE_AFTER: Duration = Duration::from_secs(30);
/// How long a start waits for a held lock: after repoll was killed its child gets SIGTERM and
/// releases the lock once its AOF is flushed, which a restart (systemd, a person) should not
/// trip over. A second live server still holds it after this and is refused.
const LOCK_WAIT: Duration = Duration::from_secs(2);

/// Why the managed Redis could not be started.
#[derive(Debug, thiserror::Error)]
pub enum ManagedRedisError {
    #[error(
        "`{bin}` was not found on PATH, and REDIS_URL is not set. Install Redis \
         (Debian/Ubuntu: `sudo apt-get install -y redis-server`; macOS: `brew install redis`), \
         or point repoll at an existing server with REDIS_URL=redis://host:6379"
    )]
    NotInstalled { bin: String },
    #[error("cannot prepare the managed Redis data directory {dir}: {source}")]
    DataDir { dir: String, source: std::io::Error },
    #[error(
        "another repoll serve is using the managed Redis data directory {dir} (it holds \
         {dir}/{LOCK_FILE}); stop it, or give this one its own --managed-redis-dir"
    )]
    Locked { dir: String },
    #[error(
        "a redis-server (pid {pid}) is already running in the managed Redis data directory \
         {dir}, probably left over from a repoll serve that crashed; stop it (kill {pid}) \
         before starting repoll serve again"
    )]
    InUse { dir: String, pid: u32 },
    #[error("cannot start `{bin}`: {source}")]
    Spawn { bin: String, source: std::io::Error },
    #[error("no free TCP port for the managed Redis: {0}")]
    Port(std::io::Error),
    #[error("the managed Redis exited during start-up ({status}); its log is {log}")]
    Exited { status: String, log: String },
    #[error("the managed Redis did not answer PING within {0:?}; its log is {1}")]
    NotReady(Duration, String),
}

/// A running, supervised child `redis-server`.
pub struct ManagedRedis {
    /// With the password: what callers connect with. Never logged.
    url: String,
    redacted: String,
    log: PathBuf,
    state: Arc<State>,
    stop: CancellationToken,
    /// Ends the supervisor (which then drops, and so kills, the child) when a `ManagedRedis`
    /// is dropped without [`ManagedRedis::stop`].
    _stop_on_drop: DropGuard,
    /// Returns the current child (none if it was between restarts) once `stop` is cancelled.
    supervisor: JoinHandle<Option<Child>>,
    /// The data directory's lock; released at the end of `stop` (or on drop).
    lock: Arc<File>,
}

/// What the supervisor shares with its owner.
#[derive(Default)]
struct State {
    restarts: AtomicU64,
    /// The running child's pid; 0 while there is none.
    pid: AtomicU32,
}

impl std::fmt::Debug for ManagedRedis {
    /// The password never reaches a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManagedRedis")
            .field("url", &self.redacted)
            .field("log", &self.log)
            .field("pid", &self.pid())
            .field("restarts", &self.restarts())
            .finish()
    }
}

/// How to (re)start the child; owned by the supervisor.
struct Spawner {
    bin: PathBuf,
    config: PathBuf,
    lock_fd: RawFd,
}

impl Spawner {
    fn spawn(&self) -> Result<Child, ManagedRedisError> {
        let bin_name = self.bin.display().to_string();
        let mut cmd = Command::new(&self.bin);
        // Only the config file's path is on the command line, never the password.
        cmd.arg(&self.config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            // Ctrl-C in a terminal signals the foreground process group; repoll must get it
            // alone so that it drains first and stops Redis last.
            .process_group(0);
        let lock_fd = self.lock_fd;
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: between fork and exec only async-signal-safe calls (fcntl, prctl, getppid)
        // are made, and nothing is allocated (errors are raw OS errors).
        unsafe {
            cmd.pre_exec(move || {
                // Keep the locked file description open in redis-server: the directory stays
                // locked while an orphan (if ever) still appends to its AOF.
                if libc::fcntl(lock_fd, libc::F_SETFD, 0) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                parent_death_signal(parent)
            });
        }
        cmd.spawn().map_err(|source| {
            if source.kind() == std::io::ErrorKind::NotFound {
                ManagedRedisError::NotInstalled { bin: bin_name }
            } else {
                ManagedRedisError::Spawn {
                    bin: bin_name,
                    source,
                }
            }
        })
    }
}

/// In the forked child: SIGTERM when the parent dies, so redis-server shuts down (flushing
/// its AOF) instead of living on as an orphan that a restarted repoll would race on the same
/// files. Linux delivers it when the *thread* that forked exits: `tokio::process` spawns on
/// the calling thread, which for `repoll serve` is a runtime worker thread (alive as long as
/// the runtime) and never a `spawn_blocking` thread (which exits when idle). The restarts
/// happen on the supervisor task, also on a worker thread.
#[cfg(target_os = "linux")]
fn parent_death_signal(parent: libc::pid_t) -> std::io::Result<()> {
    // SAFETY: plain syscalls on integers.
    unsafe {
        if libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGTERM as libc::c_ulong,
            0,
            0,
            0,
        ) == -1
        {
            return Err(std::io::Error::last_os_error());
        }
        // The parent may have died between fork and prctl: then no signal will come.
        if libc::getppid() != parent {
            return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
        }
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn parent_death_signal(_parent: libc::pid_t) -> std::io::Result<()> {
    Ok(())
}

impl ManagedRedis {
    /// Starts `bin` on 127.0.0.1:`port` (0 = a free port) with its data in `dir` and a random
    /// password, and waits until it answers PING. See [`ManagedRedis::start_with_password`].
    pub async fn start(bin: &Path, dir: &Path, port: u16) -> Result<Self, ManagedRedisError> {
        Self::start_with_password(bin, dir, port, None).await
    }

    /// Starts `bin` on 127.0.0.1:`port` (0 = a free port) with its data in `dir`, protected by
    /// `password` (a random one from the OS RNG when `None` or empty), waits until it answers
    /// PING, and keeps it running (restarting it if it dies) until [`ManagedRedis::stop`].
    pub async fn start_with_password(
        bin: &Path,
        dir: &Path,
        port: u16,
        password: Option<&str>,
    ) -> Result<Self, ManagedRedisError> {
        let data_dir_err = |dir: &Path| {
            let dir = dir.display().to_string();
            move |source| ManagedRedisError::DataDir { dir, source }
        };
        // 0700 when we create it: the AOF holds every task and admin session.
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(data_dir_err(dir))?;
        let dir = dir.canonicalize().map_err(data_dir_err(dir))?;
        let lock = Arc::new(lock_dir(&dir).await?);
        if let Some(pid) = redis_server_in(&dir) {
            return Err(ManagedRedisError::InUse {
                dir: dir.display().to_string(),
                pid,
            });
        }
        let port = if port == 0 { free_port()? } else { port };
        let password = match password {
            Some(p) if !p.is_empty() => p.to_string(),
            _ => random_password(),
        };
        let log = dir.join("redis.log");
        let config = dir.join(CONFIG_FILE);
        write_config(&config, &dir, &log, port, &password).map_err(data_dir_err(&dir))?;

        let spawner = Spawner {
            bin: bin.to_path_buf(),
            config,
            lock_fd: lock.as_raw_fd(),
        };
        let mut child = spawner.spawn()?;
        let url = format!("redis://:{}@127.0.0.1:{port}/0", percent_encode(&password));
        let redacted = format!("redis://:***@127.0.0.1:{port}/0");
        let log_name = log.display().to_string();
        let limit = Duration::from_secs(10);
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(ManagedRedisError::Exited {
                    status: status.to_string(),
                    log: log_name,
                });
            }
            if ping(&url).await {
                break;
            }
            if started.elapsed() > limit {
                return Err(ManagedRedisError::NotReady(limit, log_name));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tracing::info!(url = %redacted, dir = %dir.display(), "managed redis-server started");
        // 0 from the start, not absent until the first restart, so an alert on its rate works
        // from the first scrape (the recorder is installed once per process, here if first).
        worker::install_prometheus();
        metrics::counter!(RESTARTS_METRIC).increment(0);
        let state = Arc::new(State::default());
        state.pid.store(child.id().unwrap_or(0), Ordering::Relaxed);
        let stop = CancellationToken::new();
        let supervisor = tokio::spawn(supervise(
            child,
            spawner,
            Arc::clone(&lock),
            Arc::clone(&state),
            stop.clone(),
            log.clone(),
        ));
        Ok(Self {
            url,
            redacted,
            log,
            state,
            _stop_on_drop: stop.clone().drop_guard(),
            stop,
            supervisor,
            lock,
        })
    }

    /// The URL to connect to, *with the password*: do not log it (see
    /// [`ManagedRedis::redacted_url`]).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The URL with the password replaced by `***`, for logs and messages.
    pub fn redacted_url(&self) -> &str {
        &self.redacted
    }

    /// How often the child died and was restarted.
    pub fn restarts(&self) -> u64 {
        self.state.restarts.load(Ordering::Relaxed)
    }

    /// The running child's pid (`None` between a death and its restart).
    pub fn pid(&self) -> Option<u32> {
        match self.state.pid.load(Ordering::Relaxed) {
            0 => None,
            pid => Some(pid),
        }
    }

    /// Stops the supervisor (so nothing restarts the child), then the child: `SHUTDOWN`
    /// (flushes the append-only file), then a kill if it has not exited within two seconds.
    /// The data directory's lock is released last.
    pub async fn stop(self) {
        self.stop.cancel();
        let child = self.supervisor.await.ok().flatten();
        let Some(mut child) = child else {
            tracing::info!("managed redis-server stopped");
            return;
        };
        if let Ok(client) = redis::Client::open(self.url.as_str()) {
            if let Ok(Ok(mut conn)) = tokio::time::timeout(
                Duration::from_secs(1),
                client.get_multiplexed_async_connection(),
            )
            .await
            {
                // The server closes the connection instead of replying, so an error is expected.
                let _: Result<(), _> = redis::cmd("SHUTDOWN").query_async(&mut conn).await;
            }
        }
        match tokio::time::timeout(Duration::from_secs(2), child.wait()).await {
            Ok(_) => tracing::info!("managed redis-server stopped"),
            Err(_) => {
                tracing::warn!(log = %self.log.display(), "managed redis-server did not stop; killing it");
                let _ = child.kill().await;
            }
        }
        drop(self.lock);
    }
}

/// Waits for the child to die and restarts it, until `stop` is cancelled; then hands the
/// current child back (none if it was between restarts).
async fn supervise(
    mut child: Child,
    spawner: Spawner,
    _lock: Arc<File>,
    state: Arc<State>,
    stop: CancellationToken,
    log: PathBuf,
) -> Option<Child> {
    // 100 ms doubling to 5 s between restarts, from the start again once a child has run
    // for STABLE_AFTER.
    let restart_delays = || {
        ExponentialBuilder::default()
            .with_min_delay(BACKOFF_MIN)
            .with_max_delay(BACKOFF_MAX)
            .without_max_times()
            .build()
    };
    let mut backoff = restart_delays();
    let mut started = Instant::now();
    loop {
        let status = tokio::select! {
            _ = stop.cancelled() => return Some(child),
            status = child.wait() => status,
        };
        state.pid.store(0, Ordering::Relaxed);
        if started.elapsed() >= STABLE_AFTER {
            backoff = restart_delays();
        }
        let status = match status {
            Ok(s) => s.to_string(),
            Err(e) => e.to_string(),
        };
        // Restart until a child is running (a spawn can fail too, e.g. the binary was removed).
        child = loop {
            let delay = backoff.next().unwrap_or(BACKOFF_MAX);
            tracing::warn!(
                %status,
                restart_in = ?delay,
                log = %log.display(),
                "managed redis-server is not running; restarting it"
            );
            tokio::select! {
                _ = stop.cancelled() => return None,
                _ = tokio::time::sleep(delay) => {}
            }
            match spawner.spawn() {
                Ok(c) => break c,
                Err(e) => {
                    tracing::warn!(error = %e, "managed redis-server could not be restarted");
                }
            }
        };
        started = Instant::now();
        state.pid.store(child.id().unwrap_or(0), Ordering::Relaxed);
        let n = state.restarts.fetch_add(1, Ordering::Relaxed) + 1;
        metrics::counter!(RESTARTS_METRIC).increment(1);
        tracing::warn!(restarts = n, "managed redis-server restarted");
    }
}

/// Takes the exclusive lock on `dir`'s lock file, waiting up to [`LOCK_WAIT`].
async fn lock_dir(dir: &Path) -> Result<File, ManagedRedisError> {
    let path = dir.join(LOCK_FILE);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&path)
        .map_err(|source| ManagedRedisError::DataDir {
            dir: dir.display().to_string(),
            source,
        })?;
    let started = Instant::now();
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) if started.elapsed() < LOCK_WAIT => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(ManagedRedisError::Locked {
                    dir: dir.display().to_string(),
                })
            }
            Err(std::fs::TryLockError::Error(source)) => {
                return Err(ManagedRedisError::DataDir {
                    dir: dir.display().to_string(),
                    source,
                })
            }
        }
    }
}

/// A `redis-server` whose working directory is `dir` (redis `chdir`s into its `dir`): one that
/// holds no lock, such as the orphan of a repoll from before the lock existed.
#[cfg(target_os = "linux")]
fn redis_server_in(dir: &Path) -> Option<u32> {
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let cwd = std::fs::read_link(entry.path().join("cwd")).ok()?;
            let comm = std::fs::read_to_string(entry.path().join("comm")).ok()?;
            (cwd == dir && comm.contains("redis")).then_some(pid)
        })
}

#[cfg(not(target_os = "linux"))]
fn redis_server_in(_dir: &Path) -> Option<u32> {
    None
}

/// 32 random bytes from the OS RNG, as 64 hex digits.
fn random_password() -> String {
    use rand::RngCore;
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes the child's configuration, created with mode 0600 (a stale file with other modes is
/// replaced, not rewritten in place).
fn write_config(
    path: &Path,
    dir: &Path,
    log: &Path,
    port: u16,
    password: &str,
) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let text = format!(
        "# Written by repoll serve at each start; it holds the password, hence mode 0600.\n\
         bind 127.0.0.1\n\
         port {port}\n\
         dir {}\n\
         logfile {}\n\
         appendonly yes\n\
         save \"\"\n\
         daemonize no\n\
         requirepass {}\n",
        quote(dir.as_os_str().as_bytes()),
        quote(log.as_os_str().as_bytes()),
        quote(password.as_bytes()),
    );
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()
}

/// A double-quoted redis.conf string (any bytes: `\"`, `\\` and `\xHH` escapes).
fn quote(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() + 2);
    s.push('"');
    for &b in bytes {
        match b {
            b'"' | b'\\' => {
                s.push('\\');
                s.push(b as char);
            }
            0x20..=0x7e => s.push(b as char),
            _ => s.push_str(&format!("\\x{b:02x}")),
        }
    }
    s.push('"');
    s
}

/// Percent-encodes a URL's userinfo part (the redis client decodes it).
fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn free_port() -> Result<u16, ManagedRedisError> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(ManagedRedisError::Port)?;
    let port = l.local_addr().map_err(ManagedRedisError::Port)?.port();
    Ok(port)
}

async fn ping(url: &str) -> bool {
    let Ok(client) = redis::Client::open(url) else {
        return false;
    };
    let attempt = async {
        let mut conn = client.get_multiplexed_async_connection().await.ok()?;
        redis::cmd("PING")
            .query_async::<String>(&mut conn)
            .await
            .ok()
    };
    matches!(
        tokio::time::timeout(Duration::from_millis(500), attempt).await,
        Ok(Some(_))
    )
}
