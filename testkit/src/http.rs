//! An HTTP client for tests of real listeners (the `repoll` binary, the simulator), built on
//! reqwest with JSON helpers: a test reads fields of a parsed answer, never splits JSON text.
//! Tests that deliberately send malformed bytes or stall a request keep a raw socket.
//!
//! [`Http`] is async; [`BlockingHttp`] serves plain `#[test]`s (no runtime), and must not be
//! used inside one.

use std::time::Duration;

use serde_json::Value;

/// An answer: its status, headers and body text.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: String,
}

impl Answer {
    /// The body parsed as JSON (panics with the body when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}), status {}: {}", self.status, self.body))
    }

    /// A header's value as text, if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Every `set-cookie` header.
    pub fn cookies(&self) -> Vec<String> {
        self.headers
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok().map(str::to_string))
            .collect()
    }
}

/// A client of `base` (`http://127.0.0.1:<port>`), no redirects followed, a 30 s hang guard
/// per request.
#[derive(Clone)]
pub struct Http {
    pub base: String,
    pub client: reqwest::Client,
}

impl Http {
    pub fn new(base: impl Into<String>) -> Http {
        Http {
            base: base.into(),
            client: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .timeout(Duration::from_secs(30))
                .build()
                .expect("http client"),
        }
    }

    /// A client of `http://127.0.0.1:<port>`.
    pub fn local(port: u16) -> Http {
        Http::new(format!("http://127.0.0.1:{port}"))
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Sends `req`; the answer (panics if there is none).
    pub async fn send(&self, req: reqwest::RequestBuilder) -> Answer {
        let resp = req.send().await.unwrap_or_else(|e| panic!("request: {e}"));
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = resp.text().await.unwrap_or_else(|e| panic!("body: {e}"));
        Answer {
            status,
            headers,
            body,
        }
    }

    pub async fn get(&self, path: &str) -> Answer {
        self.send(self.client.get(self.url(path))).await
    }

    /// GET, then the body as JSON, asserting a 200.
    pub async fn get_json(&self, path: &str) -> Value {
        let a = self.get(path).await;
        assert_eq!(a.status, 200, "GET {path}: {}", a.body);
        a.json()
    }

    pub async fn post_json(&self, path: &str, body: &Value) -> Answer {
        self.send(self.client.post(self.url(path)).json(body)).await
    }

    /// Whether `GET path` answers 200 now (false while nothing listens).
    pub async fn is_ok(&self, path: &str) -> bool {
        self.client
            .get(self.url(path))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
    }
}

// Behind the `blocking` feature: reqwest's blocking client is for the server's process tests
// only. The chaos tool links this crate into the release build beside `repoll`; with the
// feature on there, reqwest would be built with other features than `repoll` alone gets, and
// `scripts/run` would rebuild the server after CI's release build.
#[cfg(feature = "blocking")]
pub use blocking::BlockingHttp;

#[cfg(feature = "blocking")]
mod blocking {
    use super::*;

    /// [`Http`] for tests without an async runtime.
    pub struct BlockingHttp {
        pub base: String,
        pub client: reqwest::blocking::Client,
    }

    impl BlockingHttp {
        pub fn new(base: impl Into<String>) -> BlockingHttp {
            BlockingHttp {
                base: base.into(),
                client: reqwest::blocking::Client::builder()
                    .redirect(reqwest::redirect::Policy::none())
                    .timeout(Duration::from_secs(30))
                    .build()
                    .expect("http client"),
            }
        }

        /// A client of `http://127.0.0.1:<port>`.
        pub fn local(port: u16) -> BlockingHttp {
            BlockingHttp::new(format!("http://127.0.0.1:{port}"))
        }

        pub fn url(&self, path: &str) -> String {
            format!("{}{path}", self.base)
        }

        /// Sends `req`; the answer, or the transport error (nothing listening yet, reset).
        pub fn try_send(&self, req: reqwest::blocking::RequestBuilder) -> reqwest::Result<Answer> {
            let resp = req.send()?;
            let status = resp.status().as_u16();
            let headers = resp.headers().clone();
            let body = resp.text()?;
            Ok(Answer {
                status,
                headers,
                body,
            })
        }

        /// Sends `req`; the answer (panics if there is none).
        pub fn send(&self, req: reqwest::blocking::RequestBuilder) -> Answer {
            self.try_send(req)
                .unwrap_or_else(|e| panic!("request: {e}"))
        }

        pub fn get(&self, path: &str) -> Answer {
            self.send(self.client.get(self.url(path)))
        }

        /// GET with extra `headers` (name, value).
        pub fn get_with(&self, path: &str, headers: &[(&str, &str)]) -> Answer {
            let mut req = self.client.get(self.url(path));
            for (k, v) in headers {
                req = req.header(*k, *v);
            }
            self.send(req)
        }

        /// GET, then the body as JSON, asserting a 200.
        pub fn get_json(&self, path: &str) -> Value {
            let a = self.get(path);
            assert_eq!(a.status, 200, "GET {path}: {}", a.body);
            a.json()
        }

        pub fn post_json(&self, path: &str, body: &Value) -> Answer {
            self.send(self.client.post(self.url(path)).json(body))
        }

        /// POST of a form body as a page script sends it (`accept: application/json`), with
        /// extra `headers`.
        pub fn post_form(&self, path: &str, headers: &[(&str, &str)], body: &str) -> Answer {
            let mut req = self
                .client
                .post(self.url(path))
                .header("content-type", "application/x-www-form-urlencoded")
                .header("accept", "application/json")
                .body(body.to_string());
            for (k, v) in headers {
                req = req.header(*k, *v);
            }
            self.send(req)
        }

        /// Whether `GET path` answers 200 now (false while nothing listens).
        pub fn is_ok(&self, path: &str) -> bool {
            self.try_send(self.client.get(self.url(path)))
                .is_ok_and(|a| a.status == 200)
        }

        /// Waits until `GET path` answers 200; false after `limit`.
        pub fn wait_ok(&self, path: &str, limit: Duration) -> bool {
            let t0 = std::time::Instant::now();
            while t0.elapsed() < limit {
                if self.is_ok(path) {
                    return true;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            false
        }

        /// Asks `GET /api/v1/queries/{id}` (repoll's public API) until `ready` holds of its
        /// answer, which it returns; panics with the last answer after `limit` — a hang guard,
        /// never a timing. The process tests wait on a query here.
        pub fn query_until(
            &self,
            id: &str,
            limit: Duration,
            ready: impl Fn(&Value) -> bool,
        ) -> Value {
            let t0 = std::time::Instant::now();
            loop {
                let answer = self.get_json(&format!("/api/v1/queries/{id}"));
                if ready(&answer) {
                    return answer;
                }
                assert!(
                    t0.elapsed() < limit,
                    "query {id} not there after {limit:?}: {answer}"
                );
                std::thread::sleep(Duration::from_millis(25));
            }
        }

        /// [`BlockingHttp::query_until`] its status is `done`.
        pub fn wait_done(&self, id: &str, limit: Duration) -> Value {
            self.query_until(id, limit, |a| a["status"] == "done")
        }
    }
}
