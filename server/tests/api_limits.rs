//! The public API's limits and failures: per-client rate limits (in process and on a real
//! socket), cross-site posts, live-stream caps and heartbeats, Redis down or stalled.

use crate::common;
use common::api::*;
use common::{heartbeats, start_redis};

use std::{net::SocketAddr, time::Duration};

use axum::{body::Body, extract::ConnectInfo, http::Request};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use server::api::ApiArgs;
use tower::ServiceExt;

#[tokio::test]
async fn rate_limit_is_per_client_with_retry_after() {
    let env = Env::start(Opts {
        api: ApiArgs {
            rate_per_min: 1,
            rate_burst: 2,
            first_answer_ms: 0,
            ..ApiArgs::default()
        },
        ..Default::default()
    })
    .await;
    let from = |ip: [u8; 4], q: &str| {
        let mut req = post_json(&json!({ "query": q }).to_string());
        req.extensions_mut()
            .insert(ConnectInfo(SocketAddr::from((ip, 40000))));
        req
    };
    assert_eq!(env.send(from([10, 0, 0, 1], "r1")).await.status, 202);
    assert_eq!(env.send(from([10, 0, 0, 1], "r2")).await.status, 202);
    let r = env.send(from([10, 0, 0, 1], "r3")).await;
    assert_eq!((r.status, r.error_code()), (429, "rate_limited"));
    let wait: u64 = r.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=60).contains(&wait), "{wait}");
    // Another client is not affected.
    assert_eq!(env.send(from([10, 0, 0, 2], "r4")).await.status, 202);
    // Reads are not limited.
    assert_eq!(env.get("/api/v1/openapi.json").await.status, 200);

    // The query page's form (a server function) draws from the same bucket: no way around
    // the limit, and a refused submission creates nothing.
    let form = |ip: [u8; 4], q: &str| {
        use leptos::server_fn::ServerFn;
        let mut req = Request::post(app::pages::SubmitQuery::PATH)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(Body::from(format!("query={q}")))
            .unwrap();
        req.extensions_mut()
            .insert(ConnectInfo(SocketAddr::from((ip, 40000))));
        req
    };
    let before = env.queue.stats().await.unwrap().ready;
    let r = env.send(form([10, 0, 0, 1], "r5")).await;
    assert_eq!(r.status, 429, "{}", r.body);
    assert!(r.headers.contains_key("retry-after"));
    assert!(r.body.contains("Too many queries"), "{}", r.body);
    assert_eq!(env.queue.stats().await.unwrap().ready, before);
    // Another client's form post goes through (a redirect to the query's page).
    let r = env.send(form([10, 0, 0, 3], "r6")).await;
    assert!(r.status < 400, "{} {}", r.status, r.body);
    assert_eq!(env.queue.stats().await.unwrap().ready, before + 1);
    env.stop().await;
}

/// One `POST /api/v1/queries` of `query` on a new TCP connection from the local address
/// `from` (any 127.x.y.z reaches the server: every loopback address is this host), with an
/// `X-Forwarded-For: <xff>` header when given; the status line's code and the whole answer.
async fn post_from(
    server: SocketAddr,
    from: [u8; 4],
    xff: Option<&str>,
    query: &str,
) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from((from, 0))).unwrap();
    let mut s = socket.connect(server).await.unwrap();
    let body = json!({ "query": query }).to_string();
    let xff = xff.map_or(String::new(), |v| format!("x-forwarded-for: {v}\r\n"));
    let head = format!(
        "POST /api/v1/queries HTTP/1.1\r\nhost: x\r\nconnection: close\r\n{xff}\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(20), s.read_to_string(&mut out))
        .await
        .expect("an answer (hang guard)")
        .unwrap();
    let code = out
        .strip_prefix("HTTP/1.1 ")
        .and_then(|r| r.get(..3))
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {out:?}"));
    (code, out)
}

/// The query page's form posts to a server function (`/api/<fn>`, outside the public
/// `/api/v1`), which a foreign page could make a visitor's browser send. The cross-site guard
/// covers it: with `Sec-Fetch-Site` other than same-origin, or an `Origin` that is not this
/// host (or `null`), the submission is a 403 before any handler runs, and no task is
/// created. The same submission from this site's own page goes through (so the refusals
/// were the guard, not the request).
#[tokio::test]
async fn cross_site_posts_to_the_query_pages_server_function_are_refused() {
    use leptos::server_fn::ServerFn;
    let env = Env::start(Opts {
        api: crate::common::api_unlimited(),
        ..Default::default()
    })
    .await;
    let host = "repoll.test:3000";
    let form = |query: &str, headers: &[(&'static str, &'static str)]| {
        let mut req = Request::post(app::pages::SubmitQuery::PATH)
            .header("host", host)
            .header("content-type", "application/x-www-form-urlencoded");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req.body(Body::from(format!("query={query}"))).unwrap()
    };
    let before = env.queue.stats().await.unwrap().ready;
    let hostile: [(&str, &[(&str, &str)]); 4] = [
        ("crosssite1", &[("sec-fetch-site", "cross-site")]),
        ("crosssite2", &[("sec-fetch-site", "same-site")]),
        ("crosssite3", &[("origin", "https://evil.example")]),
        ("crosssite4", &[("origin", "null")]),
    ];
    for (query, headers) in hostile {
        let r = env.send(form(query, headers)).await;
        assert_eq!(
            (r.status, r.body.as_str()),
            (403, "cross-site request refused"),
            "{headers:?}"
        );
        assert!(!exists(&env, query).await, "{headers:?} created {query}");
    }
    assert_eq!(env.queue.stats().await.unwrap().ready, before);

    // From the site's own page: accepted (a redirect to the query's page), and created.
    let ours = [
        ("sec-fetch-site", "same-origin"),
        ("origin", "http://repoll.test:3000"),
    ];
    let r = env.send(form("samesite1", &ours)).await;
    assert!(r.status < 400, "{} {}", r.status, r.body);
    assert!(exists(&env, "samesite1").await);
    assert_eq!(env.queue.stats().await.unwrap().ready, before + 1);
    env.stop().await;
}

/// The per-client submit limit through the real accept loop and real TCP connections (the
/// router-level test above injects `ConnectInfo` by hand; here it must come from the socket).
/// Burst 2 at 1 a minute: a client's third submission is refused with 429 and `Retry-After`,
/// and creates nothing. Without `REPOLL_TRUST_FORWARDED`, `X-Forwarded-For` changes nothing
/// (one peer, one bucket) and another peer address has its own bucket — which fails if the
/// accept loop stops handing the peer to the handlers (every request would share one
/// anonymous bucket). With it, the last `X-Forwarded-For` entry is the bucket: two last hops
/// behind the same proxy are two clients, and a client-written first entry is ignored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_on_a_real_socket_keys_on_the_peer_or_the_trusted_last_hop() {
    let opts = |trust_forwarded| Opts {
        api: ApiArgs {
            rate_per_min: 1,
            rate_burst: 2,
            first_answer_ms: 0,
            ..ApiArgs::default()
        },
        trust_forwarded,
        ..Default::default()
    };
    let refused = |answer: &str| {
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        let head = head.to_ascii_lowercase();
        let wait: u64 = head
            .lines()
            .find_map(|l| l.strip_prefix("retry-after: "))
            .unwrap_or_else(|| panic!("Retry-After: {answer}"))
            .trim()
            .parse()
            .unwrap();
        assert!((1..=60).contains(&wait), "{wait}");
        assert!(body.contains(r#""code":"rate_limited""#), "{answer}");
    };

    // Not trusted: the proxy header is the client's own words.
    let env = Env::start(opts(false)).await;
    let addr = env.listen().await;
    let local = [127, 0, 0, 1];
    for (i, xff) in ["203.0.113.1", "203.0.113.2"].into_iter().enumerate() {
        let (code, answer) = post_from(addr, local, Some(xff), &format!("sock-a{i}")).await;
        assert_eq!(code, 202, "{answer}");
    }
    for (i, xff) in [Some("203.0.113.3"), None].into_iter().enumerate() {
        let q = format!("sock-refused-{i}");
        let (code, answer) = post_from(addr, local, xff, &q).await;
        assert_eq!(
            code, 429,
            "one peer, one bucket, whatever it claims: {answer}"
        );
        refused(&answer);
        assert!(!exists(&env, &q).await, "a refused submission created {q}");
    }
    // Another peer address has a bucket of its own.
    let (code, answer) = post_from(addr, [127, 0, 0, 2], None, "sock-b").await;
    assert_eq!(
        code, 202,
        "the second peer shares the first one's bucket: {answer}"
    );
    for q in ["sock-a0", "sock-a1", "sock-b"] {
        assert!(exists(&env, q).await, "{q} accepted and created");
    }
    assert_eq!(env.queue.stats().await.unwrap().ready, 3);
    env.stop().await;

    // Trusted: the last entry, the one the proxy appended, is the client.
    let env = Env::start(opts(true)).await;
    let addr = env.listen().await;
    for i in 0..2 {
        let xff = format!("198.51.100.{i}, 203.0.113.1");
        let (code, answer) = post_from(addr, local, Some(&xff), &format!("fwd-a{i}")).await;
        assert_eq!(code, 202, "{answer}");
    }
    let (code, answer) = post_from(addr, local, Some("203.0.113.1"), "fwd-refused").await;
    assert_eq!(code, 429, "{answer}");
    refused(&answer);
    assert!(!exists(&env, "fwd-refused").await);
    // Same proxy, same peer, another last hop (the exhausted one written before it by the
    // client): another client.
    let (code, answer) = post_from(addr, local, Some("203.0.113.1, 203.0.113.2"), "fwd-b").await;
    assert_eq!(code, 202, "{answer}");
    // Without the header the peer is the client, a bucket of its own too.
    let (code, answer) = post_from(addr, local, None, "fwd-peer").await;
    assert_eq!(code, 202, "{answer}");
    assert_eq!(env.queue.stats().await.unwrap().ready, 4);
    env.stop().await;
}

#[tokio::test]
async fn redis_down_is_503_with_the_error_shape() {
    let mut env = Env::start(Opts::default()).await;
    env.redis.take().unwrap().stop().await;
    let r = env.submit("anything").await;
    assert_eq!(
        (r.status, r.error_code()),
        (503, "unavailable"),
        "{}",
        r.body
    );
    // The handler's answer to the Redis error (the request timeout's 503 has neither).
    assert_eq!(
        r.json["error"]["message"],
        "the queue is unavailable; try again shortly"
    );
    assert_eq!(r.headers["retry-after"], "1");
    let r = env
        .get("/api/v1/queries/0123456789abcdef0123456789abcdef")
        .await;
    assert_eq!(
        (r.status, r.error_code()),
        (503, "unavailable"),
        "{}",
        r.body
    );
    assert_eq!(
        r.json["error"]["message"],
        "the queue is unavailable; try again shortly"
    );
    assert_eq!(r.headers["retry-after"], "1");
    env.stop().await;
}

/// Opens the live stream of `id` as `ip`; the status and, on refusal, the reply.
async fn open_stream(env: &Env, id: &str, ip: [u8; 4]) -> (u16, axum::response::Response) {
    let mut req = Request::get(format!("/api/v1/queries/{id}/events"))
        .body(Body::empty())
        .unwrap();
    req.extensions_mut()
        .insert(ConnectInfo(SocketAddr::from((ip, 40000))));
    let res = env.router.clone().oneshot(req).await.unwrap();
    (res.status().as_u16(), res)
}

#[tokio::test]
async fn live_streams_are_capped_per_client_and_in_total() {
    let env = Env::start(Opts {
        api: crate::common::api_unlimited(),
        caps: server::live_hub::StreamCaps {
            per_client: 2,
            total: 3,
        },
        ..Default::default()
    })
    .await;
    let id = env.submit("capped stream").await.json["id"]
        .as_str()
        .unwrap()
        .to_string();
    // Two streams of one client are fine (their bodies stay open while held).
    let (s1, held1) = open_stream(&env, &id, [10, 0, 0, 1]).await;
    let (s2, held2) = open_stream(&env, &id, [10, 0, 0, 1]).await;
    assert_eq!((s1, s2), (200, 200));
    // The third of the same client: 429 in the API's shape, and the connection closes.
    let (s3, refused) = open_stream(&env, &id, [10, 0, 0, 1]).await;
    assert_eq!(s3, 429);
    assert_eq!(refused.headers()["connection"], "close");
    let body = refused.into_body().collect().await.unwrap().to_bytes();
    let json: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(json["error"]["code"], "too_many_streams");
    // Another client gets the last place in total, and then the process is full.
    let (s4, held4) = open_stream(&env, &id, [10, 0, 0, 2]).await;
    assert_eq!(s4, 200);
    let (s5, _) = open_stream(&env, &id, [10, 0, 0, 3]).await;
    assert_eq!(s5, 503);
    // A stream that ends gives its place back.
    drop(held1);
    let (s6, _held6) = open_stream(&env, &id, [10, 0, 0, 3]).await;
    assert_eq!(s6, 200);
    drop((held2, held4));
    env.stop().await;
}

/// REPOLL_SSE_KEEPALIVE_MS (here 100 ms): while a query waits (no worker, so no change),
/// its live stream carries heartbeat comments after the first `state` event.
#[tokio::test]
async fn a_waiting_stream_sends_heartbeats_at_the_configured_interval() {
    let env = Env::start(Opts {
        api: ApiArgs {
            sse_keepalive_ms: 100,
            ..crate::common::api_unlimited()
        },
        ..Default::default()
    })
    .await;
    let id = env.submit("heartbeat stream").await.json["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (status, res) = open_stream(&env, &id, [10, 0, 0, 1]).await;
    assert_eq!(status, 200);
    let mut body = res.into_body().into_data_stream();
    let seen = heartbeats(&mut body, 3, Duration::from_secs(10)).await;
    assert_eq!(seen.matches("event: state").count(), 1, "{seen}");
    env.stop().await;
}

/// `redis-server` stopped with SIGSTOP until dropped (then SIGCONT), however the test ends.
struct StoppedRedis(u32);

impl StoppedRedis {
    fn stop(pid: u32) -> StoppedRedis {
        signal(pid, "-STOP");
        StoppedRedis(pid)
    }

    /// Whether the process is still stopped (state `T` in /proc/<pid>/stat).
    fn still_stopped(&self) -> bool {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.0)).unwrap();
        // "<pid> (<comm>) <state> ...": the state follows the last ')'.
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('T'))
    }
}

impl Drop for StoppedRedis {
    fn drop(&mut self) {
        signal(self.0, "-CONT");
    }
}

fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill {sig} {pid}");
}

/// A `repoll serve` child, killed however the test ends.
struct Serve(std::process::Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The web side's Redis timeout (twice serve's default) and a request timeout between it and
/// the workers' longer Redis timeout, checked to be in that order.
fn redis_and_request_timeouts_in_the_order_relied_on() -> (Duration, Duration) {
    use clap::Parser;
    let server::cli::Command::Serve(defaults) =
        server::cli::Cli::try_parse_from(["repoll", "serve"])
            .expect("serve's defaults")
            .command
    else {
        unreachable!()
    };
    let redis_timeout = Duration::from_millis(defaults.redis_request_timeout_ms * 2);
    let request_timeout = (redis_timeout + queue::RESPONSE_TIMEOUT) / 2;
    assert!(
        redis_timeout < request_timeout && request_timeout < queue::RESPONSE_TIMEOUT,
        "the order this test relies on: {redis_timeout:?} < {request_timeout:?} < {:?}",
        queue::RESPONSE_TIMEOUT
    );
    (redis_timeout, request_timeout)
}

/// Spawns `repoll serve` (web only, no rate limit) on `port` against `redis_url` with these
/// Redis and request timeouts.
fn spawn_serve_with_timeouts(
    redis_url: &str,
    port: u16,
    redis_timeout: Duration,
    request_timeout: Duration,
) -> Serve {
    let mut cmd = crate::common::process::repoll();
    cmd.args(["serve", "--workers", "0"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("REDIS_URL", redis_url)
        .env("REPOLL_ADDR", format!("127.0.0.1:{port}"))
        .env("REPOLL_RATE_PER_MIN", "0")
        .env("REPOLL_FIRST_ANSWER_MS", "0")
        .env("REPOLL_ADMIN_PASSWORD", "stall test admin")
        .env(
            "REPOLL_REDIS_REQUEST_TIMEOUT_MS",
            redis_timeout.as_millis().to_string(),
        )
        .env(
            "REPOLL_REQUEST_TIMEOUT_MS",
            request_timeout.as_millis().to_string(),
        )
        .env("RUST_LOG", "error")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit());
    Serve(cmd.spawn().expect("repoll serve"))
}

/// Waits (60 s hang guard) until `{base}/readyz` answers 200.
async fn wait_until_serve_is_ready(http: &reqwest::Client, base: &str) {
    let ready = async {
        loop {
            let r = http.get(format!("{base}/readyz")).send().await;
            if r.is_ok_and(|r| r.status() == 200) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), ready)
        .await
        .expect("repoll serve ready (60 s hang guard)");
}

/// Submits a query while Redis runs (202); the URL that reads it.
async fn submit_before_the_stall(http: &reqwest::Client, base: &str) -> String {
    let submitted = http
        .post(format!("{base}/api/v1/queries"))
        .json(&json!({ "query": "asked before the stall" }))
        .send()
        .await
        .unwrap();
    assert_eq!(submitted.status(), 202);
    let id = submitted.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    format!("{base}/api/v1/queries/{id}")
}

/// Checks the read's and the submit's answers are each the handler's JSON 503 `unavailable`
/// with `Retry-After: 1` (not the request timeout's).
async fn check_both_are_the_handlers_503_with_retry_after(
    read: reqwest::Result<reqwest::Response>,
    submit: reqwest::Result<reqwest::Response>,
) {
    for (what, res) in [("read", read), ("submit", submit)] {
        let res = res.unwrap();
        let status = res.status().as_u16();
        let retry_after = res.headers().get("retry-after").cloned();
        let text = res.text().await.unwrap();
        assert_eq!(status, 503, "{what}: {text}");
        let body: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{what}: not the API's JSON error ({e}): {text:?}"));
        assert_eq!(body["error"]["code"], "unavailable", "{what}: {text}");
        assert_eq!(
            body["error"]["message"], "the queue is unavailable; try again shortly",
            "{what}: the handler's answer to a Redis error, not the request timeout's: {text}"
        );
        assert_eq!(
            retry_after.as_ref().and_then(|v| v.to_str().ok()),
            Some("1"),
            "{what}"
        );
    }
}

/// Reads `read_url` until it answers 200 (60 s hang guard); the view.
async fn wait_until_the_read_answers_again(http: &reqwest::Client, read_url: &str) -> Value {
    let back = async {
        loop {
            let r = http.get(read_url).send().await.unwrap();
            if r.status() == 200 {
                return r.json::<Value>().await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), back)
        .await
        .expect("reads answer again once Redis is back (60 s hang guard)")
}

/// `REPOLL_REDIS_REQUEST_TIMEOUT_MS` through the real `repoll serve`: while its Redis is
/// stopped (SIGSTOP, not resumed until the answers are in), a read and a submit each answer
/// a JSON 503 `unavailable` with `Retry-After`, and do so while Redis is still stopped.
///
/// Which timeout cut them is proved by order, not by speed. The setting is twice its default,
/// and no answer comes before it has passed (a timer never fires early): the default, or a
/// setting not wired, fails. The request timeout (`REPOLL_REQUEST_TIMEOUT_MS`, whose 503 is
/// the layer's "try again shortly" without `Retry-After`) is set between this setting and the
/// workers' longer Redis timeout (`queue::RESPONSE_TIMEOUT`): had the web side used the
/// workers' connection, or no Redis timeout at all, the request timeout would have answered
/// first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_stall_is_a_503_after_the_web_sides_redis_timeout() {
    let (redis_timeout, request_timeout) = redis_and_request_timeouts_in_the_order_relied_on();

    let (redis, _dir) = start_redis().await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let _serve = spawn_serve_with_timeouts(redis.url(), port, redis_timeout, request_timeout);
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    wait_until_serve_is_ready(&http, &base).await;
    let read_url = submit_before_the_stall(&http, &base).await;

    let stopped = StoppedRedis::stop(redis.pid().expect("redis-server runs"));
    let asked = std::time::Instant::now();
    let answers = async {
        tokio::join!(
            http.get(&read_url).send(),
            http.post(format!("{base}/api/v1/queries"))
                .json(&json!({ "query": "asked during the stall" }))
                .send()
        )
    };
    // A hang guard only (Redis stays stopped until the answers are in, or this runs out).
    let (read, submit) = tokio::time::timeout(Duration::from_secs(120), answers)
        .await
        .expect("no answer while Redis was stopped for 120 s");
    let waited = asked.elapsed();
    assert!(
        stopped.still_stopped(),
        "the answers came while Redis was stopped"
    );
    check_both_are_the_handlers_503_with_retry_after(read, submit).await;
    assert!(
        waited >= redis_timeout,
        "answered after {waited:?}, before the configured {redis_timeout:?} had passed: \
         the setting is not what cut the requests"
    );

    // Redis back: the same read answers again on the same connection.
    drop(stopped);
    let view = wait_until_the_read_answers_again(&http, &read_url).await;
    assert_eq!(view["query"], "asked before the stall", "{view}");
    redis.stop().await;
}
