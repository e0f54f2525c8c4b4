//! The suite's own `redis-server`: a free port, append-only file in a temp dir, never the
//! shared one on 6379. It can be SIGKILLed and started again on the same port and data dir
//! (the AOF is replayed), and stalled with SIGSTOP / SIGCONT.

use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use redis::aio::ConnectionManager;
use tokio::process::Command;

use crate::procs::{self, Proc};

/// Settings and the running process of the private Redis.
pub struct RedisServer {
    pub port: u16,
    pub dir: PathBuf,
    pub appendfsync: String,
    log: PathBuf,
    proc: Option<Proc>,
}

impl RedisServer {
    /// Starts a fresh server and waits until it answers PING.
    pub async fn start(appendfsync: &str, log_dir: &Path) -> Result<RedisServer, String> {
        let dir = procs::temp_dir("redis").map_err(|e| format!("redis temp dir: {e}"))?;
        let port = procs::free_port().map_err(|e| format!("free port: {e}"))?;
        let mut r = RedisServer {
            port,
            dir,
            appendfsync: appendfsync.to_string(),
            log: log_dir.join("redis.log"),
            proc: None,
        };
        r.launch().await?;
        Ok(r)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    async fn launch(&mut self) -> Result<(), String> {
        let mut cmd = Command::new("redis-server");
        cmd.arg("--bind")
            .arg("127.0.0.1")
            .arg("--port")
            .arg(self.port.to_string())
            .arg("--dir")
            .arg(&self.dir)
            .arg("--appendonly")
            .arg("yes")
            .arg("--appendfsync")
            .arg(&self.appendfsync)
            .arg("--save")
            .arg("")
            .arg("--daemonize")
            .arg("no")
            // The suite opens thousands of connections in the abuse check's neighbourhood;
            // the default 10000 clients is ample, the explicit value documents the intent.
            .arg("--maxclients")
            .arg("10000");
        let p = Proc::spawn("redis-server", cmd, &self.log)
            .map_err(|e| format!("redis-server did not start (is it installed?): {e}"))?;
        self.proc = Some(p);
        self.wait_ready(Duration::from_secs(30)).await
    }

    /// Waits until PING answers (after a restart that includes replaying the AOF).
    async fn wait_ready(&mut self, limit: Duration) -> Result<(), String> {
        let started = Instant::now();
        let client = redis::Client::open(self.url()).map_err(|e| e.to_string())?;
        loop {
            if let Some(p) = self.proc.as_mut() {
                if let Some(status) = p.exited() {
                    return Err(format!(
                        "redis-server exited ({status}); see {}",
                        self.log.display()
                    ));
                }
            }
            if let Ok(mut c) = client.get_multiplexed_async_connection().await {
                if let Ok(pong) = redis::cmd("PING").query_async::<String>(&mut c).await {
                    if pong == "PONG" {
                        return Ok(());
                    }
                }
            }
            if started.elapsed() > limit {
                return Err(format!(
                    "redis-server on port {} does not answer",
                    self.port
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGKILL (no shutdown fsync), then the same command on the same port and directory.
    /// Returns how long Redis was unavailable.
    pub async fn kill_and_restart(&mut self) -> Result<Duration, String> {
        let t0 = Instant::now();
        if let Some(p) = self.proc.take() {
            p.kill().await;
        }
        self.launch().await?;
        Ok(t0.elapsed())
    }

    /// SIGSTOP for `d`, then SIGCONT: connections stay open, every command just waits.
    pub async fn stall(&self, d: Duration) {
        if let Some(p) = &self.proc {
            p.signal(libc::SIGSTOP);
            tokio::time::sleep(d).await;
            p.signal(libc::SIGCONT);
        }
    }

    pub async fn stop(mut self) {
        if let Some(p) = self.proc.take() {
            p.kill().await;
        }
    }
}

/// A connection that reconnects by itself after the restart.
pub async fn connect(url: &str) -> Result<ConnectionManager, String> {
    let client = redis::Client::open(url).map_err(|e| e.to_string())?;
    let cfg = redis::aio::ConnectionManagerConfig::new()
        .set_response_timeout(Some(Duration::from_secs(5)))
        .set_connection_timeout(Some(Duration::from_secs(2)))
        // Back within half a second of the restart, so recovery times measure repoll.
        .set_max_delay(Duration::from_millis(500));
    client
        .get_connection_manager_with_config(cfg)
        .await
        .map_err(|e| format!("redis connect: {e}"))
}

/// `INFO persistence` field (e.g. `aof_delayed_fsync`), if present.
pub async fn info_field(con: &mut ConnectionManager, section: &str, field: &str) -> Option<String> {
    let info: String = redis::cmd("INFO")
        .arg(section)
        .query_async(con)
        .await
        .ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .map(|v| v.trim().to_string())
}
