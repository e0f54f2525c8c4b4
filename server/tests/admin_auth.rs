//! The admin side's security, through the real router against a private redis-server: every
//! action and read refuses a request without a session (and changes nothing — checked in
//! Redis), cross-site requests are refused even with a valid session, sign-in is rate-limited
//! with one generic message, and a viewer cannot act.

use crate::common;
use common::admin::*;

use std::time::{Duration, Instant};

use app::pages::admin::{
    actions::Act,
    bulk::{BulkAct, BulkPreview},
    leases::Leases,
    login::{SignIn, SignOut, Whoami},
    overview::Overview,
    task::ReadTask,
    tasks::ListTasks,
};
use leptos::server_fn::ServerFn;

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
        (app::pages::admin::dead_work::DeadWork::PATH, vec![]),
        (app::pages::admin::attention::ReadAttention::PATH, vec![]),
        (
            app::pages::admin::facets::TaskFacets::PATH,
            vec![("state", "dead")],
        ),
        (
            app::pages::admin::search_box::SearchSuggestions::PATH,
            vec![("text", "state:d"), ("caret", "7")],
        ),
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
