//! The public JSON API driven through the real router (`oneshot`), against a private
//! redis-server, with the simulator and a worker in-process where a test needs progress.

mod common;
use common::{connect_queue, heartbeats, start_redis, tempdir};

use std::{net::SocketAddr, time::Duration};

use app::context::AppContext;
use axum::{
    body::Body,
    extract::ConnectInfo,
    http::{HeaderMap, Request},
    Router,
};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use server::{
    api::{ApiArgs, ApiState},
    managed_redis::ManagedRedis,
    web::{self, Limits, WebState},
};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// What a test may change about the server.
struct Opts {
    /// Run the simulator and a worker (otherwise tasks never progress).
    worker: bool,
    api: ApiArgs,
    caps: server::live_hub::StreamCaps,
    trust_forwarded: bool,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            worker: false,
            api: ApiArgs {
                rate_per_min: 0,
                ..ApiArgs::default()
            },
            caps: Default::default(),
            trust_forwarded: false,
        }
    }
}

struct Env {
    router: Router,
    queue: queue::Queue,
    sim_url: String,
    redis: Option<ManagedRedis>,
    stop: CancellationToken,
    _dir: tempdir::Dir,
}

impl Env {
    async fn start(opts: Opts) -> Env {
        let (redis, dir) = start_redis().await;
        let url = redis.url().to_string();
        let queue = connect_queue(&url, "apitest").await;
        let stop = CancellationToken::new();

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let sim_addr = listener.local_addr().unwrap();
        tokio::spawn(sim::serve(
            listener,
            sim::SimArgs::default(),
            stop.clone().cancelled_owned(),
        ));
        if opts.worker {
            let upstream = worker::Upstream::new(&worker::UpstreamArgs {
                url: format!("http://{sim_addr}/api/query?q={{key}}"),
                ..Default::default()
            })
            .unwrap();
            let policy = worker::PolicyArgs {
                poll_interval_ms: 100,
                poll_multiplier: 1.0,
                ..Default::default()
            };
            let w = worker::Worker::new(
                queue.clone(),
                redis::Client::open(url.as_str()).unwrap(),
                upstream,
                policy,
                worker::WorkerArgs {
                    concurrency: 4,
                    grace_ms: 200,
                    ..Default::default()
                },
            );
            tokio::spawn(w.run(stop.clone().cancelled_owned()));
        }

        let live = server::live_hub::Live::start(
            redis::Client::open(url.as_str()).unwrap(),
            queue.channels().dashboard,
            opts.caps,
            stop.clone(),
        );
        let state = WebState {
            live,
            api: ApiState::new(&opts.api, opts.trust_forwarded),
            admin: Default::default(),
            leptos_options: web::leptos_options("target/site"),
            app: AppContext {
                queue: queue.clone(),
                named: Default::default(),
                enqueue_policy: Default::default(),
                admin: Default::default(),
                first_answer: Duration::from_millis(opts.api.first_answer_ms),
            },
        };
        // The request timeout well above the queue's Redis response timeout (10 s), as
        // `repoll serve` sets it above its web connection's (2 s): a Redis error is answered
        // by the handler, never raced by this layer's own 503.
        assert!(queue::RESPONSE_TIMEOUT < Duration::from_secs(60));
        let router = web::router(
            state,
            Limits {
                body_bytes: 64 * 1024,
                timeout: Duration::from_secs(60),
            },
            Router::new(),
        );
        Env {
            router,
            queue,
            sim_url: format!("http://{sim_addr}"),
            redis: Some(redis),
            stop,
            _dir: dir,
        }
    }

    async fn send(&self, req: Request<Body>) -> Reply {
        let res = self.router.clone().oneshot(req).await.unwrap();
        let status = res.status().as_u16();
        let headers = res.headers().clone();
        let body = res.into_body().collect().await.unwrap().to_bytes();
        let text = String::from_utf8_lossy(&body).into_owned();
        let json = serde_json::from_str(&text).unwrap_or(Value::Null);
        Reply {
            status,
            headers,
            text,
            json,
        }
    }

    async fn submit(&self, query: &str) -> Reply {
        self.send(post_json(&json!({ "query": query }).to_string()))
            .await
    }

    async fn get(&self, uri: &str) -> Reply {
        self.send(Request::get(uri).body(Body::empty()).unwrap())
            .await
    }

    async fn sim_key(&self, key: &str) -> Value {
        let stats: Value = reqwest::get(format!("{}/_sim/stats", self.sim_url))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        stats["keys"][key].clone()
    }

    /// Serves this router through the real accept loop (`server::http_server::serve`, as
    /// `repoll serve` does) on a free port of 127.0.0.1; the address. Stops with the env.
    async fn listen(&self) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(server::http_server::serve(
            listener,
            self.router.clone(),
            server::http_server::ConnLimits {
                max_connections: 64,
                header_timeout: Duration::from_secs(10),
            },
            Default::default(),
            self.stop.clone(),
            Duration::from_millis(200),
        ));
        addr
    }

    async fn stop(mut self) {
        self.stop.cancel();
        if let Some(r) = self.redis.take() {
            r.stop().await;
        }
    }
}

#[derive(Debug)]
struct Reply {
    status: u16,
    headers: HeaderMap,
    text: String,
    json: Value,
}

impl Reply {
    /// Asserts the API's error shape and returns the code.
    fn error_code(&self) -> &str {
        assert!(
            self.json["error"]["message"].is_string(),
            "error shape: {} {}",
            self.status,
            self.text
        );
        self.json["error"]["code"].as_str().unwrap()
    }
}

fn post_json(body: &str) -> Request<Body> {
    Request::post("/api/v1/queries")
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap()
}

/// Polls `GET /api/v1/queries/{id}` until it is final (a 60 s hang guard, not a timing).
async fn wait_final(env: &Env, id: &str) -> Value {
    let guard = Duration::from_secs(60);
    let end = std::time::Instant::now() + guard;
    while std::time::Instant::now() < end {
        let r = env.get(&format!("/api/v1/queries/{id}")).await;
        assert_eq!(r.status, 200, "{}", r.text);
        if r.json["status"] != "processing" {
            return r.json;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("query {id} did not finish within {guard:?}");
}

#[tokio::test]
async fn bad_input_is_4xx_with_the_error_shape() {
    let env = Env::start(Opts::default()).await;

    for (body, status, code) in [
        (r#"{"query": ""}"#, 422, "invalid_query"),
        (r#"{"query": "   \t "}"#, 422, "invalid_query"),
        (r#"{"query": "a\u0007b"}"#, 422, "invalid_query"),
        (r#"{"nope": 1}"#, 422, "invalid_body"),
        (r#"{"query": 5}"#, 422, "invalid_body"),
        (r#"{"query": "#, 400, "malformed_json"),
        ("not json at all", 400, "malformed_json"),
    ] {
        let r = env.send(post_json(body)).await;
        assert_eq!(r.status, status, "{body}: {}", r.text);
        assert_eq!(r.error_code(), code, "{body}");
    }

    let long = "x".repeat(513);
    let r = env.submit(&long).await;
    assert_eq!((r.status, r.error_code()), (422, "invalid_query"));
    // 512 characters after trimming are fine.
    let ok = format!("  {}  ", "y".repeat(512));
    assert_eq!(env.submit(&ok).await.status, 202);

    // Wrong or missing content type.
    let r = env
        .send(
            Request::post("/api/v1/queries")
                .header("content-type", "text/plain")
                .body(Body::from(r#"{"query":"a"}"#))
                .unwrap(),
        )
        .await;
    assert_eq!((r.status, r.error_code()), (415, "unsupported_media_type"));
    let r = env
        .send(
            Request::post("/api/v1/queries")
                .body(Body::from(r#"{"query":"a"}"#))
                .unwrap(),
        )
        .await;
    assert_eq!((r.status, r.error_code()), (415, "unsupported_media_type"));

    // Oversized: beyond the API's own limit, a JSON 413 ...
    let big = format!(r#"{{"query": "{}"}}"#, "z".repeat(8 * 1024));
    let r = env.send(post_json(&big)).await;
    assert_eq!((r.status, r.error_code()), (413, "payload_too_large"));
    // ... and beyond the global limit (a layer, before any handler), the same JSON 413.
    let huge = format!(r#"{{"query": "{}"}}"#, "z".repeat(100 * 1024));
    let r = env.send(post_json(&huge)).await;
    assert_eq!((r.status, r.error_code()), (413, "payload_too_large"));

    // The query page's form (a server function) answers the same mistake with a 4xx and
    // the reason, never a 500.
    {
        use leptos::server_fn::ServerFn;
        let r = env
            .send(
                Request::post(app::pages::SubmitQuery::PATH)
                    .header("content-type", "application/x-www-form-urlencoded")
                    .body(Body::from(format!("query={}", "x".repeat(600))))
                    .unwrap(),
            )
            .await;
        assert_eq!(r.status, 422, "{}", r.text);
        assert!(r.text.contains("at most 512"), "{}", r.text);
    }

    // Invisible and bidirectional-control characters are refused like control characters.
    for q in ["pay\u{200B}ment", "invoice\u{202E}fdp.exe", "\u{FEFF}x"] {
        let r = env.submit(q).await;
        assert_eq!((r.status, r.error_code()), (422, "invalid_query"), "{q:?}");
    }

    // Unknown ids and malformed ids are 404 in the error shape, on both read endpoints.
    for uri in [
        "/api/v1/queries/0123456789abcdef0123456789abcdef",
        "/api/v1/queries/NOT-AN-ID",
        "/api/v1/queries/0123456789ABCDEF0123456789ABCDEF",
        "/api/v1/queries/0123456789abcdef0123456789abcdef/events",
        "/api/v1/queries/..%2F..%2Fetc/events",
        "/api/v1/nothing/here",
    ] {
        let r = env.get(uri).await;
        assert_eq!((r.status, r.error_code()), (404, "not_found"), "{uri}");
    }
    env.stop().await;
}

#[tokio::test]
async fn submit_is_202_then_done_with_partial_first_and_one_chain_of_polls() {
    // A first-answer budget of a minute: the submit waits for the first poll however slow the
    // machine, and answers as soon as it is in (the default 300 ms would make this a race).
    let env = Env::start(Opts {
        worker: true,
        api: ApiArgs {
            rate_per_min: 0,
            first_answer_ms: 60_000,
            ..ApiArgs::default()
        },
        ..Default::default()
    })
    .await;
    let key = "order-7 polls=4";
    let r = env.submit(key).await;
    assert_eq!(r.status, 202, "{}", r.text);
    let v = &r.json;
    let id = v["id"].as_str().unwrap().to_string();
    assert_eq!(id.len(), 32);
    assert_eq!(v["status"], "processing");
    assert_eq!(v["query"], key);
    assert!(v["result"].is_null());
    assert!(v["created_at"].as_i64().unwrap() > 0);
    // The submit waited for the first poll: partial data is in the first answer, structured
    // (the upstream sent JSON). (How many polls are in by then depends on how soon the submit
    // read after the first: the worker polls again 100 ms later.)
    assert!(v["partial"].is_object(), "partial in first answer: {v}");
    assert!(
        matches!(v["polls"].as_u64(), Some(1..=3)),
        "not done yet: {v}"
    );
    assert_eq!(
        r.headers["location"].to_str().unwrap(),
        format!("/api/v1/queries/{id}")
    );

    let done = wait_final(&env, &id).await;
    assert_eq!(done["status"], "done", "{done}");
    assert!(done["result"].is_object(), "{done}");
    assert!(done["partial"].is_null());
    assert!(done["error"].is_null());

    // A fresh stored result answers 200 at once, without a new task.
    let again = env.submit("  order-7   polls=4 ").await;
    assert_eq!(again.status, 200);
    assert_eq!(again.json["status"], "done");
    assert_eq!(again.json["id"], id.as_str());
    assert_eq!(again.json["result"], done["result"]);

    // One chain of upstream polls: 3 processing answers + 1 done.
    let sim = env.sim_key(key).await;
    assert_eq!(sim["calls"], 4, "{sim}");
    assert_eq!(sim["done"], 1, "{sim}");
    env.stop().await;
}

#[tokio::test]
async fn failed_upstream_is_failed_with_a_plain_reason() {
    let env = Env::start(Opts {
        worker: true,
        ..Default::default()
    })
    .await;
    let r = env
        .submit("broken-1 status=failed error=no_such_order")
        .await;
    assert!(matches!(r.status, 200 | 202), "{}", r.text);
    let id = r.json["id"].as_str().unwrap().to_string();
    let v = wait_final(&env, &id).await;
    assert_eq!(v["status"], "failed", "{v}");
    let error = v["error"].as_str().unwrap();
    assert!(error.contains("refused"), "{error}");
    assert!(error.contains("no_such_order"), "{error}");
    env.stop().await;
}

#[tokio::test]
async fn sse_sends_state_then_final_and_closes() {
    let env = Env::start(Opts {
        worker: true,
        api: ApiArgs {
            rate_per_min: 0,
            first_answer_ms: 0,
            ..ApiArgs::default()
        },
        ..Default::default()
    })
    .await;
    let r = env.submit("stream-1 polls=3").await;
    assert_eq!(r.status, 202);
    let id = r.json["id"].as_str().unwrap().to_string();

    let res = env
        .router
        .clone()
        .oneshot(
            Request::get(format!("/api/v1/queries/{id}/events"))
                .header("last-event-id", "12345")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 200);
    assert_eq!(
        res.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    // The body ends by itself after the final event.
    let body = tokio::time::timeout(Duration::from_secs(60), res.into_body().collect())
        .await
        .expect("stream closes after the final event (60 s hang guard)")
        .unwrap()
        .to_bytes();
    let text = String::from_utf8_lossy(&body);
    let events: Vec<(u64, Value)> = text
        .split("\n\n")
        .filter(|block| block.contains("event: state"))
        .map(|block| {
            let id = block
                .lines()
                .find_map(|l| l.strip_prefix("id: "))
                .unwrap()
                .parse()
                .unwrap();
            let data = block
                .lines()
                .find_map(|l| l.strip_prefix("data: "))
                .unwrap();
            (id, serde_json::from_str(data).unwrap())
        })
        .collect();
    assert!(events.len() >= 2, "state then final: {text}");
    assert_eq!(events[0].1["status"], "processing", "{text}");
    let last = &events.last().unwrap().1;
    assert_eq!(last["status"], "done", "{text}");
    assert!(last["result"].is_object());
    assert!(
        events.windows(2).all(|w| w[0].0 <= w[1].0),
        "event ids grow: {text}"
    );
    assert_eq!(
        events.iter().filter(|e| e.1["status"] == "done").count(),
        1,
        "one final event: {text}"
    );

    // A stream opened on a finished query sends the final state and closes at once.
    let res = env
        .router
        .clone()
        .oneshot(
            Request::get(format!("/api/v1/queries/{id}/events"))
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let body = tokio::time::timeout(Duration::from_secs(30), res.into_body().collect())
        .await
        .expect("closes by itself (30 s hang guard)")
        .unwrap()
        .to_bytes();
    let text = String::from_utf8_lossy(&body);
    assert_eq!(text.matches("event: state").count(), 1, "{text}");
    assert!(text.contains(r#""status":"done""#), "{text}");
    env.stop().await;
}

#[tokio::test]
async fn concurrent_submits_of_the_same_query_share_one_task() {
    // No worker: the task stays put, so both answers are "processing".
    let env = Env::start(Opts {
        api: ApiArgs {
            rate_per_min: 0,
            first_answer_ms: 0,
            ..ApiArgs::default()
        },
        ..Default::default()
    })
    .await;
    let (a, b) = tokio::join!(env.submit("shared-1"), env.submit("  shared-1  "));
    assert_eq!((a.status, b.status), (202, 202));
    assert_eq!(a.json["id"], b.json["id"]);
    let stats = env.queue.stats().await.unwrap();
    assert_eq!(stats.ready, 1, "{stats:?}");

    // The shared code says which request created the task and which joined it.
    let ctx = AppContext {
        queue: env.queue.clone(),
        named: Default::default(),
        enqueue_policy: Default::default(),
        admin: Default::default(),
        first_answer: Duration::ZERO,
    };
    let (x, y) = tokio::join!(
        app::query_view::submit(&ctx, "shared-2"),
        app::query_view::submit(&ctx, "shared-2")
    );
    let (x, y) = (x.unwrap(), y.unwrap());
    assert_eq!(x.0.id, y.0.id);
    let mut created = [x.1, y.1];
    created.sort();
    assert_eq!(created, [false, true], "one Created, one Joined");

    let got = env
        .get(&format!(
            "/api/v1/queries/{}",
            a.json["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(got.status, 200);
    assert_eq!(got.json["status"], "processing");
    assert!(got.json["next_poll_at"].as_i64().is_some());
    env.stop().await;
}

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
    assert_eq!(r.status, 429, "{}", r.text);
    assert!(r.headers.contains_key("retry-after"));
    assert!(r.text.contains("Too many queries"), "{}", r.text);
    assert_eq!(env.queue.stats().await.unwrap().ready, before);
    // Another client's form post goes through (a redirect to the query's page).
    let r = env.send(form([10, 0, 0, 3], "r6")).await;
    assert!(r.status < 400, "{} {}", r.status, r.text);
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

/// Whether the task of `query` exists in Redis (a record or a stored result).
async fn exists(env: &Env, query: &str) -> bool {
    let id = queue::TaskId::of_query(&queue::normalise_query(query).unwrap());
    env.queue.get(&id).await.unwrap().is_some()
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
        api: ApiArgs {
            rate_per_min: 0,
            first_answer_ms: 0,
            ..ApiArgs::default()
        },
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
            (r.status, r.text.as_str()),
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
    assert!(r.status < 400, "{} {}", r.status, r.text);
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
        r.text
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
        r.text
    );
    assert_eq!(
        r.json["error"]["message"],
        "the queue is unavailable; try again shortly"
    );
    assert_eq!(r.headers["retry-after"], "1");
    env.stop().await;
}

#[tokio::test]
async fn openapi_document_lists_every_endpoint() {
    let env = Env::start(Opts::default()).await;
    let r = env.get("/api/v1/openapi.json").await;
    assert_eq!(r.status, 200);
    let doc = &r.json;
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let paths = doc["paths"].as_object().unwrap();
    for p in [
        "/api/v1/queries",
        "/api/v1/queries/{id}",
        "/api/v1/queries/{id}/events",
        "/api/v1/openapi.json",
    ] {
        assert!(paths.contains_key(p), "{p} documented");
    }
    let post = &doc["paths"]["/api/v1/queries"]["post"]["responses"];
    for code in ["200", "202", "400", "413", "415", "422", "429", "503"] {
        assert!(post.get(code).is_some(), "POST documents {code}");
    }
    for schema in ["Query", "Error", "SubmitBody"] {
        assert!(doc["components"]["schemas"].get(schema).is_some());
    }
    // The document states the same character rule the API applies.
    let query = &doc["components"]["schemas"]["SubmitBody"]["properties"]["query"];
    assert_eq!(
        query["pattern"].as_str(),
        Some(queue::query_pattern().as_str())
    );
    let stream = &doc["paths"]["/api/v1/queries/{id}/events"]["get"]["responses"]["200"]["content"]
        ["text/event-stream"];
    assert_eq!(stream["itemSchema"]["$ref"], "#/components/schemas/Query");
    env.stop().await;
}

#[tokio::test]
async fn one_text_typed_two_ways_is_one_query() {
    let env = Env::start(Opts {
        api: ApiArgs {
            rate_per_min: 0,
            first_answer_ms: 0,
            ..ApiArgs::default()
        },
        ..Default::default()
    })
    .await;
    let composed = env.submit("caf\u{e9} report").await;
    let decomposed = env.submit("cafe\u{301} report").await;
    assert_eq!(composed.status, 202, "{}", composed.text);
    assert_eq!(composed.json["id"], decomposed.json["id"]);
    assert_eq!(decomposed.json["query"], "caf\u{e9} report");
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
        api: ApiArgs {
            rate_per_min: 0,
            first_answer_ms: 0,
            ..ApiArgs::default()
        },
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
            rate_per_min: 0,
            first_answer_ms: 0,
            sse_keepalive_ms: 100,
            ..ApiArgs::default()
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

    let (redis, _dir) = start_redis().await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_repoll"));
    cmd.args(["serve", "--workers", "0"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("REDIS_URL", redis.url())
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
    let _serve = Serve(cmd.spawn().expect("repoll serve"));
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
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
    let read_url = format!("{base}/api/v1/queries/{id}");

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
    assert!(
        waited >= redis_timeout,
        "answered after {waited:?}, before the configured {redis_timeout:?} had passed: \
         the setting is not what cut the requests"
    );

    // Redis back: the same read answers again on the same connection.
    drop(stopped);
    let back = async {
        loop {
            let r = http.get(&read_url).send().await.unwrap();
            if r.status() == 200 {
                return r.json::<Value>().await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let view = tokio::time::timeout(Duration::from_secs(60), back)
        .await
        .expect("reads answer again once Redis is back (60 s hang guard)");
    assert_eq!(view["query"], "asked before the stall", "{view}");
    redis.stop().await;
}

fn post_json_with(body: &str, header: (&str, &str)) -> Request<Body> {
    let mut req = post_json(body);
    req.headers_mut().insert(
        axum::http::HeaderName::from_bytes(header.0.as_bytes()).unwrap(),
        axum::http::HeaderValue::from_str(header.1).unwrap(),
    );
    req
}

async fn tenant_of(env: &Env, id: &str) -> String {
    env.queue
        .get(id)
        .await
        .unwrap()
        .unwrap()
        .task
        .unwrap()
        .tenant
}

#[tokio::test]
async fn a_submit_names_its_tenant_by_body_or_by_the_operators_header() {
    // Without a tenant header: the body's `tenant`, checked.
    let env = Env::start(Opts::default()).await;
    let r = env
        .send(post_json(
            &json!({"query": "t one", "tenant": "acme"}).to_string(),
        ))
        .await;
    assert_eq!(r.status, 202, "{}", r.text);
    assert_eq!(
        tenant_of(&env, r.json["id"].as_str().unwrap()).await,
        "acme"
    );
    let r = env.submit("t two").await;
    assert_eq!(tenant_of(&env, r.json["id"].as_str().unwrap()).await, "");
    for bad in ["a|b", "with space", &"x".repeat(65)] {
        let r = env
            .send(post_json(
                &json!({"query": "t bad", "tenant": bad}).to_string(),
            ))
            .await;
        assert_eq!(r.status, 422, "{bad:?}: {}", r.text);
        assert_eq!(r.json["error"]["code"], "invalid_tenant", "{}", r.text);
    }
    assert!(
        !exists(&env, "t bad").await,
        "a refused tenant wrote nothing"
    );
    // A header given while none is configured means nothing.
    let r = env
        .send(post_json_with(
            &json!({"query": "t three"}).to_string(),
            ("x-api-key-id", "other"),
        ))
        .await;
    assert_eq!(tenant_of(&env, r.json["id"].as_str().unwrap()).await, "");
    env.stop.cancel();

    // With the operator's header: it alone names the tenant; the body's is ignored.
    let env = Env::start(Opts {
        api: ApiArgs {
            rate_per_min: 0,
            tenant_header: Some(axum::http::HeaderName::from_static("x-api-key-id")),
            ..ApiArgs::default()
        },
        ..Opts::default()
    })
    .await;
    let r = env
        .send(post_json_with(
            &json!({"query": "h one", "tenant": "spoof"}).to_string(),
            ("x-api-key-id", "key-17"),
        ))
        .await;
    assert_eq!(r.status, 202, "{}", r.text);
    assert_eq!(
        tenant_of(&env, r.json["id"].as_str().unwrap()).await,
        "key-17"
    );
    let r = env
        .send(post_json(
            &json!({"query": "h two", "tenant": "spoof"}).to_string(),
        ))
        .await;
    assert_eq!(tenant_of(&env, r.json["id"].as_str().unwrap()).await, "");
    let r = env
        .send(post_json_with(
            &json!({"query": "h three"}).to_string(),
            ("x-api-key-id", "not|valid"),
        ))
        .await;
    assert_eq!(r.status, 422, "{}", r.text);
    assert_eq!(r.json["error"]["code"], "invalid_tenant");
    env.stop.cancel();
}
