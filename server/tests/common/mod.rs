//! Helpers shared by the server's integration tests.
#![allow(dead_code)] // each test binary uses a different subset

use server::managed_redis::ManagedRedis;

pub mod admin;
pub mod api;
pub mod fresh;
pub mod held_upstream;
pub mod otlp;
pub mod process;

/// The public API's settings for a test that asks as fast as it likes: no per-client rate
/// limit and no first-answer wait (a submit answers at once: processing, or what is stored).
pub fn api_unlimited() -> server::api::ApiArgs {
    server::api::ApiArgs {
        rate_per_min: 0,
        first_answer_ms: 0,
        ..server::api::ApiArgs::default()
    }
}

/// Waits until `check` holds, asking every 50 ms; panics naming `what` after `limit` (a hang
/// guard, never a timing).
pub async fn wait_for(
    what: &str,
    limit: std::time::Duration,
    mut check: impl AsyncFnMut() -> bool,
) {
    let start = std::time::Instant::now();
    while !check().await {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// What the router answered a request: its status, headers, body text, and the body parsed
/// as JSON (`Null` when it is not JSON).
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: axum::http::HeaderMap,
    pub body: String,
    pub json: serde_json::Value,
}

/// Runs `req` through `router` in process (no socket) and reads the whole answer.
pub async fn oneshot(router: &axum::Router, req: axum::http::Request<axum::body::Body>) -> Reply {
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    let res = router.clone().oneshot(req).await.unwrap();
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    let body = String::from_utf8_lossy(&bytes).into_owned();
    let json = serde_json::from_str(&body).unwrap_or(serde_json::Value::Null);
    Reply {
        status,
        headers,
        body,
        json,
    }
}

/// A router served on a real socket (127.0.0.1, a free port) through the server's own accept
/// loop, with a client of it; stopped when dropped.
pub struct Listening {
    pub http: testkit::Http,
    stop: tokio_util::sync::CancellationToken,
}

impl Drop for Listening {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Serves `router` as `repoll serve` does (the peer address reaches the handlers), for tests
/// that want real HTTP exchanges rather than `oneshot`.
pub async fn listen(router: axum::Router) -> Listening {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(server::http_server::serve(
        listener,
        router,
        server::http_server::ConnLimits {
            max_connections: 64,
            header_timeout: std::time::Duration::from_secs(10),
        },
        Default::default(),
        stop.clone(),
        std::time::Duration::from_millis(200),
    ));
    Listening {
        http: testkit::Http::local(port),
        stop,
    }
}

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
