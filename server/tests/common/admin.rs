//! The admin tests' world: a private Redis (the managed one), the real router with the admin
//! side, sign-in and request helpers, and the task states the actions are tried on. Shared by
//! admin_auth.rs, admin_pages.rs, admin_streams.rs, admin_sessions.rs and web_answers.rs.
#![allow(dead_code)] // each test binary uses a different subset

use super::{connect_queue, start_redis, tempdir, Reply};
use http_body_util::BodyExt;
use tower::ServiceExt;

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use app::{
    auth::{AuthConfig, AuthSettings, Credential},
    context::AppContext,
    pages::admin::{actions::Act, login::SignIn},
};
use axum::{body::Body, extract::ConnectInfo, http::Request, Router};
use futures::StreamExt;
use leptos::server_fn::ServerFn;
use server::{
    admin::AdminState,
    managed_redis::ManagedRedis,
    web::{self, Limits, WebParts, WebState},
};

pub const ADMIN_PW: &str = "correct horse battery staple";

pub const VIEWER_PW: &str = "just looking";

pub const HOST: &str = "admin.test:3000";

pub struct Env {
    pub redis: ManagedRedis,
    pub _dir: tempdir::Dir,
    pub router: Router,
    pub queue: queue::Queue,
    /// The named upstream `search` (its own queue), beside the default one.
    pub search: queue::Queue,
    /// The router's credentials and password-check slots.
    pub auth: AuthConfig,
    /// The live hub behind the router (its open streams are what the caps count).
    pub live: server::live_hub::Live,
}

pub async fn start() -> Env {
    start_with(false).await
}

/// `trust_forwarded`: REPOLL_TRUST_FORWARDED.
pub async fn start_with(trust_forwarded: bool) -> Env {
    start_quiet(trust_forwarded, server::admin::events::QUIET_REFRESH).await
}

/// `quiet`: the live stream's quiet refresh.
pub async fn start_quiet(trust_forwarded: bool, quiet: Duration) -> Env {
    start_custom(trust_forwarded, quiet, Default::default(), |_| {}).await
}

/// Everything a test may set: `api` (the API's settings, e.g. the live streams' keep-alive)
/// and `tweak`, a change to the sign-in settings.
pub async fn start_custom(
    trust_forwarded: bool,
    quiet: Duration,
    api: server::api::ApiArgs,
    tweak: impl FnOnce(&mut AuthSettings),
) -> Env {
    start_capped(trust_forwarded, quiet, api, Default::default(), tweak).await
}

/// [`start_custom`] with the live streams' caps (REPOLL_MAX_STREAMS_PER_CLIENT, REPOLL_MAX_STREAMS).
pub async fn start_capped(
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
    let auth = AuthConfig::new(test_settings(trust_forwarded, tweak));
    let live = server::live_hub::Live::start_many(
        redis::Client::open(url.as_str()).unwrap(),
        vec![queue.channels().dashboard, search.channels().dashboard],
        caps,
        Default::default(),
    );
    let state = WebState::new(web_state(
        &queue,
        &search,
        &live,
        &auth,
        trust_forwarded,
        quiet,
        &api,
    ));
    Env {
        redis,
        _dir: dir,
        router: router_of(state),
        queue,
        search,
        auth,
        live,
    }
}

/// The tests' sign-in settings (both passwords, 3 failures a minute), changed by `tweak`.
fn test_settings(trust_forwarded: bool, tweak: impl FnOnce(&mut AuthSettings)) -> AuthSettings {
    let mut settings = AuthSettings {
        admin: Credential::from_settings(None, Some(ADMIN_PW)).unwrap(),
        viewer: Credential::from_settings(None, Some(VIEWER_PW)).unwrap(),
        max_failures: 3,
        trust_forwarded,
        ..AuthSettings::default()
    };
    tweak(&mut settings);
    settings
}

/// The web state of a process on the test's queues with the sign-in settings `auth`.
fn web_state(
    queue: &queue::Queue,
    search: &queue::Queue,
    live: &server::live_hub::Live,
    auth: &AuthConfig,
    trust_forwarded: bool,
    quiet: Duration,
    api: &server::api::ApiArgs,
) -> WebParts {
    WebParts {
        live: live.clone(),
        api: server::api::ApiState::new(api, trust_forwarded),
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
            trace_url: None,
        },
    }
}

/// The whole router of `state`, with a stand-in `/metrics` behind the real guard.
fn router_of(state: WebState) -> Router {
    let metrics = Router::new().route(
        "/metrics",
        axum::routing::get(|| async { "repoll_queue_depth{state=\"ready\"} 7\n" }),
    );
    web::router(
        state.clone(),
        Limits {
            body_bytes: 64 * 1024,
            timeout: Duration::from_secs(30),
        },
        web::guarded_metrics(metrics, state),
    )
}

/// The router of another process on `env`'s Redis and queues — a restart with other settings:
/// the tests' sign-in settings changed by `tweak`, and the web state by `state` (e.g. a
/// metrics token), with `trust_forwarded` (REPOLL_TRUST_FORWARDED).
pub fn restarted(
    env: &Env,
    trust_forwarded: bool,
    tweak: impl FnOnce(&mut AuthSettings),
    state: impl FnOnce(&mut WebParts),
) -> Router {
    let auth = AuthConfig::new(test_settings(trust_forwarded, tweak));
    let mut s = web_state(
        &env.queue,
        &env.search,
        &env.live,
        &auth,
        trust_forwarded,
        server::admin::events::QUIET_REFRESH,
        &Default::default(),
    );
    state(&mut s);
    router_of(WebState::new(s))
}

/// Minimal x-www-form-urlencoded encoding (what the server-function client sends).
pub fn form(pairs: &[(&str, &str)]) -> String {
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
pub async fn send(
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
    super::oneshot(router, req).await
}

/// A page as a browser asks for it (`Accept: text/html`), with an optional session.
pub async fn get_page(router: &Router, path: &str, cookie: Option<&str>, ip: [u8; 4]) -> Reply {
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

pub async fn call<S: ServerFn>(
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
pub async fn sign_in(router: &Router, password: &str, ip: [u8; 4]) -> Result<String, Reply> {
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
pub fn session_cookie(r: &Reply) -> Option<String> {
    r.headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| v.strip_prefix("repoll_session="))
        .map(|v| v.split(';').next().unwrap_or_default().to_string())
}

/// The Redis key of the session whose cookie holds `id`: the sha256 of the id.
pub fn session_key(id: &str) -> String {
    format!(
        "{{admintest}}:session:{}",
        hex::encode(<sha2::Sha256 as sha2::Digest>::digest(id.as_bytes()))
    )
}

/// A plain connection to the test's Redis, to look at keys directly.
pub async fn raw_redis(env: &Env) -> redis::aio::MultiplexedConnection {
    redis::Client::open(env.redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// The sign-in attempts counted for client address `ip` (0 without a counter).
pub async fn attempts(env: &Env, ip: &str) -> i64 {
    let n: Option<i64> = redis::cmd("GET")
        .arg(format!("{{admintest}}:loginfail:{ip}"))
        .query_async(&mut raw_redis(env).await)
        .await
        .unwrap();
    n.unwrap_or(0)
}

/// A dead task (claimed, then failed for good), returning its id.
pub async fn dead_task(q: &queue::Queue, query: &str) -> queue::TaskId {
    q.enqueue(query, "", &Default::default()).await.unwrap();
    let claimed = q.claim("test-worker", 1, 60_000).await.unwrap();
    let c = claimed.into_iter().next().expect("claimed");
    q.fail(&c.id, c.token, "boom", queue::Retry::Dead, 5)
        .await
        .unwrap();
    c.id
}

/// A task leased to a worker that will never renew it, returning (id, token).
pub async fn leased_task(q: &queue::Queue, query: &str) -> (queue::TaskId, u64) {
    q.enqueue(query, "", &Default::default()).await.unwrap();
    let c = q.claim("gone-worker", 1, 60_000).await.unwrap().remove(0);
    (c.id, c.token)
}

/// Every action of `AdminOp::ALL` with valid arguments (each purge target), so a refusal
/// checked over this list covers an action added later: the match has no catch-all arm.
pub fn all_actions<'a>(dead: &'a str, leased: &'a str) -> Vec<Vec<(&'static str, &'a str)>> {
    use app::pages::admin::admin_op::AdminOp::{self, *};
    AdminOp::ALL
        .into_iter()
        .flat_map(|op| {
            let args: Vec<Vec<(&'static str, &'a str)>> = match op {
                Retry | Cancel => vec![vec![("id", dead)]],
                Release => vec![vec![("id", leased)]],
                Purge => ["dead", "queued", "results", "history"]
                    .map(|t| vec![("id", t), ("confirm", t)])
                    .to_vec(),
                QuietWorker | StopWorker => vec![vec![("id", "worker-1")]],
                RetryAllDead | ReleaseStuck | Pause | Resume | OpenBreaker | CloseBreaker
                | SignOutAll => vec![vec![]],
            };
            args.into_iter().map(move |mut a| {
                a.insert(0, ("op", op.name()));
                a
            })
        })
        .collect()
}

/// The state the refused requests must leave alone.
pub async fn unchanged(q: &queue::Queue, dead: &str, leased: &str) {
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

/// Opens the admin live stream with a fresh session; returns its body after the first event
/// (which must be `resync`).
pub async fn open_live_stream(
    env: &Env,
    client: [u8; 4],
) -> impl futures::Stream<Item = Result<axum::body::Bytes, axum::Error>> + Unpin {
    let r = &env.router;
    let cookie = sign_in(r, ADMIN_PW, client).await.expect("signed in");
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
pub async fn next_event<S, E>(body: &mut S) -> String
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

/// A live stream's request from client address `ip`: the dashboard's (`/admin/events`, with
/// the session `cookie`) or a query's public one (`/api/v1/queries/{id}/events`).
pub async fn open_stream(
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
pub async fn refusal(res: axum::response::Response) -> (u16, String) {
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

/// Waits until the hub counts `n` open streams (ended streams give their places back when
/// their bodies are dropped); the 30 s deadline is a hang guard only.
pub async fn open_streams_come_to(env: &Env, n: usize) {
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
pub fn testid_text(body: &str, testid: &str) -> String {
    let marker = format!("data-testid=\"{testid}\"");
    let after = body
        .split_once(&marker)
        .unwrap_or_else(|| panic!("no {marker}: {body}"))
        .1;
    let open = after.find('>').expect("the tag ends");
    let close = after.find("</").expect("the element ends");
    without_markers(&after[open + 1..close]).trim().to_string()
}

/// `html` without the hydration markers (`<!>`) that type-erased components leave after
/// their views: markup, not text.
pub fn without_markers(html: &str) -> String {
    html.replace("<!>", "")
}

/// Runs admin action `fields` with the session `cookie`.
pub async fn act_as(r: &Router, cookie: &str, fields: &[(&str, &str)]) -> Reply {
    call::<Act>(r, fields, Some(cookie), &[]).await
}
