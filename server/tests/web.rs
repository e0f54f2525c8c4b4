//! The router driven with `oneshot`, against a real redis-server started through the same
//! managed-Redis code `repoll serve` uses.

use crate::common;
use common::{connect_queue, start_redis, tempdir};

use std::time::Duration;

use app::context::AppContext;
use axum::{body::Body, http::Request, Router};
use http_body_util::BodyExt;
use server::{
    managed_redis::ManagedRedis,
    web::{self, Limits, WebParts, WebState},
};
use tower::ServiceExt;

async fn router_for(url: &str) -> Router {
    router_with(url, Router::new()).await
}

/// The router with `extra` routes merged in (as `repoll serve` merges `/metrics`), under
/// every layer.
async fn router_with(url: &str, extra: Router) -> Router {
    router_with_timeout(url, extra, Duration::from_secs(5)).await
}

/// [`router_with`] with another request timeout (`REPOLL_REQUEST_TIMEOUT_MS`).
async fn router_with_timeout(url: &str, extra: Router, timeout: Duration) -> Router {
    let queue = connect_queue(url, "webtest").await;
    let live = server::live_hub::Live::start(
        redis::Client::open(url).unwrap(),
        queue.channels().dashboard,
        Default::default(),
        Default::default(),
    );
    let state = WebState::new(WebParts {
        live,
        api: Default::default(),
        admin: Default::default(),
        leptos_options: web::leptos_options("target/site"),
        app: AppContext {
            queue,
            named: Default::default(),
            enqueue_policy: Default::default(),
            admin: Default::default(),
            first_answer: Duration::ZERO,
            trace_url: None,
        },
    });
    web::router(
        state,
        Limits {
            body_bytes: 1024,
            timeout,
        },
        extra,
    )
}

async fn get(router: &Router, uri: &str) -> (u16, String) {
    let res = router
        .clone()
        .oneshot(Request::get(uri).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = res.status().as_u16();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn health_ready_and_server_rendered_page() {
    let (redis, _dir) = start_redis().await;
    let router = router_for(redis.url()).await;

    assert_eq!(get(&router, "/healthz").await, (200, "ok".to_string()));
    assert_eq!(get(&router, "/readyz").await.0, 200);

    let (status, html) = get(&router, "/").await;
    assert_eq!(status, 200);
    assert!(
        html.contains("data-testid=\"query-input\""),
        "SSR renders the query form: {html}"
    );
    // Which Redis, its key count and the queue name are for signed-in operators only.
    assert!(
        !html.contains("redis_version") && !html.contains("Redis: connected"),
        "the public page shows no Redis internals: {html}"
    );
    assert!(
        html.contains("/pkg/repoll.js"),
        "hydration script is linked"
    );

    let (status, _) = get(&router, "/definitely/not/here").await;
    assert_eq!(status, 404);
    redis.stop().await;
}

/// The `value` of the query form's input in a page, unescaped ("" without one).
fn query_input_value(page: &str) -> String {
    let at = page
        .find("data-testid=\"query-input\"")
        .expect("the query input");
    let start = page[..at].rfind("<input").expect("its tag");
    let tag = &page[start..start + page[start..].find('>').expect("its end")];
    tag.split_once(" value=\"")
        .map(|(_, rest)| rest.split('"').next().unwrap_or_default())
        .unwrap_or_default()
        .replace("&amp;", "&")
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
}

/// The query form posted without JavaScript (`Accept: text/html`), over a real socket: a
/// refused query (too long, empty, an unknown upstream) is the form page again, 422, with the
/// reason on it — also when the browser sends no `Referer` (referrers turned off, `curl`),
/// where Leptos alone would answer a bare redirect to `/` and the reason would be lost — and
/// with the refused text back in the input. An
/// accepted one goes on to its page: 302 for a browser, 303 for a program's post.
#[tokio::test]
async fn a_refused_no_js_query_is_the_422_page_with_its_reason_with_or_without_referer() {
    use leptos::server_fn::ServerFn;
    let (redis, _dir) = start_redis().await;
    let server = common::listen(router_for(redis.url()).await).await;
    let http = &server.http;
    let refused = [
        (format!("query={}", "x".repeat(600)), "at most 512"),
        ("query=+++".to_string(), "query is empty"),
        ("query=a&upstream=nope".to_string(), "unknown upstream"),
    ];
    let own_page = http.url("/");
    for (body, reason) in &refused {
        for referer in [None, Some(own_page.as_str())] {
            let mut req = http
                .client
                .post(http.url(app::pages::SubmitQuery::PATH))
                .header("content-type", "application/x-www-form-urlencoded")
                .header("accept", "text/html")
                .body(body.clone());
            if let Some(r) = referer {
                req = req.header("referer", r);
            }
            let a = http.send(req).await;
            let what = format!("{body:.40} with referer {referer:?}");
            assert_eq!(a.status, 422, "{what}: {:?} {}", a.headers, a.body);
            assert!(a.header("location").is_none(), "{what}");
            assert!(
                a.body.contains("data-testid=\"query-input\""),
                "{what}: the form"
            );
            let shown = common::admin::testid_text(&a.body, "query-submit-error");
            assert!(shown.contains(reason), "{what}: {shown:?}");
            // The refused text is back in the input, to be corrected (issue 43 row 12).
            let text: String = form_urlencoded::parse(body.as_bytes())
                .find(|(k, _)| k == "query")
                .map(|(_, v)| v.into_owned())
                .unwrap();
            assert_eq!(query_input_value(&a.body), text, "{what}");
        }
    }
    // An accepted query still goes on to its page.
    let a = http
        .send(
            http.client
                .post(http.url(app::pages::SubmitQuery::PATH))
                .header("content-type", "application/x-www-form-urlencoded")
                .header("accept", "text/html")
                .body("query=no+referer+needed"),
        )
        .await;
    assert_eq!(a.status, 302, "{}", a.body);
    assert!(
        a.header("location").is_some_and(|l| l.starts_with("/q/")),
        "{:?}",
        a.headers
    );
    // A program's form post (curl: `Accept: */*`) is sent on to the page as well (303), not
    // answered 200 with a bare JSON id (issue 43, row 12).
    let a = http
        .send(
            http.client
                .post(http.url(app::pages::SubmitQuery::PATH))
                .header("content-type", "application/x-www-form-urlencoded")
                .header("accept", "*/*")
                .body("query=from+a+program"),
        )
        .await;
    assert_eq!(a.status, 303, "{}", a.body);
    assert!(
        a.header("location").is_some_and(|l| l.starts_with("/q/")),
        "{:?}",
        a.headers
    );
    drop(server);
    redis.stop().await;
}

#[tokio::test]
async fn readyz_is_503_when_redis_goes_away() {
    let (redis, _dir) = start_redis().await;
    let router = router_for(redis.url()).await;
    assert_eq!(get(&router, "/readyz").await.0, 200);
    redis.stop().await;
    let (status, _) = get(&router, "/readyz").await;
    assert_eq!(status, 503);
    // Liveness does not depend on Redis.
    assert_eq!(get(&router, "/healthz").await.0, 200);
}

#[tokio::test]
async fn oversized_body_is_413() {
    let (redis, _dir) = start_redis().await;
    let router = router_for(redis.url()).await;
    let res = router
        .clone()
        .oneshot(
            Request::post("/")
                .header("content-type", "application/x-www-form-urlencoded")
                .header("content-length", "4096")
                .body(Body::from(vec![b'a'; 4096]))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 413);
    redis.stop().await;
}

#[tokio::test]
async fn missing_redis_server_binary_gives_install_instructions() {
    let dir = tempdir::Dir::new();
    let err = ManagedRedis::start("/nonexistent/redis-server".as_ref(), dir.path(), 0)
        .await
        .expect_err("start fails");
    let msg = err.to_string();
    assert!(msg.contains("apt-get install -y redis-server"), "{msg}");
    assert!(msg.contains("REDIS_URL"), "{msg}");
}

/// A handler's panic is one failed request (500 "internal error"), not a dead server: the
/// panicking route comes in through the router's extra routes (no test route in the
/// product), so it runs under every layer of the real router; the next requests are served.
#[tokio::test]
async fn a_panicking_handler_is_a_500_and_the_router_carries_on() {
    let (redis, _dir) = start_redis().await;
    let boom = Router::new().route(
        "/boom",
        axum::routing::get(|| async {
            if true {
                panic!("a handler's bug");
            }
            "unreachable"
        }),
    );
    let router = router_with(redis.url(), boom).await;
    assert_eq!(get(&router, "/boom").await, (500, "internal error".into()));
    assert_eq!(get(&router, "/healthz").await, (200, "ok".to_string()));
    assert_eq!(get(&router, "/boom").await.0, 500);
    assert_eq!(get(&router, "/readyz").await.0, 200);
    redis.stop().await;
}

/// Pages render while other routers are being built in the same process. Building a router
/// generates Leptos's route list, which suppresses resource loading through a process-global
/// flag; a page whose resource was first polled meanwhile waited forever (leptos-rs/leptos
/// #4773; CI saw an admin page time out that way). The router now generates the list once
/// per process. Without that, some of these renders hang until the 5 s timeout (503), and the
/// generation count is above one.
#[tokio::test]
async fn pages_render_while_other_routers_are_built() {
    use std::sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    };
    let (redis, _dir) = start_redis().await;
    let router = router_for(redis.url()).await;
    let queue = connect_queue(redis.url(), "webtest").await;
    let text = "rendered while routers are built";
    queue.enqueue(text, "", &Default::default()).await.unwrap();
    let id = model::TaskId::of_query(text);
    let stop = Arc::new(AtomicBool::new(false));
    let builder = {
        let (url, stop) = (redis.url().to_string(), stop.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let mut built = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    drop(router_for(&url).await);
                    built += 1;
                }
                built
            })
        })
    };
    for _ in 0..30 {
        let (status, html) = get(&router, &format!("/q/{id}")).await;
        assert_eq!(status, 200, "{html}");
        assert!(html.contains("rendered while routers are built"), "{html}");
    }
    stop.store(true, Ordering::Relaxed);
    let built = builder.join().unwrap();
    assert!(built > 0, "no router was built alongside");
    // The renders above pass most of the time even when routers regenerate the list (the hang
    // is a race); this is what fails deterministically: every router of this process, however
    // many tests built one, reused the first list.
    assert_eq!(
        server::web::route_lists_generated(),
        1,
        "the route list was generated again after the first router ({built} built here)"
    );
    redis.stop().await;
}

/// `REPOLL_REQUEST_TIMEOUT_MS`: a handler that has not answered in time is cut with a 503, but
/// a response already under way (a live stream's body) is never cut by it.
#[tokio::test]
async fn the_request_timeout_cuts_slow_answers_not_streams() {
    use axum::{body::Body, routing::get as route_get};
    let (redis, _dir) = start_redis().await;
    let extra = Router::new()
        .route(
            "/slow",
            route_get(|| async {
                tokio::time::sleep(Duration::from_secs(60)).await;
                "too late"
            }),
        )
        .route(
            "/stream",
            route_get(|| async {
                // Ten chunks over a second: five times the timeout.
                let chunks = futures::stream::unfold(0u32, |n| async move {
                    if n == 10 {
                        return None;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    Some((Ok::<_, std::io::Error>(format!("chunk {n}\n")), n + 1))
                });
                Body::from_stream(chunks)
            }),
        );
    let router = router_with_timeout(redis.url(), extra, Duration::from_millis(200)).await;
    let started = std::time::Instant::now();
    let (status, _) = get(&router, "/slow").await;
    assert_eq!(status, 503);
    // A hang guard, not a speed check: the handler would take a minute.
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "cut at the timeout, not when the handler finished"
    );
    let (status, body) = get(&router, "/stream").await;
    assert_eq!(status, 200);
    assert_eq!(body.lines().count(), 10, "{body}");
    assert!(body.ends_with("chunk 9\n"), "{body}");
    redis.stop().await;
}

/// The live hub's Pub/Sub connection is cut (CLIENT KILL, as a Redis restart or a proxy
/// would): the hub reconnects and bumps every watcher (`resync`), since whatever was
/// published meanwhile is lost; and it hears new messages again afterwards.
/// Waits (10 s at most) until `channel` has exactly one subscriber.
async fn one_subscriber(mut c: redis::aio::MultiplexedConnection, channel: &str) -> bool {
    for _ in 0..200 {
        let n: Vec<(String, u64)> = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(channel)
            .query_async(&mut c)
            .await
            .unwrap();
        if n.first().is_some_and(|(_, n)| *n == 1) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// The next event the hub routes (10 s hang guard).
async fn next_event(
    events: &mut tokio::sync::broadcast::Receiver<std::sync::Arc<server::live_hub::LiveEvent>>,
) -> server::live_hub::LiveEvent {
    let event = tokio::time::timeout(Duration::from_secs(10), events.recv())
        .await
        .expect("an event within 10 s (hang guard)")
        .expect("the hub is running");
    (*event).clone()
}

#[tokio::test]
async fn a_pubsub_reconnect_bumps_every_watcher() {
    use redis::AsyncCommands;
    use server::live_hub::LiveEvent;
    let (redis, _dir) = start_redis().await;
    let client = redis::Client::open(redis.url()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let channel = "repoll-test:dash";
    let live = server::live_hub::Live::start(
        client.clone(),
        channel.to_string(),
        Default::default(),
        Default::default(),
    );
    // Every event the hub routes, from before its subscriber task first runs (this test's
    // runtime has one thread and nothing has yielded to it yet).
    let mut events = live.subscribe();
    assert_eq!(
        next_event(&mut events).await,
        LiveEvent::Resync,
        "the first connection's own resync"
    );
    // Made after that resync: only a later event can bump it.
    // A real task id: a notice whose id does not parse is a resync, which would bump the
    // watcher too (and did, in this test's first version).
    let id = model::TaskId::of_query("watched task").to_string();
    let mut watch = live.watch_task(&id);
    assert!(
        one_subscriber(c.clone(), channel).await,
        "the hub subscribed (10 s hang guard)"
    );
    assert!(
        events.is_empty(),
        "nothing else happened yet: {:?}",
        events.try_recv()
    );

    let killed: u64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(killed, 1);
    assert_eq!(
        next_event(&mut events).await,
        LiveEvent::Resync,
        "the reconnect's resync"
    );
    let bumped = tokio::time::timeout(Duration::from_secs(10), watch.changed()).await;
    assert_eq!(bumped, Ok(true), "the reconnect bumped the watcher");

    // Connected again: a notice for the task reaches its watcher.
    assert!(
        one_subscriber(c.clone(), channel).await,
        "the hub subscribed again"
    );
    let _: u64 = c
        .publish(
            channel,
            format!(r#"{{"kind":"completed","id":"{id}","at_ms":1}}"#),
        )
        .await
        .unwrap();
    assert_eq!(
        next_event(&mut events).await,
        LiveEvent::Task {
            id: id.clone(),
            kind: "completed".into()
        },
        "the notice, not another resync"
    );
    let heard = tokio::time::timeout(Duration::from_secs(10), watch.changed()).await;
    assert_eq!(heard, Ok(true));
    redis.stop().await;
}

/// The live hub subscribes through the next seed when one does not answer (a cluster's first
/// seed may be the node a failover took away): with a dead first seed, notices still arrive.
#[tokio::test]
async fn the_live_hub_subscribes_through_the_next_seed_when_one_is_down() {
    use redis::AsyncCommands;
    use server::live_hub::LiveEvent;
    let (redis, _dir) = start_redis().await;
    let dead_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dead = redis::Client::open(format!("redis://127.0.0.1:{dead_port}")).unwrap();
    let alive = redis::Client::open(redis.url()).unwrap();
    let channel = "repoll-test:seeds";
    let live = server::live_hub::Live::start_seeds(
        vec![dead, alive.clone()],
        vec![channel.to_string()],
        Default::default(),
        Default::default(),
    );
    // From before the subscriber task first runs (one-thread runtime, nothing yielded yet).
    let mut events = live.subscribe();
    // The dead seed announces nothing; the resync is the live one's subscription.
    assert_eq!(next_event(&mut events).await, LiveEvent::Resync);
    let mut c = alive.get_multiplexed_async_connection().await.unwrap();
    assert!(
        one_subscriber(c.clone(), channel).await,
        "subscribed through the second seed (10 s hang guard)"
    );
    // Made after the resync: only the notice can bump it.
    // A real task id: a notice whose id does not parse is a resync, which would bump the
    // watcher too (and did, in this test's first version).
    let id = model::TaskId::of_query("seed task").to_string();
    let mut watch = live.watch_task(&id);
    let _: () = c
        .publish(
            channel,
            format!(r#"{{"kind":"completed","id":"{id}","at_ms":1}}"#),
        )
        .await
        .unwrap();
    assert_eq!(
        next_event(&mut events).await,
        LiveEvent::Task {
            id: id.clone(),
            kind: "completed".into()
        },
        "the notice, through the second seed"
    );
    let changed = tokio::time::timeout(Duration::from_secs(10), watch.changed()).await;
    assert_eq!(changed, Ok(true), "the notice reached the watcher");
    redis.stop().await;
}
