//! The admin side's security and speed, through the real router against a private
//! redis-server: every action and read refuses a request without a session (and changes
//! nothing — checked in Redis), cross-site requests are refused even with a valid session,
//! sign-in is rate-limited with one generic message, and a viewer cannot act. (Render times
//! with many tasks are measured by `scripts/bench-pages --tasks N`, not here.)

mod common;
use common::{connect_queue, heartbeats, start_redis, tempdir};

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use app::{
    auth::{AuthConfig, AuthSettings, Credential},
    context::AppContext,
    pages::admin::{
        actions::Act,
        bulk::{BulkAct, BulkPreview},
        leases::Leases,
        login::{SignIn, SignOut, Whoami},
        overview::Overview,
        task::ReadTask,
        tasks::ListTasks,
    },
};
use axum::{
    body::Body,
    extract::ConnectInfo,
    http::{HeaderMap, Request},
    Router,
};
use futures::StreamExt;
use http_body_util::BodyExt;
use leptos::server_fn::ServerFn;
use server::{
    admin::AdminState,
    managed_redis::ManagedRedis,
    web::{self, Limits, WebState},
};
use tower::ServiceExt;

const ADMIN_PW: &str = "correct horse battery staple";
const VIEWER_PW: &str = "just looking";
const HOST: &str = "admin.test:3000";

struct Env {
    redis: ManagedRedis,
    _dir: tempdir::Dir,
    router: Router,
    queue: queue::Queue,
    /// The named upstream `search` (its own queue), beside the default one.
    search: queue::Queue,
    /// The router's credentials and password-check slots.
    auth: AuthConfig,
    /// The live hub behind the router (its open streams are what the caps count).
    live: server::live_hub::Live,
}

async fn start() -> Env {
    start_with(false).await
}

/// `trust_forwarded`: REPOLL_TRUST_FORWARDED.
async fn start_with(trust_forwarded: bool) -> Env {
    start_quiet(trust_forwarded, server::admin::events::QUIET_REFRESH).await
}

/// `quiet`: the live stream's quiet refresh.
async fn start_quiet(trust_forwarded: bool, quiet: Duration) -> Env {
    start_custom(trust_forwarded, quiet, Default::default(), |_| {}).await
}

/// Everything a test may set: `api` (the API's settings, e.g. the live streams' keep-alive)
/// and `tweak`, a change to the sign-in settings.
async fn start_custom(
    trust_forwarded: bool,
    quiet: Duration,
    api: server::api::ApiArgs,
    tweak: impl FnOnce(&mut AuthSettings),
) -> Env {
    start_capped(trust_forwarded, quiet, api, Default::default(), tweak).await
}

/// [`start_custom`] with the live streams' caps (REPOLL_MAX_STREAMS_PER_CLIENT, REPOLL_MAX_STREAMS).
async fn start_capped(
    trust_forwarded: bool,
    quiet: Duration,
    api: server::api::ApiArgs,
    caps: server::live_hub::StreamCaps,
    tweak: impl FnOnce(&mut AuthSettings),
) -> Env {
    let (redis, dir) = start_redis().await;
    let url = redis.url().to_string();
    let queue = connect_queue(&url, "admintest").await;
    let search = queue::Queue::with_connection(
        queue.connection(),
        queue::QueueConfig {
            name: "admintest.search".into(),
            upstream: "search".into(),
            // Partitioned, so every page and action reading the named upstream runs across
            // partitions (merged counts, lists, stuck leases, switches written to each).
            partitions: 3,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let mut settings = AuthSettings {
        admin: Credential::from_settings(None, Some(ADMIN_PW)).unwrap(),
        viewer: Credential::from_settings(None, Some(VIEWER_PW)).unwrap(),
        max_failures: 3,
        trust_forwarded,
        ..AuthSettings::default()
    };
    tweak(&mut settings);
    let auth = AuthConfig::new(settings);
    let live = server::live_hub::Live::start_many(
        redis::Client::open(url.as_str()).unwrap(),
        vec![queue.channels().dashboard, search.channels().dashboard],
        caps,
        Default::default(),
    );
    let state = WebState {
        live: live.clone(),
        api: server::api::ApiState::new(&api, trust_forwarded),
        admin: AdminState {
            auth: auth.clone(),
            quiet_refresh: quiet,
        },
        leptos_options: web::leptos_options("target/site"),
        app: AppContext {
            queue: queue.clone(),
            named: app::context::NamedUpstreams {
                list: std::sync::Arc::new(vec![app::context::NamedUpstream {
                    name: "search".into(),
                    queue: search.clone(),
                    enqueue_policy: Default::default(),
                    rate: app::context::RateLimit {
                        per_sec: 20,
                        burst: 5,
                    },
                }]),
                default_rate: Default::default(),
            },
            enqueue_policy: Default::default(),
            admin: auth.clone(),
            first_answer: Duration::ZERO,
        },
    };
    let metrics = Router::new().route(
        "/metrics",
        axum::routing::get(|| async { "repoll_queue_depth{state=\"ready\"} 7\n" }),
    );
    let router = web::router(
        state.clone(),
        Limits {
            body_bytes: 64 * 1024,
            timeout: Duration::from_secs(30),
        },
        web::guarded_metrics(metrics, state),
    );
    Env {
        redis,
        _dir: dir,
        router,
        queue,
        search,
        auth,
        live,
    }
}

/// What a request got back.
struct Reply {
    status: u16,
    headers: HeaderMap,
    body: String,
}

/// Minimal x-www-form-urlencoded encoding (what the server-function client sends).
fn form(pairs: &[(&str, &str)]) -> String {
    let enc = |s: &str| {
        s.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    (b as char).to_string()
                }
                b' ' => "+".into(),
                _ => format!("%{b:02X}"),
            })
            .collect::<String>()
    };
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// A request as a same-origin page script makes it, from client address `ip`, plus `extra`
/// headers (which replace the defaults of the same name).
async fn send(
    router: &Router,
    method: &str,
    path: &str,
    body: String,
    cookie: Option<&str>,
    extra: &[(&str, &str)],
    ip: [u8; 4],
) -> Reply {
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header("host", HOST)
        .header("accept", "application/json")
        .header("content-type", "application/x-www-form-urlencoded");
    if let Some(c) = cookie {
        req = req.header("cookie", format!("repoll_session={c}"));
    }
    let mut req = req.body(Body::from(body)).unwrap();
    for (k, v) in extra {
        req.headers_mut().insert(
            axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            v.parse().unwrap(),
        );
    }
    req.extensions_mut()
        .insert(ConnectInfo(SocketAddr::from((ip, 40000))));
    let res = router.clone().oneshot(req).await.unwrap();
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

/// A page as a browser asks for it (`Accept: text/html`), with an optional session.
async fn get_page(router: &Router, path: &str, cookie: Option<&str>, ip: [u8; 4]) -> Reply {
    send(
        router,
        "GET",
        path,
        String::new(),
        cookie,
        &[("accept", "text/html")],
        ip,
    )
    .await
}

async fn call<S: ServerFn>(
    router: &Router,
    fields: &[(&str, &str)],
    cookie: Option<&str>,
    extra: &[(&str, &str)],
) -> Reply {
    send(
        router,
        "POST",
        S::PATH,
        form(fields),
        cookie,
        extra,
        [10, 0, 0, 1],
    )
    .await
}

/// Signs in from `ip` and returns the session id from the cookie.
async fn sign_in(router: &Router, password: &str, ip: [u8; 4]) -> Result<String, Reply> {
    let r = send(
        router,
        "POST",
        SignIn::PATH,
        form(&[("password", password)]),
        None,
        &[],
        ip,
    )
    .await;
    match session_cookie(&r) {
        Some(c) if r.status < 400 && !c.is_empty() => Ok(c),
        _ => Err(r),
    }
}

/// The session id a reply's `Set-Cookie` hands out, if any.
fn session_cookie(r: &Reply) -> Option<String> {
    r.headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| v.strip_prefix("repoll_session="))
        .map(|v| v.split(';').next().unwrap_or_default().to_string())
}

/// The Redis key of the session whose cookie holds `id`: the sha256 of the id.
fn session_key(id: &str) -> String {
    format!(
        "{{admintest}}:session:{}",
        hex::encode(<sha2::Sha256 as sha2::Digest>::digest(id.as_bytes()))
    )
}

/// A plain connection to the test's Redis, to look at keys directly.
async fn raw_redis(env: &Env) -> redis::aio::MultiplexedConnection {
    redis::Client::open(env.redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// The sign-in attempts counted for client address `ip` (0 without a counter).
async fn attempts(env: &Env, ip: &str) -> i64 {
    let n: Option<i64> = redis::cmd("GET")
        .arg(format!("{{admintest}}:loginfail:{ip}"))
        .query_async(&mut raw_redis(env).await)
        .await
        .unwrap();
    n.unwrap_or(0)
}

/// A dead task (claimed, then failed for good), returning its id.
async fn dead_task(q: &queue::Queue, query: &str) -> queue::TaskId {
    q.enqueue(query, "", &Default::default()).await.unwrap();
    let claimed = q.claim("test-worker", 1, 60_000).await.unwrap();
    let c = claimed.into_iter().next().expect("claimed");
    q.fail(&c.id, c.token, "boom", queue::Retry::Dead, 5)
        .await
        .unwrap();
    c.id
}

/// A task leased to a worker that will never renew it, returning (id, token).
async fn leased_task(q: &queue::Queue, query: &str) -> (queue::TaskId, u64) {
    q.enqueue(query, "", &Default::default()).await.unwrap();
    let c = q.claim("gone-worker", 1, 60_000).await.unwrap().remove(0);
    (c.id, c.token)
}

/// Every action, with valid arguments.
fn all_actions<'a>(dead: &'a str, leased: &'a str) -> Vec<Vec<(&'static str, &'a str)>> {
    vec![
        vec![("op", "retry"), ("id", dead)],
        vec![("op", "retry_all_dead")],
        vec![("op", "cancel"), ("id", dead)],
        vec![("op", "release"), ("id", leased)],
        vec![("op", "release_stuck")],
        vec![("op", "purge"), ("id", "dead"), ("confirm", "dead")],
        vec![("op", "purge"), ("id", "queued"), ("confirm", "queued")],
        vec![("op", "purge"), ("id", "results"), ("confirm", "results")],
        vec![("op", "purge"), ("id", "history"), ("confirm", "history")],
        vec![("op", "pause")],
        vec![("op", "open_breaker")],
    ]
}

/// The state the refused requests must leave alone.
async fn unchanged(q: &queue::Queue, dead: &str, leased: &str) {
    let s = q.stats().await.unwrap();
    assert_eq!(s.dead, 1, "the dead task stays dead");
    assert_eq!(s.leased, 1, "the lease stays");
    assert!(!s.paused, "the queue is not paused");
    assert!(
        q.breaker().await.unwrap().is_none(),
        "the breaker stays closed"
    );
    let d = q.get(dead).await.unwrap().expect("dead task still there");
    assert_eq!(d.task.unwrap().state, queue::TaskState::Dead);
    assert!(!d.history.is_empty(), "history kept");
    let l = q.get(leased).await.unwrap().unwrap().task.unwrap();
    assert_eq!(l.state, queue::TaskState::Leased);
}

#[tokio::test]
async fn unauthenticated_requests_are_refused_and_change_nothing() {
    let env = start().await;
    let (r, q) = (&env.router, &env.queue);
    let dead = dead_task(q, "dead one").await;
    let (leased, _) = leased_task(q, "held one").await;

    for fields in all_actions(&dead, &leased) {
        let reply = call::<Act>(r, &fields, None, &[]).await;
        assert_eq!(reply.status, 401, "{fields:?}: {}", reply.body);
        assert!(reply.body.contains("sign in required"), "{}", reply.body);
        // A forged or expired session id is no better than none.
        let forged = "ab".repeat(32);
        let reply = call::<Act>(r, &fields, Some(&forged), &[]).await;
        assert_eq!(reply.status, 401, "{fields:?}");
    }
    unchanged(q, &dead, &leased).await;

    // Reads are refused too.
    assert_eq!(call::<Overview>(r, &[], None, &[]).await.status, 401);
    let listing = [("state", "dead")];
    assert_eq!(call::<ListTasks>(r, &listing, None, &[]).await.status, 401);
    assert_eq!(
        call::<ReadTask>(r, &[("id", &dead)], None, &[])
            .await
            .status,
        401
    );
    assert_eq!(
        call::<Leases>(r, &[("within_ms", "1000")], None, &[])
            .await
            .status,
        401
    );
    let who = call::<Whoami>(r, &[], None, &[]).await;
    assert_eq!((who.status, who.body.as_str()), (200, "null"));

    // The live stream and the pages.
    let events = send(
        r,
        "GET",
        "/admin/events",
        String::new(),
        None,
        &[],
        [10, 0, 0, 1],
    )
    .await;
    assert_eq!(events.status, 401);
    for page in [
        "/admin",
        "/admin/tasks",
        "/admin/leases",
        "/admin/upstreams",
        &format!("/admin/tasks/{dead}"),
    ] {
        let html = get_page(r, page, None, [10, 0, 0, 1]).await;
        assert_eq!(html.status, 303, "{page} redirects");
        assert_eq!(
            html.headers.get("location").unwrap(),
            "/admin/login",
            "{page}"
        );
        assert!(!html.body.contains("dead one"), "{page} leaks no data");
    }
    let login = get_page(r, "/admin/login", None, [10, 0, 0, 1]).await;
    assert_eq!(login.status, 200);
    unchanged(q, &dead, &leased).await;
    env.redis.stop().await;
}

#[tokio::test]
async fn cross_site_requests_are_refused_even_when_signed_in() {
    let env = start().await;
    let (r, q) = (&env.router, &env.queue);
    let dead = dead_task(q, "dead two").await;
    let (leased, _) = leased_task(q, "held two").await;
    let cookie = sign_in(r, ADMIN_PW, [10, 0, 0, 2])
        .await
        .ok()
        .expect("signed in");

    let hostile: [&[(&str, &str)]; 4] = [
        &[("sec-fetch-site", "cross-site")],
        &[("sec-fetch-site", "same-site")],
        &[("origin", "https://evil.example")],
        &[("origin", "null")],
    ];
    for headers in hostile {
        for fields in all_actions(&dead, &leased) {
            let reply = call::<Act>(r, &fields, Some(&cookie), headers).await;
            assert_eq!(reply.status, 403, "{headers:?} {fields:?}: {}", reply.body);
        }
        // Sign-out and sign-in are state-changing too.
        assert_eq!(
            call::<SignOut>(r, &[], Some(&cookie), headers).await.status,
            403
        );
        let login = call::<SignIn>(r, &[("password", ADMIN_PW)], None, headers).await;
        assert_eq!(login.status, 403);
    }
    unchanged(q, &dead, &leased).await;

    // The same request from our own origin works (so the refusals above were the check).
    let ours = [
        ("origin", "http://admin.test:3000"),
        ("sec-fetch-site", "same-origin"),
    ];
    let fields = [("op", "purge"), ("id", "dead"), ("confirm", "dead")];
    let reply = call::<Act>(r, &fields, Some(&cookie), &ours).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply.body.contains("purged 1"), "{}", reply.body);
    assert_eq!(q.stats().await.unwrap().dead, 0);
    env.redis.stop().await;
}

#[tokio::test]
async fn sign_in_is_generic_and_rate_limited() {
    let env = start().await;
    let r = &env.router;
    let ip = [10, 0, 0, 3];
    for guess in ["wrong", "", "x".repeat(5000).as_str()] {
        let reply = sign_in(r, guess, ip).await.expect_err("refused");
        assert_eq!(reply.status, 401, "{}", reply.body);
        assert!(reply.body.contains("wrong password"), "{}", reply.body);
    }
    // max_failures = 3: now even the right password is refused for this address...
    let reply = sign_in(r, ADMIN_PW, ip).await.expect_err("limited");
    assert_eq!(reply.status, 429, "{}", reply.body);
    assert!(!reply.body.contains("wrong password"));
    // ...while another address signs in.
    let cookie = sign_in(r, ADMIN_PW, [10, 0, 0, 4])
        .await
        .ok()
        .expect("other address");

    // In Redis: the session is stored under the sha256 of its id, never the id itself (a
    // read of Redis does not yield a usable cookie); the failure counter expires within
    // its minute.
    let mut raw = raw_redis(&env).await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut raw)
        .await
        .unwrap();
    let hashed = session_key(&cookie);
    assert!(keys.contains(&hashed), "{keys:?}");
    assert!(keys.iter().all(|k| !k.contains(&cookie)), "{keys:?}");
    let ttl: i64 = redis::cmd("PTTL")
        .arg("{admintest}:loginfail:10.0.0.3")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(ttl > 0 && ttl <= 60_000, "failure counter TTL {ttl} ms");

    // The cookie is locked down.
    let reply = send(
        r,
        "POST",
        SignIn::PATH,
        form(&[("password", ADMIN_PW)]),
        None,
        &[],
        [10, 0, 0, 5],
    )
    .await;
    let set = reply
        .headers
        .get("set-cookie")
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(set.contains(attr), "{set}");
    }
    assert!(
        !set.contains("Secure"),
        "plain http without REPOLL_COOKIE_SECURE: {set}"
    );

    // Signing out ends the session for good.
    let me = call::<Whoami>(r, &[], Some(&cookie), &[]).await;
    assert!(me.body.contains("admin"), "{}", me.body);
    assert!(call::<SignOut>(r, &[], Some(&cookie), &[]).await.status < 400);
    let me = call::<Whoami>(r, &[], Some(&cookie), &[]).await;
    assert_eq!(me.body, "null");
    assert_eq!(
        call::<Act>(r, &[("op", "pause")], Some(&cookie), &[])
            .await
            .status,
        401
    );
    env.redis.stop().await;
}

#[tokio::test]
async fn anonymous_admin_pages_are_a_303_to_the_sign_in_page() {
    let env = start().await;
    env.queue
        .enqueue("secret-looking query", "", &Default::default())
        .await
        .unwrap();
    for path in [
        "/admin",
        "/admin/tasks",
        "/admin/tasks?state=ready",
        "/admin/leases",
        "/admin/upstreams",
    ] {
        let r = get_page(&env.router, path, None, [10, 0, 0, 20]).await;
        assert_eq!(r.status, 303, "{path}: {}", r.body);
        assert_eq!(r.headers["location"], "/admin/login", "{path}");
        assert!(!r.body.contains("secret-looking"), "{path}");
    }
    // The sign-in page itself is served.
    let r = get_page(&env.router, "/admin/login", None, [10, 0, 0, 20]).await;
    assert_eq!(r.status, 200);
    // Signed in, the page renders.
    let cookie = sign_in(&env.router, VIEWER_PW, [10, 0, 0, 21])
        .await
        .ok()
        .unwrap();
    let r = get_page(
        &env.router,
        "/admin/tasks?state=ready",
        Some(&cookie),
        [10, 0, 0, 21],
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(r.body.contains("secret-looking"), "{}", r.body);
    env.redis.stop().await;
}

#[tokio::test]
async fn parallel_guesses_cannot_outrun_the_attempt_limit() {
    let env = start().await;
    // 40 guesses at once from one address, max_failures = 3: an attempt is counted before
    // its password is checked, so at most 3 are checked (401); the rest are refused (429).
    let replies = futures::future::join_all(
        (0..40).map(|i| sign_in(&env.router, if i == 0 { "a" } else { "b" }, [10, 0, 0, 9])),
    )
    .await;
    let checked = replies
        .iter()
        .filter(|r| matches!(r, Err(reply) if reply.status == 401))
        .count();
    let refused = replies
        .iter()
        .filter(|r| matches!(r, Err(reply) if reply.status == 429))
        .count();
    assert!(checked <= 3, "{checked} passwords checked");
    assert_eq!(checked + refused, 40);
    env.redis.stop().await;
}

/// A successful sign-in gives its attempt back, so a user who types the password right is
/// never locked out by their own successes. max_failures = 3: after two wrong guesses, more
/// successes than the limit all go through, the counter still holds the two failures, a
/// third wrong guess is still checked (401), and only then is the address refused (429).
#[tokio::test]
async fn a_successful_sign_in_gives_its_attempt_back() {
    let env = start().await;
    let r = &env.router;
    let ip = [10, 0, 0, 30];
    for _ in 0..2 {
        let reply = sign_in(r, "wrong", ip).await.expect_err("wrong password");
        assert_eq!(reply.status, 401, "{}", reply.body);
    }
    for i in 0..5 {
        if let Err(reply) = sign_in(r, ADMIN_PW, ip).await {
            panic!("success {i} refused: {} {}", reply.status, reply.body);
        }
    }
    assert_eq!(attempts(&env, "10.0.0.30").await, 2, "the failures only");
    let reply = sign_in(r, "wrong", ip).await.expect_err("wrong password");
    assert_eq!(reply.status, 401, "{}", reply.body);
    let reply = sign_in(r, ADMIN_PW, ip).await.expect_err("limit reached");
    assert_eq!(reply.status, 429, "{}", reply.body);
    env.redis.stop().await;
}

/// REPOLL_SESSION_TTL_SECS: a session lives in Redis for its TTL (here 120 s: the key's
/// PTTL is within it, the cookie's Max-Age says the same), and when that runs out the
/// session is over — pages redirect to sign in, server functions answer 401. The end is
/// brought forward by hand (PEXPIRE 1 ms) instead of waited for.
#[tokio::test]
async fn a_session_ends_when_its_ttl_runs_out() {
    let env = start_custom(
        false,
        server::admin::events::QUIET_REFRESH,
        Default::default(),
        |s| s.session_ttl_s = 120,
    )
    .await;
    let r = &env.router;
    let ip = [10, 0, 0, 31];
    let reply = send(
        r,
        "POST",
        SignIn::PATH,
        form(&[("password", ADMIN_PW)]),
        None,
        &[],
        ip,
    )
    .await;
    let cookie = session_cookie(&reply).expect("signed in");
    let set = reply.headers["set-cookie"].to_str().unwrap();
    assert!(set.contains("Max-Age=120"), "{set}");
    let key = session_key(&cookie);
    let mut raw = raw_redis(&env).await;
    let ttl: i64 = redis::cmd("PTTL")
        .arg(&key)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(ttl > 0 && ttl <= 120_000, "session TTL {ttl} ms");
    assert_eq!(get_page(r, "/admin", Some(&cookie), ip).await.status, 200);

    let _: () = redis::cmd("PEXPIRE")
        .arg(&key)
        .arg(1)
        .query_async(&mut raw)
        .await
        .unwrap();
    let t0 = Instant::now();
    loop {
        let exists: i64 = redis::cmd("EXISTS")
            .arg(&key)
            .query_async(&mut raw)
            .await
            .unwrap();
        if exists == 0 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "key not expired");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let page = get_page(r, "/admin", Some(&cookie), ip).await;
    assert_eq!(page.status, 303);
    assert_eq!(page.headers["location"], "/admin/login");
    assert_eq!(
        call::<Whoami>(r, &[], Some(&cookie), &[]).await.body,
        "null"
    );
    let act = call::<Act>(r, &[("op", "pause")], Some(&cookie), &[]).await;
    assert_eq!(act.status, 401, "{}", act.body);
    env.redis.stop().await;
}

/// REPOLL_MAX_PASSWORD_CHECKS (here 1): with every check slot taken (the test holds it,
/// standing in for a check under way), a sign-in waits for a slot. Freed while it waits,
/// the sign-in goes through; never freed, it is told to come back (503 "busy") after its
/// wait (5 s), its password unchecked. The slot is freed only once the waiting sign-in's
/// attempt is counted in Redis (which happens just before it asks for a slot).
#[tokio::test]
async fn sign_ins_beyond_the_password_checks_wait_for_a_slot_then_get_503() {
    let env = start_custom(
        false,
        server::admin::events::QUIET_REFRESH,
        Default::default(),
        |s| s.max_password_checks = 1,
    )
    .await;
    let slots = env.auth.check_slots();
    let held = slots.clone().acquire_owned().await.unwrap();
    let router = env.router.clone();
    let waiting = tokio::spawn(async move { sign_in(&router, ADMIN_PW, [10, 0, 0, 32]).await });
    let t0 = Instant::now();
    while attempts(&env, "10.0.0.32").await == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "attempt not counted"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    drop(held);
    let signed = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("30 s hang guard")
        .unwrap();
    if let Err(reply) = signed {
        panic!(
            "refused instead of waiting: {} {}",
            reply.status, reply.body
        );
    }

    let _held = slots.acquire_owned().await.unwrap();
    let reply = tokio::time::timeout(
        Duration::from_secs(60),
        sign_in(&env.router, ADMIN_PW, [10, 0, 0, 33]),
    )
    .await
    .expect("60 s hang guard")
    .expect_err("no slot");
    assert_eq!(reply.status, 503, "{}", reply.body);
    assert!(reply.body.contains("busy"), "{}", reply.body);
    env.redis.stop().await;
}

#[tokio::test]
async fn behind_a_proxy_the_client_cannot_pick_its_own_address() {
    let env = start_with(true).await;
    // The proxy appends 203.0.113.7; the client rotates whatever it puts before it.
    let mut statuses = Vec::new();
    for i in 0..6 {
        let xff = format!("198.51.100.{i}, 203.0.113.7");
        let r = send(
            &env.router,
            "POST",
            SignIn::PATH,
            form(&[("password", "guess")]),
            None,
            &[("x-forwarded-for", &xff)],
            [10, 0, 0, 1],
        )
        .await;
        statuses.push(r.status);
    }
    assert_eq!(statuses, [401, 401, 401, 429, 429, 429]);
    // Another address the proxy vouches for is its own client.
    let r = send(
        &env.router,
        "POST",
        SignIn::PATH,
        form(&[("password", "guess")]),
        None,
        &[("x-forwarded-for", "203.0.113.8")],
        [10, 0, 0, 1],
    )
    .await;
    assert_eq!(r.status, 401);
    env.redis.stop().await;
}

#[tokio::test]
async fn a_no_js_form_is_never_sent_to_another_site() {
    let env = start().await;
    // A plain form post (Accept: text/html) with a wrong password goes back to the page it
    // came from, per Referer; a foreign Referer must not become the redirect target.
    let r = send(
        &env.router,
        "POST",
        SignIn::PATH,
        form(&[("password", "wrong")]),
        None,
        &[
            ("accept", "text/html"),
            ("referer", "https://evil.example/phish?x=1"),
        ],
        [10, 0, 0, 11],
    )
    .await;
    let location = r
        .headers
        .get("location")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    assert!(
        r.status < 400 && !location.is_empty(),
        "{} {location}",
        r.status
    );
    assert!(!location.contains("evil.example"), "{location}");
    assert!(location.starts_with('/'), "{location}");
    env.redis.stop().await;
}

#[tokio::test]
async fn redis_facts_and_metrics_are_not_for_anonymous_visitors() {
    let env = start().await;
    let r = call::<app::status::CheckRedis>(&env.router, &[], None, &[]).await;
    assert_eq!(r.status, 401, "{}", r.body);
    assert!(!r.body.contains("redis_version") && !r.body.contains("admintest"));
    let cookie = sign_in(&env.router, VIEWER_PW, [10, 0, 0, 12])
        .await
        .ok()
        .unwrap();
    let r = call::<app::status::CheckRedis>(&env.router, &[], Some(&cookie), &[]).await;
    assert_eq!(r.status, 200, "{}", r.body);

    let metrics = |ip: [u8; 4], auth: Option<&'static str>| {
        let router = env.router.clone();
        async move {
            let extra: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", *a)).collect();
            send(&router, "GET", "/metrics", String::new(), None, &extra, ip).await
        }
    };
    assert_eq!(metrics([10, 0, 0, 13], None).await.status, 401);
    assert_eq!(metrics([127, 0, 0, 1], None).await.status, 200);
    // No token configured: no bearer opens it.
    assert_eq!(metrics([10, 0, 0, 13], Some("Bearer x")).await.status, 401);
    env.redis.stop().await;
}

#[tokio::test]
async fn pages_carry_a_nonce_policy_and_their_scripts_the_same_nonce() {
    let env = start().await;
    let r = get_page(&env.router, "/admin/login", None, [10, 0, 0, 14]).await;
    assert_eq!(r.status, 200);
    let csp = r.headers["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    let nonce = csp
        .split("'nonce-")
        .nth(1)
        .and_then(|rest| rest.split('\'').next())
        .unwrap_or_else(|| panic!("no nonce in {csp}"));
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert_eq!(r.headers["x-frame-options"], "DENY");
    assert_eq!(r.headers["x-content-type-options"], "nosniff");
    assert!(r.headers.contains_key("referrer-policy"));
    // Every script tag of the page carries this response's nonce (else the browser would
    // refuse to hydrate it).
    let scripts = r.body.matches("<script").count();
    assert!(scripts > 0, "{}", r.body);
    assert_eq!(
        r.body.matches(&format!("nonce=\"{nonce}\"")).count(),
        scripts,
        "{}",
        r.body
    );
    // A second response has another nonce.
    let again = get_page(&env.router, "/admin/login", None, [10, 0, 0, 14]).await;
    assert!(!again.headers["content-security-policy"]
        .to_str()
        .unwrap()
        .contains(nonce));
    env.redis.stop().await;
}

#[tokio::test]
async fn viewer_sees_everything_and_changes_nothing() {
    let env = start().await;
    let (r, q) = (&env.router, &env.queue);
    let dead = dead_task(q, "dead three").await;
    let (leased, _) = leased_task(q, "held three").await;
    let cookie = sign_in(r, VIEWER_PW, [10, 0, 0, 6])
        .await
        .ok()
        .expect("viewer signs in");

    for fields in all_actions(&dead, &leased) {
        let reply = call::<Act>(r, &fields, Some(&cookie), &[]).await;
        assert_eq!(reply.status, 403, "{fields:?}: {}", reply.body);
        assert!(reply.body.contains("read-only"), "{}", reply.body);
    }
    unchanged(q, &dead, &leased).await;

    let overview = call::<Overview>(r, &[], Some(&cookie), &[]).await;
    assert_eq!(overview.status, 200, "{}", overview.body);
    let listing = call::<ListTasks>(r, &[("state", "dead")], Some(&cookie), &[]).await;
    assert!(listing.body.contains(dead.as_str()), "{}", listing.body);
    let html = get_page(r, "/admin", Some(&cookie), [10, 0, 0, 6]).await;
    assert_eq!(html.status, 200);
    assert!(html.body.contains("read-only"), "the frame says so");
    env.redis.stop().await;
}

#[tokio::test]
async fn admin_actions_work_and_are_audited() {
    let env = start().await;
    let (r, q) = (&env.router, &env.queue);
    let dead = dead_task(q, "dead four").await;
    let (leased, token) = leased_task(q, "held four").await;
    let cookie = sign_in(r, ADMIN_PW, [10, 0, 0, 7])
        .await
        .ok()
        .expect("admin signs in");
    let act = |fields: Vec<(&'static str, String)>| {
        let cookie = cookie.clone();
        async move {
            let f: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
            call::<Act>(r, &f, Some(&cookie), &[]).await
        }
    };

    // A purge needs the typed name.
    let reply = act(vec![
        ("op", "purge".into()),
        ("id", "dead".into()),
        ("confirm", "deaf".into()),
    ])
    .await;
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert_eq!(q.stats().await.unwrap().dead, 1);
    // Bad ids and unknown ops are refused without a panic.
    assert_eq!(
        act(vec![("op", "retry".into()), ("id", "../../x".into())])
            .await
            .status,
        400
    );
    assert_eq!(act(vec![("op", "explode".into())]).await.status, 400);

    let reply = act(vec![
        ("op", "release".into()),
        ("id", leased.to_string()),
        ("token", token.to_string()),
    ])
    .await;
    assert_eq!(reply.body, "\"released 1 lease\"");
    let reply = act(vec![("op", "retry".into()), ("id", dead.to_string())]).await;
    assert!(reply.body.contains("retried task"), "{}", reply.body);
    let reply = act(vec![("op", "pause".into())]).await;
    assert_eq!(reply.status, 200);
    assert!(q.stats().await.unwrap().paused);
    act(vec![("op", "resume".into())]).await;
    assert!(!q.stats().await.unwrap().paused);

    let overview = call::<Overview>(r, &[], Some(&cookie), &[]).await;
    for action in ["release", "retry", "pause", "resume"] {
        assert!(
            overview.body.contains(&format!("\"action\":\"{action}\"")),
            "{}",
            overview.body
        );
    }
    let detail = call::<ReadTask>(r, &[("id", &dead)], Some(&cookie), &[]).await;
    assert!(
        detail.body.contains("admin"),
        "history names who retried: {}",
        detail.body
    );
    env.redis.stop().await;
}

/// Opens the admin live stream with a fresh session; returns its body after the first event
/// (which must be `resync`).
async fn open_live_stream(
    env: &Env,
    client: [u8; 4],
) -> impl futures::Stream<Item = Result<axum::body::Bytes, axum::Error>> + Unpin {
    let r = &env.router;
    let cookie = sign_in(r, ADMIN_PW, client).await.ok().expect("signed in");
    let req = Request::get("/admin/events")
        .header("host", HOST)
        .header("cookie", format!("repoll_session={cookie}"))
        .body(Body::empty())
        .unwrap();
    let res = r.clone().oneshot(req).await.unwrap();
    assert_eq!(res.status().as_u16(), 200);
    assert_eq!(
        res.headers().get("content-type").unwrap(),
        "text/event-stream"
    );
    let mut body = res.into_body().into_data_stream();
    let first = tokio::time::timeout(Duration::from_secs(30), body.next())
        .await
        .expect("first event")
        .expect("stream open")
        .unwrap();
    let first = String::from_utf8_lossy(&first).into_owned();
    assert!(
        first.contains("event: resync") && first.contains("data: resync"),
        "{first}"
    );
    body
}

/// The next named event of an SSE body (keep-alive comments skipped); a generous deadline
/// only guards against a hang.
async fn next_event<S, E>(body: &mut S) -> String
where
    S: futures::Stream<Item = Result<axum::body::Bytes, E>> + Unpin,
    E: std::fmt::Debug,
{
    let read = async {
        loop {
            let chunk = body.next().await.expect("stream open").unwrap();
            let text = String::from_utf8_lossy(&chunk).into_owned();
            if text.contains("event:") {
                return text;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), read)
        .await
        .expect("an event within a minute")
}

#[tokio::test]
async fn live_stream_starts_with_resync_and_tells_of_a_change() {
    // A quiet refresh far longer than the test: any `changed` it sees was caused by the change.
    let env = start_quiet(false, Duration::from_secs(3600)).await;
    let mut body = open_live_stream(&env, [10, 0, 0, 8]).await;
    env.queue.pause("test").await.unwrap();
    let next = next_event(&mut body).await;
    assert!(
        next.contains("event: changed") || next.contains("event: resync"),
        "{next}"
    );
    env.redis.stop().await;
}

#[tokio::test]
async fn live_stream_refreshes_when_nothing_happens() {
    // Time-driven state (a due time or lease deadline passing) publishes nothing: with no
    // event at all, the stream still sends `changed` after its quiet time.
    let env = start_quiet(false, Duration::from_millis(200)).await;
    let mut body = open_live_stream(&env, [10, 0, 0, 9]).await;
    let next = next_event(&mut body).await;
    assert!(next.contains("event: changed"), "{next}");
    env.redis.stop().await;
}

/// REPOLL_SSE_KEEPALIVE_MS (here 100 ms) on the dashboard's stream too: heartbeat comments
/// keep it talking while nothing happens (no events: the quiet refresh is an hour).
#[tokio::test]
async fn the_dashboard_stream_sends_heartbeats_at_the_configured_interval() {
    let env = start_custom(
        false,
        Duration::from_secs(3600),
        server::api::ApiArgs {
            sse_keepalive_ms: 100,
            ..Default::default()
        },
        |_| {},
    )
    .await;
    let mut body = open_live_stream(&env, [10, 0, 0, 35]).await;
    let seen = heartbeats(&mut body, 3, Duration::from_secs(10)).await;
    assert!(!seen.contains("event:"), "{seen}");
    env.redis.stop().await;
}

/// A live stream's request from client address `ip`: the dashboard's (`/admin/events`, with
/// the session `cookie`) or a query's public one (`/api/v1/queries/{id}/events`).
async fn open_stream(
    env: &Env,
    path: &str,
    cookie: Option<&str>,
    ip: [u8; 4],
) -> axum::response::Response {
    let mut req = Request::get(path).header("host", HOST);
    if let Some(c) = cookie {
        req = req.header("cookie", format!("repoll_session={c}"));
    }
    let mut req = req.body(Body::empty()).unwrap();
    req.extensions_mut()
        .insert(ConnectInfo(SocketAddr::from((ip, 40000))));
    env.router.clone().oneshot(req).await.unwrap()
}

/// A refused stream: its status and error code, after checking the API's error shape and
/// that the connection closes.
async fn refusal(res: axum::response::Response) -> (u16, String) {
    let status = res.status().as_u16();
    assert!(
        status >= 400,
        "the stream was admitted ({status}), not refused"
    );
    assert_eq!(
        res.headers().get("connection").map(|v| v.to_str().unwrap()),
        Some("close")
    );
    let body = res.into_body().collect().await.unwrap().to_bytes();
    let json: serde_json::Value = serde_json::from_slice(&body)
        .unwrap_or_else(|_| panic!("{status}: {}", String::from_utf8_lossy(&body)));
    assert!(json["error"]["message"].is_string(), "{json}");
    (status, json["error"]["code"].as_str().unwrap().to_string())
}

/// The dashboard's live stream is under the same caps as the query streams (an open stream
/// holds a connection as long as the client likes; a signed-in page is no exception). Caps
/// 1 per client, 2 in all: a client holding a query stream gets 429 `too_many_streams` for
/// the dashboard's; with both places taken, another client gets 503 `streams_full`; both in
/// the API's error shape, closing the connection. Once the held query stream ends (its place
/// seen back in the hub), the dashboard's stream opens, and it holds its place in turn: the
/// client's next query stream is refused.
#[tokio::test]
async fn the_dashboard_stream_is_under_the_stream_caps() {
    let env = start_capped(
        false,
        Duration::from_secs(3600),
        Default::default(),
        server::live_hub::StreamCaps {
            per_client: 1,
            total: 2,
        },
        |_| {},
    )
    .await;
    let (one, two, three) = ([10, 0, 0, 51], [10, 0, 0, 52], [10, 0, 0, 53]);
    let cookie = sign_in(&env.router, ADMIN_PW, one)
        .await
        .ok()
        .expect("signed in");
    env.queue
        .enqueue("watched query", "", &Default::default())
        .await
        .unwrap();
    let id = queue::TaskId::of_query(&queue::normalise_query("watched query").unwrap());
    let query_stream = format!("/api/v1/queries/{id}/events");

    // Client one holds a query stream: its one place.
    let held = open_stream(&env, &query_stream, None, one).await;
    assert_eq!(held.status().as_u16(), 200);
    let res = open_stream(&env, "/admin/events", Some(&cookie), one).await;
    assert_eq!(refusal(res).await, (429, "too_many_streams".to_string()));

    // Client two takes the last place in all; the dashboard of client three is refused.
    let held_two = open_stream(&env, &query_stream, None, two).await;
    assert_eq!(held_two.status().as_u16(), 200);
    let res = open_stream(&env, "/admin/events", Some(&cookie), three).await;
    assert_eq!(refusal(res).await, (503, "streams_full".to_string()));
    assert_eq!(env.live.open_streams(), 2, "the refusals took no place");

    // Client one's query stream ends; once its place is back, the dashboard's opens.
    drop(held);
    open_streams_come_to(&env, 1).await;
    let res = open_stream(&env, "/admin/events", Some(&cookie), one).await;
    assert_eq!(res.status().as_u16(), 200);
    let mut dashboard = res.into_body().into_data_stream();
    let first = tokio::time::timeout(Duration::from_secs(30), dashboard.next())
        .await
        .expect("first event")
        .expect("stream open")
        .unwrap();
    assert!(
        String::from_utf8_lossy(&first).contains("event: resync"),
        "{first:?}"
    );
    // The open dashboard stream holds client one's place (with a place free in all).
    assert_eq!(
        env.live.open_streams(),
        2,
        "the dashboard stream holds a place"
    );
    drop(held_two);
    open_streams_come_to(&env, 1).await;
    let res = open_stream(&env, &query_stream, None, one).await;
    assert_eq!(refusal(res).await, (429, "too_many_streams".to_string()));
    let res = open_stream(&env, &query_stream, None, two).await;
    assert_eq!(res.status().as_u16(), 200, "the free place is client two's");
    drop((dashboard, res));
    env.redis.stop().await;
}

/// Waits until the hub counts `n` open streams (ended streams give their places back when
/// their bodies are dropped); the 30 s deadline is a hang guard only.
async fn open_streams_come_to(env: &Env, n: usize) {
    let guard = Instant::now() + Duration::from_secs(30);
    while env.live.open_streams() != n {
        assert!(
            Instant::now() < guard,
            "{} streams open, not {n}, after 30 s (hang guard)",
            env.live.open_streams()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The text of the element marked `data-testid="{testid}"` in `body` (its first occurrence).
fn testid_text(body: &str, testid: &str) -> String {
    let marker = format!("data-testid=\"{testid}\"");
    let after = body
        .split_once(&marker)
        .unwrap_or_else(|| panic!("no {marker}: {body}"))
        .1;
    let open = after.find('>').expect("the tag ends");
    let close = after.find("</").expect("the element ends");
    after[open + 1..close].trim().to_string()
}

/// The dashboard's pages say how many tasks are ready: the overview's count, the task list's
/// tab and the ready list's tab. (Render times with many tasks are read by
/// `scripts/bench-pages --tasks N`, never asserted here.)
#[tokio::test]
async fn the_dashboard_pages_show_the_ready_count() {
    let env = start().await;
    let (r, q) = (&env.router, &env.queue);
    let n = 37;
    let policy = queue::EnqueuePolicy::default();
    for i in 0..n {
        q.enqueue(&format!("counted task {i}"), "", &policy)
            .await
            .unwrap();
    }
    assert_eq!(q.stats().await.unwrap().ready, n);
    let cookie = sign_in(r, ADMIN_PW, [10, 0, 0, 9])
        .await
        .ok()
        .expect("signed in");
    let overview = get_page(r, "/admin", Some(&cookie), [10, 0, 0, 9]).await;
    assert_eq!(overview.status, 200);
    assert_eq!(testid_text(&overview.body, "count-ready"), n.to_string());
    for page in ["/admin/tasks", "/admin/tasks?state=ready"] {
        let reply = get_page(r, page, Some(&cookie), [10, 0, 0, 9]).await;
        assert_eq!(reply.status, 200, "{page}");
        assert_eq!(
            testid_text(&reply.body, "tab-count-ready"),
            n.to_string(),
            "{page}"
        );
    }
    env.redis.stop().await;
}

/// Every admin server function the router knows, found in the router's own registry (not a
/// hand-kept list): each must be known to this test, which calls it without a session with
/// valid arguments and expects 401 — so a new `/admin/fn` function cannot go unchecked.
#[tokio::test]
async fn every_admin_server_function_needs_a_session() {
    use app::status::CheckRedis;
    let env = start().await;
    let (r, q) = (&env.router, &env.queue);
    let dead = dead_task(q, "route list dead").await;
    let known: Vec<(&str, Vec<(&str, &str)>)> = vec![
        (Act::PATH, vec![("op", "pause")]),
        (Overview::PATH, vec![]),
        (ListTasks::PATH, vec![("state", "dead")]),
        (ReadTask::PATH, vec![("id", dead.as_str())]),
        (Leases::PATH, vec![("within_ms", "1000")]),
        (BulkPreview::PATH, vec![("filter[state]", "dead")]),
        (
            BulkAct::PATH,
            vec![("op", "retry"), ("filter[state]", "dead")],
        ),
        (CheckRedis::PATH, vec![]),
        (app::pages::admin::upstreams::Upstreams::PATH, vec![]),
    ];
    // Open on purpose: whoami answers null without a session; sign-in and sign-out are how a
    // session starts and ends.
    let open = [Whoami::PATH, SignIn::PATH, SignOut::PATH];
    let registered: Vec<&str> = leptos::server_fn::axum::server_fn_paths()
        .map(|(path, _)| path)
        .filter(|p| p.starts_with(app::auth::ADMIN_FN_PREFIX))
        .collect();
    assert!(
        registered.len() >= known.len() + open.len(),
        "{registered:?}"
    );
    for path in registered {
        if open.contains(&path) {
            continue;
        }
        let fields = known
            .iter()
            .find(|(p, _)| *p == path)
            .map(|(_, f)| f.clone())
            .unwrap_or_else(|| panic!("{path} is not covered: add it to this test"));
        let reply = send(r, "POST", path, form(&fields), None, &[], [10, 0, 0, 30]).await;
        assert_eq!(reply.status, 401, "{path}: {}", reply.body);
    }
    assert!(!q.stats().await.unwrap().paused, "nothing changed");
    env.redis.stop().await;
}

/// Bulk actions by filter through their server functions: a viewer may count but not act;
/// the admin's run works in the background and ends in one audit entry with the filter and
/// the count; more matching tasks than the confirmed count refuse the start.
#[tokio::test]
async fn bulk_actions_need_the_admin_and_end_in_one_audit_entry() {
    let env = start().await;
    let (r, q) = (&env.router, &env.queue);
    for n in ["one", "two", "three"] {
        dead_task(q, &format!("bulk {n}")).await;
    }
    let other = dead_task(q, "elsewhere").await;
    let viewer = sign_in(r, VIEWER_PW, [10, 0, 0, 40]).await.ok().unwrap();
    let admin = sign_in(r, ADMIN_PW, [10, 0, 0, 41]).await.ok().unwrap();
    let filter = [("filter[state]", "dead"), ("filter[query]", "BULK ")];
    let preview = call::<BulkPreview>(r, &filter, Some(&viewer), &[]).await;
    assert_eq!(preview.status, 200, "{}", preview.body);
    assert!(preview.body.contains("\"matched\":3"), "{}", preview.body);
    assert!(preview.body.contains("\"limit\":10000"), "{}", preview.body);

    let mut start = vec![("op", "retry"), ("confirmed", "3")];
    start.extend(filter);
    let refused = call::<BulkAct>(r, &start, Some(&viewer), &[]).await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    let mut grew = vec![("op", "retry"), ("confirmed", "2")];
    grew.extend(filter);
    let refused = call::<BulkAct>(r, &grew, Some(&admin), &[]).await;
    assert_eq!(refused.status, 409, "{}", refused.body);
    assert_eq!(q.stats().await.unwrap().dead, 4, "nothing changed yet");

    let started = call::<BulkAct>(r, &start, Some(&admin), &[]).await;
    assert_eq!(started.body, "\"started: retry 3 tasks\"");
    // The run is the server's: wait for its end (a 60 s hang guard, not a timing).
    let mut end = None;
    let guard = Instant::now() + Duration::from_secs(60);
    while Instant::now() < guard {
        match q.bulk_progress().await.unwrap() {
            Some(p) if !p.running() => {
                end = Some(p);
                break;
            }
            _ => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
        }
    }
    let end = end.expect("the run ended");
    assert_eq!((end.state.as_str(), end.changed), ("finished", 3));
    assert_eq!(q.stats().await.unwrap().dead, 1);
    assert_eq!(
        q.get(&other).await.unwrap().unwrap().task.unwrap().state,
        queue::TaskState::Dead
    );
    // One audit entry, written when the run ended (after the answer): wait for it too.
    let mut overview = String::new();
    let guard = Instant::now() + Duration::from_secs(60);
    while Instant::now() < guard {
        overview = call::<Overview>(r, &[], Some(&admin), &[]).await.body;
        if overview.contains("bulk retry") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(
        overview.matches("\"action\":\"bulk retry\"").count(),
        1,
        "{overview}"
    );
    assert!(
        overview.contains("dead, query contains \\\"BULK\\\""),
        "{overview}"
    );
    assert!(overview.contains("\"count\":3"), "{overview}");
    env.redis.stop().await;
}

/// Upstream text (the query itself, partial data, the result, the last error) is shown on
/// the admin pages as text: a tag in it is escaped, never markup.
#[tokio::test]
async fn hostile_upstream_text_is_inert_on_every_admin_page() {
    let env = start().await;
    let (r, q) = (&env.router, &env.queue);
    let tag = |n: u8| format!("<img src=x onerror=alert({n})>");
    // Waiting for its next poll, with hostile partial data and a hostile query.
    q.enqueue(&tag(1), "", &Default::default()).await.unwrap();
    let c = q.claim("w", 1, 60_000).await.unwrap().remove(0);
    let partial = serde_json::json!({ "note": tag(2) }).to_string();
    q.reschedule(&c.id, c.token, 600_000, Some(&partial), 5)
        .await
        .unwrap();
    let waiting = c.id;
    // Finished with a hostile result.
    q.enqueue("hostile result", "", &Default::default())
        .await
        .unwrap();
    let c = q.claim("w", 1, 60_000).await.unwrap().remove(0);
    let result = serde_json::json!({ "rows": [tag(3)] }).to_string();
    q.complete(&c.id, c.token, &result, 5).await.unwrap();
    let done = c.id;
    // Dead with a hostile last error.
    q.enqueue("hostile error", "", &Default::default())
        .await
        .unwrap();
    let c = q.claim("w", 1, 60_000).await.unwrap().remove(0);
    q.fail(&c.id, c.token, &tag(4), queue::Retry::Dead, 5)
        .await
        .unwrap();
    let dead = c.id;

    let cookie = sign_in(r, ADMIN_PW, [10, 0, 0, 31]).await.ok().unwrap();
    let mut seen = 0;
    let mut bodies = String::new();
    for path in [
        "/admin".to_string(),
        "/admin/tasks".to_string(),
        "/admin/tasks?state=waiting".to_string(),
        "/admin/tasks?state=dead".to_string(),
        "/admin/tasks?state=results".to_string(),
        "/admin/tasks?search=img".to_string(),
        "/admin/leases".to_string(),
        "/admin/upstreams".to_string(),
        // The filter's own text is echoed as text too.
        "/admin/bulk?state=dead&error=%3Cimg%20src%3Dx%20onerror%3Dalert(5)%3E".to_string(),
        format!("/admin/tasks/{waiting}"),
        format!("/admin/tasks/{done}"),
        format!("/admin/tasks/{dead}"),
    ] {
        let page = get_page(r, &path, Some(&cookie), [10, 0, 0, 31]).await;
        assert_eq!(page.status, 200, "{path}");
        assert!(
            !page.body.contains("<img src=x"),
            "{path} renders upstream text as markup"
        );
        seen += page.body.matches("&lt;img src=x onerror=alert(").count();
        bodies.push_str(&page.body);
    }
    // Not vacuous: the hostile texts are on the pages, escaped (query, partial, result, error).
    for n in 1..=5 {
        assert!(
            bodies.contains(&format!("onerror=alert({n})")),
            "text {n} is shown somewhere"
        );
    }
    assert!(seen >= 3, "escaped tags seen: {seen}");
    env.redis.stop().await;
}

/// Priorities on the dashboard: the overview counts ready background work, the task list marks
/// it, and the task page names the priority.
#[tokio::test]
async fn the_dashboard_counts_and_marks_background_work() {
    let env = start().await;
    let (r, q) = (&env.router, &env.queue);
    let bg = queue::EnqueuePolicy {
        priority: queue::Priority::Background,
        ..Default::default()
    };
    for i in 0..2 {
        q.enqueue(&format!("refresh popular {i}"), "", &bg)
            .await
            .unwrap();
    }
    q.enqueue("a person waits", "", &Default::default())
        .await
        .unwrap();
    let cookie = sign_in(r, ADMIN_PW, [10, 0, 0, 12])
        .await
        .ok()
        .expect("signed in");
    let overview = get_page(r, "/admin", Some(&cookie), [10, 0, 0, 12]).await;
    assert_eq!(overview.status, 200);
    assert!(
        overview
            .body
            .contains("2 of the ready tasks are background work"),
        "{}",
        overview.body
    );
    let list = get_page(r, "/admin/tasks?state=ready", Some(&cookie), [10, 0, 0, 12]).await;
    assert_eq!(list.status, 200);
    assert_eq!(
        list.body
            .matches("data-testid=\"badge-background\"")
            .count(),
        2
    );
    let id = queue::TaskId::of_query("refresh popular 0");
    let page = get_page(
        r,
        &format!("/admin/tasks/{id}"),
        Some(&cookie),
        [10, 0, 0, 12],
    )
    .await;
    assert_eq!(page.status, 200);
    let at = page.body.find("field-priority").expect("a priority field");
    let field: String = page.body[at..].chars().take(200).collect();
    assert!(field.contains("background"), "{field}");
    env.redis.stop().await;
}

/// The overview shows an open breaker with its cause and offers to close it; an admin opens
/// it for a planned maintenance and closes it again, both audited; the banner goes with it.
#[tokio::test]
async fn the_breaker_banner_and_its_actions() {
    let env = start().await;
    let (r, q) = (&env.router, &env.queue);
    let ip = [10, 0, 0, 13];
    let cookie = sign_in(r, ADMIN_PW, ip).await.ok().expect("signed in");
    let page = get_page(r, "/admin", Some(&cookie), ip).await;
    assert_eq!(page.status, 200);
    assert!(!page.body.contains("breaker-banner"), "closed: no banner");
    assert!(page.body.contains("data-testid=\"open-breaker\""));

    let reply = call::<Act>(r, &[("op", "open_breaker")], Some(&cookie), &[]).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply.body.contains("breaker open"), "{}", reply.body);
    let b = q.breaker().await.unwrap().expect("open");
    assert_eq!(b.state, queue::BreakerState::Open);
    assert_eq!(b.by, "admin");
    let minutes = (b.until_ms - b.since_ms) / 60_000;
    assert_eq!(minutes, 15, "{b:?}");
    // Claims take nothing while it is open.
    q.enqueue("waits for the breaker", "", &Default::default())
        .await
        .unwrap();
    assert!(q.claim("w", 1, 10_000).await.unwrap().is_empty());

    let page = get_page(r, "/admin", Some(&cookie), ip).await;
    assert!(
        page.body.contains("data-testid=\"breaker-banner\""),
        "{}",
        page.body
    );
    assert!(page.body.contains("Upstream circuit breaker open"));
    assert!(page.body.contains("opened by hand"));
    assert!(page.body.contains("data-testid=\"close-breaker\""));

    let reply = call::<Act>(r, &[("op", "close_breaker")], Some(&cookie), &[]).await;
    assert_eq!(reply.body, "\"breaker closed: claims resume\"");
    assert!(q.breaker().await.unwrap().is_none());
    assert_eq!(q.claim("w", 1, 10_000).await.unwrap().len(), 1);
    let reply = call::<Act>(r, &[("op", "close_breaker")], Some(&cookie), &[]).await;
    assert_eq!(reply.body, "\"the breaker was already closed\"");
    let page = get_page(r, "/admin", Some(&cookie), ip).await;
    assert!(!page.body.contains("breaker-banner"));

    let audit = q.audit_log(10).await.unwrap();
    let actions: Vec<&str> = audit.iter().map(|a| a.action.as_str()).collect();
    assert!(actions.contains(&"open_breaker"), "{actions:?}");
    assert!(actions.contains(&"close_breaker"), "{actions:?}");
    env.redis.stop().await;
}

/// Runs admin action `fields` with the session `cookie`.
async fn act_as(r: &Router, cookie: &str, fields: &[(&str, &str)]) -> Reply {
    call::<Act>(r, fields, Some(cookie), &[]).await
}

/// The Upstreams page lists the default upstream and the named one, each with its own
/// breaker; opening one upstream's breaker leaves the other closed, is audited with the
/// upstream's name, and an unknown upstream is refused.
#[tokio::test]
async fn the_upstreams_page_shows_each_upstream_and_its_own_breaker() {
    let env = start().await;
    let (r, q, search) = (&env.router, &env.queue, &env.search);
    let ip = [10, 0, 0, 14];
    let cookie = sign_in(r, ADMIN_PW, ip).await.ok().expect("signed in");
    search
        .enqueue("find things", "", &Default::default())
        .await
        .unwrap();
    let page = get_page(r, "/admin/upstreams", Some(&cookie), ip).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body.contains("data-testid=\"upstream-default\""),
        "{}",
        page.body
    );
    assert!(page.body.contains("data-testid=\"upstream-search\""));
    assert!(page.body.contains("admintest.search"));
    assert!(page.body.contains("3 partitions"), "{}", page.body);
    assert!(page.body.contains("20/s (burst 5)"), "{}", page.body);

    let reply = act_as(r, &cookie, &[("op", "open_breaker"), ("id", "search")]).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(search.breaker().await.unwrap().is_some(), "search is open");
    assert!(q.breaker().await.unwrap().is_none(), "default stays closed");
    assert!(search.claim("w", 1, 10_000).await.unwrap().is_empty());
    let page = get_page(r, "/admin/upstreams", Some(&cookie), ip).await;
    let row = page
        .body
        .split("data-testid=\"upstream-search\"")
        .nth(1)
        .unwrap();
    assert!(
        row.contains("open") && row.contains("opened by hand"),
        "{row}"
    );
    let audit = q.audit_log(5).await.unwrap();
    assert!(
        audit
            .iter()
            .any(|a| a.action == "open_breaker" && a.target == "breaker:search"),
        "{audit:?}"
    );
    let unknown = act_as(r, &cookie, &[("op", "open_breaker"), ("id", "nope")]).await;
    assert_eq!(unknown.status, 400, "{}", unknown.body);
    assert!(
        unknown.body.contains("known: default, search"),
        "{}",
        unknown.body
    );
    let reply = act_as(r, &cookie, &[("op", "close_breaker"), ("id", "search")]).await;
    assert_eq!(reply.body, "\"breaker closed: claims resume\"");
    assert_eq!(search.claim("w", 1, 10_000).await.unwrap().len(), 1);

    // One API paused while the other flows.
    let reply = act_as(r, &cookie, &[("op", "pause"), ("id", "search")]).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(search.stats().await.unwrap().paused);
    assert!(
        !q.stats().await.unwrap().paused,
        "the default upstream flows"
    );
    let page = get_page(r, "/admin/upstreams", Some(&cookie), ip).await;
    let row = page
        .body
        .split("data-testid=\"upstream-search\"")
        .nth(1)
        .unwrap();
    assert!(
        row.contains("upstream-paused") && row.contains("resume-upstream"),
        "{row}"
    );
    act_as(r, &cookie, &[("op", "resume"), ("id", "search")]).await;
    assert!(!search.stats().await.unwrap().paused);
    let audit = q.audit_log(10).await.unwrap();
    assert!(
        audit
            .iter()
            .any(|a| a.action == "pause" && a.target == "queue:search"),
        "{audit:?}"
    );
    env.redis.stop().await;
}

/// With a named upstream, the task list shows one upstream at a time with the others one click
/// away, keeps it in its links, and a task page and its actions find the task in its own
/// upstream's queue.
#[tokio::test]
async fn tasks_of_a_named_upstream_are_listed_shown_and_acted_on() {
    let env = start().await;
    let (r, q, search) = (&env.router, &env.queue, &env.search);
    let ip = [10, 0, 0, 15];
    let cookie = sign_in(r, ADMIN_PW, ip).await.ok().expect("signed in");
    let id = match search
        .enqueue("needle in search", "", &Default::default())
        .await
        .unwrap()
    {
        queue::Enqueued::Created(t) => t.id,
        other => panic!("{other:?}"),
    };
    q.enqueue("hay in default", "", &Default::default())
        .await
        .unwrap();

    let default_list = get_page(r, "/admin/tasks?state=ready", Some(&cookie), ip).await;
    assert_eq!(default_list.status, 200);
    assert!(
        !default_list.body.contains(id.as_str()),
        "not in the default list"
    );
    assert!(default_list.body.contains("data-testid=\"upstream-tabs\""));
    let list = get_page(
        r,
        "/admin/tasks?state=ready&upstream=search",
        Some(&cookie),
        ip,
    )
    .await;
    assert_eq!(list.status, 200, "{}", list.body);
    assert!(list.body.contains(&id.as_str()[..12]), "{}", list.body);
    assert!(
        list.body.contains("state=dead&amp;upstream=search"),
        "tabs keep the upstream: {}",
        list.body
    );
    let unknown = call::<ListTasks>(
        r,
        &[("state", "ready"), ("upstream", "nope")],
        Some(&cookie),
        &[],
    )
    .await;
    assert_eq!(unknown.status, 400, "{}", unknown.body);

    let page = get_page(r, &format!("/admin/tasks/{id}"), Some(&cookie), ip).await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("needle in search"), "{}", page.body);
    let field = page
        .body
        .split("data-testid=\"field-upstream\"")
        .nth(1)
        .unwrap();
    assert!(
        field.starts_with(">search<"),
        "{}",
        &field[..40.min(field.len())]
    );

    // A query page asks whether its own upstream is paused.
    search.pause("ops").await.unwrap();
    let hay = q.task_id("hay in default");
    let asks = |task: String| async move {
        call::<app::pages::ServicePaused>(r, &[("id", task.as_str())], None, &[])
            .await
            .body
    };
    assert_eq!(asks(id.to_string()).await, "true");
    assert_eq!(asks(hay.to_string()).await, "false");
    search.resume("ops").await.unwrap();

    let reply = act_as(r, &cookie, &[("op", "cancel"), ("id", id.as_str())]).await;
    assert!(reply.body.contains("cancelled task"), "{}", reply.body);
    assert_eq!(search.stats().await.unwrap().ready, 0);
    assert_eq!(
        q.stats().await.unwrap().ready,
        1,
        "the default upstream's task stays"
    );
    env.redis.stop().await;
}

/// The overview shows one upstream at a time: a named one's counts and workers, without the
/// default upstream's queue-wide actions (its own are on the Upstreams page).
#[tokio::test]
async fn the_overview_of_a_named_upstream_shows_its_own_counts() {
    let env = start().await;
    let (r, search) = (&env.router, &env.search);
    let ip = [10, 0, 0, 16];
    let cookie = sign_in(r, ADMIN_PW, ip).await.ok().expect("signed in");
    for i in 0..3 {
        search
            .enqueue(&format!("search {i}"), "", &Default::default())
            .await
            .unwrap();
    }
    let default = get_page(r, "/admin", Some(&cookie), ip).await;
    assert_eq!(default.status, 200);
    assert!(default.body.contains("data-testid=\"overview-upstreams\""));
    assert!(default.body.contains("data-testid=\"queue-actions\""));
    let named = get_page(r, "/admin?upstream=search", Some(&cookie), ip).await;
    assert_eq!(named.status, 200, "{}", named.body);
    assert!(
        !named.body.contains("data-testid=\"queue-actions\""),
        "{}",
        named.body
    );
    let ready = named
        .body
        .split("data-testid=\"count-ready\"")
        .nth(1)
        .unwrap();
    assert!(
        ready[..60.min(ready.len())].contains(r#"class="n">3</span>"#),
        "{}",
        &ready[..60.min(ready.len())]
    );
    assert!(
        named.body.contains("window=24h&amp;upstream=search"),
        "window links keep it"
    );
    env.redis.stop().await;
}

/// Tenants seen by the operator: the Upstreams page lists each upstream's busiest tenants
/// (ready, in flight) with links to their tasks; the task search takes `tenant:`; bulk actions
/// select by upstream and tenant; the stuck-leases page reads every upstream's leases.
#[tokio::test]
async fn tenants_are_counted_searched_and_selected_per_upstream() {
    let env = start().await;
    let (r, search) = (&env.router, &env.search);
    let ip = [10, 0, 0, 15];
    let cookie = sign_in(r, ADMIN_PW, ip).await.ok().expect("signed in");
    let of = |t: &str| queue::EnqueuePolicy {
        tenant: t.to_string(),
        ..Default::default()
    };
    for i in 0..3 {
        search
            .enqueue(&format!("acme job {i}"), "", &of("acme"))
            .await
            .unwrap();
    }
    search
        .enqueue("beta job", "", &of("beta.corp"))
        .await
        .unwrap();
    // One of them leased (by a worker that then stops renewing).
    let leased = search.claim("w-gone", 1, 1).await.unwrap();
    assert_eq!(leased.len(), 1);

    let page = get_page(r, "/admin/upstreams", Some(&cookie), ip).await;
    assert_eq!(page.status, 200, "{}", page.body);
    let row = page
        .body
        .split("data-testid=\"upstream-search\"")
        .nth(1)
        .unwrap();
    let cell = row
        .split("data-testid=\"upstream-tenants\"")
        .nth(1)
        .unwrap();
    assert!(cell.contains("data-testid=\"tenant-acme\""), "{cell}");
    assert!(cell.contains("data-testid=\"tenant-beta.corp\""), "{cell}");
    assert!(
        cell.contains("/admin/tasks?q=tenant%3Aacme&amp;upstream=search"),
        "{cell}"
    );

    let list = get_page(
        r,
        "/admin/tasks?q=tenant%3Aacme&upstream=search",
        Some(&cookie),
        ip,
    )
    .await;
    assert_eq!(list.status, 200, "{}", list.body);
    assert!(list.body.contains("acme job"), "{}", list.body);
    assert!(!list.body.contains("beta job"), "{}", list.body);
    let bad = get_page(r, "/admin/tasks?q=tenant%3Aa%7Cb", Some(&cookie), ip).await;
    assert!(bad.body.contains("is not a tenant name"), "{}", bad.body);

    let bulk = get_page(
        r,
        "/admin/bulk?state=ready&upstream=search&tenant=beta.corp",
        Some(&cookie),
        ip,
    )
    .await;
    assert_eq!(bulk.status, 200, "{}", bulk.body);
    assert!(bulk.body.contains("data-count=\"1\""), "{}", bulk.body);
    let unknown = get_page(
        r,
        "/admin/bulk?state=ready&upstream=nope",
        Some(&cookie),
        ip,
    )
    .await;
    assert!(
        unknown.body.contains("known: default, search"),
        "{}",
        unknown.body
    );

    // The 1 ms lease is past its deadline by Redis's clock: wait for the page to list it
    // (a 60 s hang guard) instead of sleeping.
    let listed = format!("data-id=\"{}\"", leased[0].id);
    let guard = Instant::now() + Duration::from_secs(60);
    let leases = loop {
        let leases = get_page(r, "/admin/leases", Some(&cookie), ip).await;
        assert_eq!(leases.status, 200, "{}", leases.body);
        if leases.body.contains(&listed) || Instant::now() > guard {
            break leases;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(leases.body.contains(&listed), "{}", leases.body);
    let reply = act_as(r, &cookie, &[("op", "release_stuck"), ("id", "")]).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply.body.contains("released 1 lease"), "{}", reply.body);
    assert_eq!(search.stats().await.unwrap().leased, 0);
}

/// The ready list pages through all of its places (due now, the tenants' fair queue, the two
/// ready lists): every ready task is listed once, following "Next page" from the first page.
#[tokio::test]
async fn the_ready_list_pages_through_tenants_and_lists() {
    let env = start().await;
    let (r, q) = (&env.router, &env.queue);
    let ip = [10, 0, 0, 16];
    let cookie = sign_in(r, ADMIN_PW, ip).await.ok().expect("signed in");
    let mut ids = std::collections::BTreeSet::new();
    for i in 0..70 {
        let tenant = if i % 2 == 0 { "pager" } else { "" };
        let p = queue::EnqueuePolicy {
            tenant: tenant.to_string(),
            ..Default::default()
        };
        match q.enqueue(&format!("page me {i}"), "", &p).await.unwrap() {
            queue::Enqueued::Created(t) => ids.insert(t.id.to_string()),
            other => panic!("{other:?}"),
        };
    }
    let mut seen = Vec::new();
    let mut path = "/admin/tasks?state=ready".to_string();
    for _ in 0..10 {
        let page = get_page(r, &path, Some(&cookie), ip).await;
        assert_eq!(page.status, 200, "{}", page.body);
        for part in page.body.split("href=\"/admin/tasks/").skip(1) {
            let id: String = part.chars().take_while(|c| c.is_ascii_hexdigit()).collect();
            if id.len() == 32 {
                seen.push(id);
            }
        }
        let Some(next) = page
            .body
            .split("data-testid=\"next-page\"")
            .next()
            .filter(|_| page.body.contains("data-testid=\"next-page\""))
            .and_then(|before| before.rsplit("href=\"").next())
            .map(|h| h.split('"').next().unwrap().replace("&amp;", "&"))
        else {
            break;
        };
        path = next;
    }
    let listed: std::collections::BTreeSet<String> = seen.iter().cloned().collect();
    assert_eq!(listed.len(), seen.len(), "a task listed twice");
    assert_eq!(listed, ids, "every ready task, once");
}
