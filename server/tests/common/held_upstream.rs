//! An upstream the test holds: each call waits until the test lets its caller's calls be
//! answered (worker_process/, worker_control.rs).
#![allow(dead_code)] // each test binary uses a different subset

use std::time::Duration;

/// An upstream held by the test: each call (`?q=<key>&w=<worker>`) is announced on
/// `arrived` (the worker's name) and answered `done` with `{"by": <worker>}` only once the
/// test has opened that worker's gate.
pub struct HeldUpstream {
    pub port: u16,
    arrived: tokio::sync::mpsc::UnboundedReceiver<String>,
    open: tokio::sync::watch::Sender<Vec<String>>,
}

impl HeldUpstream {
    pub async fn start() -> HeldUpstream {
        use axum::extract::{Query, State};
        use std::collections::HashMap;
        type Gates = (
            tokio::sync::mpsc::UnboundedSender<String>,
            tokio::sync::watch::Receiver<Vec<String>>,
        );
        async fn call(
            State((arrived, open)): State<Gates>,
            Query(q): Query<HashMap<String, String>>,
        ) -> axum::Json<serde_json::Value> {
            let who = q.get("w").cloned().unwrap_or_default();
            let _ = arrived.send(who.clone());
            let mut open = open.clone();
            let _ = open.wait_for(|o| o.contains(&who)).await;
            axum::Json(serde_json::json!({"status": "done", "data": {"by": who}}))
        }
        let (arrived_tx, arrived) = tokio::sync::mpsc::unbounded_channel();
        let (open, open_rx) = tokio::sync::watch::channel(Vec::new());
        let app = axum::Router::new()
            .route("/api/query", axum::routing::get(call))
            .with_state((arrived_tx, open_rx));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move { axum::serve(listener, app).await });
        HeldUpstream {
            port,
            arrived,
            open,
        }
    }

    /// The URL template of worker `who`.
    pub fn url(&self, who: &str) -> String {
        format!("http://127.0.0.1:{}/api/query?q={{key}}&w={who}", self.port)
    }

    /// Waits for the next call to arrive (60 s hang guard); the caller's name.
    pub async fn next_call(&mut self) -> String {
        tokio::time::timeout(Duration::from_secs(60), self.arrived.recv())
            .await
            .expect("an upstream call within 60 s (hang guard)")
            .expect("upstream running")
    }

    /// Lets `who`'s calls (held or future) be answered.
    pub fn answer(&self, who: &str) {
        self.open.send_modify(|o| o.push(who.to_string()));
    }
}
