//! A local `redis-server` owned by this process, for when no `REDIS_URL` is configured.
//!
//! Why: the demo (`scripts/run`) and a single-host deployment should work with nothing but
//! the binary and a `redis-server` on PATH. The child keeps an append-only file under the
//! data directory, so queued tasks and results survive a restart of `repoll serve`. It is
//! started before anything touches Redis and stopped (with `SHUTDOWN`, which fsyncs the AOF)
//! after everything else has drained; `kill_on_drop` covers early returns and panics.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use tokio::process::{Child, Command};

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
    #[error("cannot start `{bin}`: {source}")]
    Spawn { bin: String, source: std::io::Error },
    #[error("no free TCP port for the managed Redis: {0}")]
    Port(std::io::Error),
    #[error("the managed Redis exited during start-up ({status}); its log is {log}")]
    Exited { status: String, log: String },
    #[error("the managed Redis did not answer PING within {0:?}; its log is {1}")]
    NotReady(Duration, String),
}

/// A running child `redis-server`.
pub struct ManagedRedis {
    child: Child,
    url: String,
    log: PathBuf,
}

impl ManagedRedis {
    /// Starts `bin` on 127.0.0.1:`port` (0 = a free port) with its data in `dir`, and waits
    /// until it answers PING.
    pub async fn start(bin: &Path, dir: &Path, port: u16) -> Result<Self, ManagedRedisError> {
        let bin_name = bin.display().to_string();
        std::fs::create_dir_all(dir).map_err(|source| ManagedRedisError::DataDir {
            dir: dir.display().to_string(),
            source,
        })?;
        let dir = dir
            .canonicalize()
            .map_err(|source| ManagedRedisError::DataDir {
                dir: dir.display().to_string(),
                source,
            })?;
        let port = if port == 0 { free_port()? } else { port };
        let log = dir.join("redis.log");
        let mut child = Command::new(bin)
            .arg("--bind")
            .arg("127.0.0.1")
            .arg("--port")
            .arg(port.to_string())
            .arg("--dir")
            .arg(&dir)
            .arg("--appendonly")
            .arg("yes")
            .arg("--save")
            .arg("")
            .arg("--daemonize")
            .arg("no")
            .arg("--logfile")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| {
                if source.kind() == std::io::ErrorKind::NotFound {
                    ManagedRedisError::NotInstalled {
                        bin: bin_name.clone(),
                    }
                } else {
                    ManagedRedisError::Spawn {
                        bin: bin_name.clone(),
                        source,
                    }
                }
            })?;
        let url = format!("redis://127.0.0.1:{port}/0");
        let log_name = log.display().to_string();
        let limit = Duration::from_secs(10);
        let started = std::time::Instant::now();
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
        tracing::info!(%url, dir = %dir.display(), "managed redis-server started");
        Ok(Self { child, url, log })
    }

    /// The URL to connect to.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Stops the child: `SHUTDOWN` (flushes the append-only file), then a kill if it has not
    /// exited within two seconds.
    pub async fn stop(mut self) {
        if let Ok(client) = queue::redis::Client::open(self.url.as_str()) {
            if let Ok(Ok(mut conn)) = tokio::time::timeout(
                Duration::from_secs(1),
                client.get_multiplexed_async_connection(),
            )
            .await
            {
                // The server closes the connection instead of replying, so an error is expected.
                let _: Result<(), _> = queue::redis::cmd("SHUTDOWN").query_async(&mut conn).await;
            }
        }
        match tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await {
            Ok(_) => tracing::info!("managed redis-server stopped"),
            Err(_) => {
                tracing::warn!(log = %self.log.display(), "managed redis-server did not stop; killing it");
                let _ = self.child.kill().await;
            }
        }
    }
}

fn free_port() -> Result<u16, ManagedRedisError> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(ManagedRedisError::Port)?;
    let port = l.local_addr().map_err(ManagedRedisError::Port)?.port();
    Ok(port)
}

async fn ping(url: &str) -> bool {
    let Ok(client) = queue::redis::Client::open(url) else {
        return false;
    };
    let attempt = async {
        let mut conn = client.get_multiplexed_async_connection().await.ok()?;
        queue::redis::cmd("PING")
            .query_async::<String>(&mut conn)
            .await
            .ok()
    };
    matches!(
        tokio::time::timeout(Duration::from_millis(500), attempt).await,
        Ok(Some(_))
    )
}
