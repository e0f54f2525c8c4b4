//! The suite's own `redis-server`: a free port, append-only file in a temp dir, never the
//! shared one on 6379. It can be SIGKILLed and started again on the same port and data dir
//! (the AOF is replayed), and stalled with SIGSTOP / SIGCONT. The process itself is the test
//! kit's (one spawner for every test): its own process group, `PR_SET_PDEATHSIG`, the log in
//! every failure; the data dir is registered for the suite's cleanup.

use std::{
    path::Path,
    time::{Duration, Instant},
};

use redis::aio::ConnectionManager;
use testkit::{RedisOptions, RedisServer as KitServer};

use crate::procs;

/// Settings and the running process of the private Redis.
pub struct RedisServer {
    pub port: u16,
    server: KitServer,
}

impl RedisServer {
    /// Starts a fresh server and waits until it answers PING.
    pub async fn start(appendfsync: &str, log_dir: &Path) -> Result<RedisServer, String> {
        let dir = procs::temp_dir("redis").map_err(|e| format!("redis temp dir: {e}"))?;
        let opts = RedisOptions {
            appendfsync: Some(appendfsync.to_string()),
            dir: Some(dir),
            log_file: Some(log_dir.join("redis.log")),
            // Redis's own log level (notice): the run's log shows its AOF and restart lines.
            loglevel: None,
            // A restart replays the whole AOF of the run before it answers.
            ready_within: Duration::from_secs(30),
            // The suite opens thousands of connections in the abuse check's neighbourhood;
            // the default 10000 clients is ample, the explicit value documents the intent.
            extra: vec!["--maxclients".into(), "10000".into()],
            ..RedisOptions::default()
        };
        let server = KitServer::start_async(opts).await?;
        Ok(RedisServer {
            port: server.port,
            server,
        })
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// SIGKILL (no shutdown fsync), then the same command on the same port and directory.
    /// Returns how long Redis was unavailable.
    pub async fn kill_and_restart(&mut self) -> Result<Duration, String> {
        let t0 = Instant::now();
        self.server.restart_async().await?;
        Ok(t0.elapsed())
    }

    /// SIGSTOP for `d`, then SIGCONT: connections stay open, every command just waits.
    pub async fn stall(&self, d: Duration) {
        self.server.stall(d).await;
    }

    pub async fn stop(mut self) {
        self.server.kill();
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
