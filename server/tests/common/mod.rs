//! Helpers shared by the server's integration tests.
#![allow(dead_code)] // each test binary uses a different subset

use server::managed_redis::ManagedRedis;

/// A private managed redis-server (free port, its own temp data dir, removed on drop).
pub async fn start_redis() -> (ManagedRedis, tempdir::Dir) {
    let dir = tempdir::Dir::new();
    let redis = ManagedRedis::start("redis-server".as_ref(), dir.path(), 0)
        .await
        .expect("redis-server starts");
    (redis, dir)
}

/// The queue `name` (default settings) on `url`.
pub async fn connect_queue(url: &str, name: &str) -> queue::Queue {
    queue::Queue::connect(
        url,
        queue::QueueConfig {
            name: name.into(),
            ..Default::default()
        },
    )
    .await
    .expect("connect")
}

/// A tiny self-cleaning temporary directory (a managed redis-server's data dir per test).
pub mod tempdir {
    use std::path::{Path, PathBuf};

    pub struct Dir(PathBuf);

    impl Dir {
        pub fn new() -> Self {
            use std::sync::atomic::{AtomicU32, Ordering};
            static N: AtomicU32 = AtomicU32::new(0);
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos();
            let p = std::env::temp_dir().join(format!(
                "repoll-test-{}-{}-{}",
                std::process::id(),
                t,
                N.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&p).unwrap();
            Dir(p)
        }
        pub fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// Reads an SSE body until `n` heartbeat comments (lines starting with `:`) have arrived;
/// everything read. `guard` only stops a hang (callers set it below the 15 s default
/// interval, so a stream that ignores its configured keep-alive fails).
pub async fn heartbeats<S, E>(body: &mut S, n: usize, guard: std::time::Duration) -> String
where
    S: futures::Stream<Item = Result<axum::body::Bytes, E>> + Unpin,
    E: std::fmt::Debug,
{
    use futures::StreamExt;
    let mut seen = String::new();
    let read = async {
        while seen.lines().filter(|l| l.starts_with(':')).count() < n {
            let chunk = body.next().await.expect("stream open").unwrap();
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
    };
    if tokio::time::timeout(guard, read).await.is_err() {
        panic!("fewer than {n} heartbeats within {guard:?}: {seen:?}");
    }
    seen
}
