//! repoll's test kit: what every test crate (and the chaos tool, itself a test tool) needs to
//! set up its world, written once.
//!
//! - [`redis`]: one redis-server spawner (plain, append-only, with a password or an ACL user,
//!   extra flags; a free port retried only on "Address already in use"; stop, restart on the
//!   same port, SIGSTOP/SIGCONT; the server's log in every failure) and a per-process shared one.
//! - [`cluster`]: masters and replicas made into a Redis Cluster, waited for until every slot
//!   is served and every replica's link is up.
//! - [`child`]: child processes killed on drop (their process group where asked), never
//!   outliving the test process.
//! - [`http`]: a reqwest client with JSON helpers.
//! - [`import_layers`]: a crate's module graph read from its sources, and the import circles
//!   in it.
//! - [`free_port`].
//!
//! Nothing here skips: a server that cannot start is an error carrying its log, and the
//! test helpers panic with it.

pub mod child;
pub mod cluster;
pub mod http;
pub mod import_layers;
pub mod redis;

pub use child::ChildGuard;
pub use cluster::Cluster;
#[cfg(feature = "blocking")]
pub use http::BlockingHttp;
pub use http::{Answer, Http};
pub use redis::{RedisOptions, RedisServer};

/// A port of 127.0.0.1 that was free a moment ago (bound to port 0, then released). Another
/// process may take it before the caller binds it: the redis spawner retries with a new one
/// when its server reports "Address already in use".
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free port on 127.0.0.1")
}

/// A port for a Redis Cluster node: at most 55535, free, and with its cluster bus port
/// (port + 10000) free too. A node on a higher port cannot start.
pub fn free_cluster_port() -> u16 {
    for _ in 0..1000 {
        let port = free_port();
        let bus_free = || std::net::TcpListener::bind(("127.0.0.1", port + 10000)).is_ok();
        if port <= 55535 && bus_free() {
            return port;
        }
    }
    panic!("no free cluster port (<= 55535 with a free bus port) on 127.0.0.1")
}

/// Waits until `ok` holds, checking every 100 ms; panics naming `what` after `limit` (a hang
/// guard, not a speed assertion).
pub async fn wait_for(what: &str, limit: std::time::Duration, mut ok: impl AsyncFnMut() -> bool) {
    let end = std::time::Instant::now() + limit;
    while std::time::Instant::now() < end {
        if ok().await {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("{what} did not happen within {limit:?}");
}

/// A fresh directory under the system temp dir named after `tag`, this process and a counter
/// (removed by whoever owns it: [`RedisServer`], [`Cluster`], or [`TempDir`]).
pub fn fresh_dir(tag: &str) -> std::path::PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    let dir = std::env::temp_dir().join(format!(
        "repoll-{tag}-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// A temporary directory removed on drop.
pub struct TempDir(std::path::PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        TempDir(fresh_dir(tag))
    }

    pub fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Default for TempDir {
    fn default() -> Self {
        TempDir::new("test")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
