//! What the router answers a stranger's hand-made request (real Redis, `oneshot`): a URL that
//! carries its own error text puts none of it on our pages; a server function called with
//! missing or malformed arguments is a 400 with the API's error shape, never a 5xx; an admin
//! form posted without `Referer` goes back to its own page; `/metrics` takes the token when one
//! is configured, else only a loopback socket peer — never a forwarded address.

use crate::common;
use common::admin::*;

use app::pages::{
    admin::{
        actions::Act,
        bulk::{BulkAct, BulkPreview},
        leases::Leases,
        login::{SignIn, SignOut, Whoami},
        overview::Overview,
        task::ReadTask,
        tasks::ListTasks,
        upstreams::Upstreams,
    },
    form_error::GENERIC,
    ServiceHold, SubmitQuery,
};
use leptos::server_fn::{error::ServerFnUrlError, ServerFn, ServerFnError};

const PHISH: &str = "Our service moved. Sign in at https://evil.example/login";

/// `page` with the error of server function `fn_path` in its URL, as Leptos writes it after a
/// refused form post — here with a message nobody on our side wrote.
fn forged(page: &str, fn_path: &str, message: &str) -> String {
    let url = ServerFnUrlError::new(fn_path, ServerFnError::new(message))
        .to_url(&format!("http://{HOST}{page}"))
        .unwrap();
    format!("{}?{}", url.path(), url.query().unwrap())
}

#[tokio::test]
async fn an_error_text_written_into_the_url_is_not_shown() {
    let env = start().await;
    let r = &env.router;
    let login = get_page(
        r,
        &forged("/admin/login", SignIn::PATH, PHISH),
        None,
        [10, 0, 0, 1],
    )
    .await;
    assert_eq!(login.status, 200);
    assert!(!login.body.contains("evil.example"), "{}", login.body);
    assert_eq!(testid_text(&login.body, "login-error"), GENERIC);

    let query = get_page(
        r,
        &forged("/", SubmitQuery::PATH, PHISH),
        None,
        [10, 0, 0, 1],
    )
    .await;
    assert_eq!(query.status, 200);
    assert!(!query.body.contains("evil.example"), "{}", query.body);
    assert_eq!(testid_text(&query.body, "query-submit-error"), GENERIC);

    // An admin page's action result, and our own words with something appended.
    let admin = sign_in(r, ADMIN_PW, [10, 0, 0, 2]).await.unwrap();
    let appended = format!("wrong password. {PHISH}");
    for (page, fn_path, text) in [
        ("/admin", Act::PATH, PHISH),
        ("/admin/login", SignIn::PATH, appended.as_str()),
    ] {
        let p = get_page(r, &forged(page, fn_path, text), Some(&admin), [10, 0, 0, 2]).await;
        assert!(!p.body.contains("evil.example"), "{page}: {}", p.body);
    }

    // Our own messages still make the round trip: a wrong password posted without JavaScript
    // comes back to the sign-in page with the reason.
    let posted = send(
        r,
        "POST",
        SignIn::PATH,
        form(&[("password", "not it")]),
        None,
        &[
            ("accept", "text/html"),
            ("referer", &format!("http://{HOST}/admin/login")),
        ],
        [10, 0, 0, 3],
    )
    .await;
    let back = posted.headers["location"].to_str().unwrap();
    let back = back.strip_prefix(&format!("http://{HOST}")).unwrap_or(back);
    let page = get_page(r, back, None, [10, 0, 0, 3]).await;
    assert_eq!(testid_text(&page.body, "login-error"), "wrong password");
    env.redis.stop().await;
}

/// Every server function the router knows (its own registry, so a new one cannot be
/// forgotten), called anonymously with a required argument missing or malformed: 400 with
/// `{"error":{"code":"bad_request",…}}`, never a 5xx — a client's mistake must not page the
/// operator who watches the 5xx rate.
#[tokio::test]
async fn server_functions_with_missing_or_malformed_arguments_are_400_json() {
    let env = start().await;
    let r = &env.router;
    let wrong: Vec<(&str, Vec<(&str, &str)>)> = vec![
        (SignIn::PATH, vec![]),
        (Act::PATH, vec![("id", "x")]),
        (ListTasks::PATH, vec![]),
        (ReadTask::PATH, vec![]),
        (Leases::PATH, vec![("within_ms", "-5")]),
        (BulkPreview::PATH, vec![]),
        (BulkAct::PATH, vec![("filter[state]", "dead")]),
        (SubmitQuery::PATH, vec![]),
        (app::pages::ReadQuery::PATH, vec![]),
        (ServiceHold::PATH, vec![]),
        (app::pages::admin::facets::TaskFacets::PATH, vec![]),
        (
            app::pages::admin::search_box::SearchSuggestions::PATH,
            vec![("text", "sta"), ("caret", "x")],
        ),
    ];
    // Nothing to get wrong: no argument, or only optional text ones.
    let no_arguments = [
        Whoami::PATH,
        SignOut::PATH,
        Overview::PATH,
        Upstreams::PATH,
        app::status::CheckRedis::PATH,
        app::pages::UpstreamNames::PATH,
        app::pages::admin::dead_work::DeadWork::PATH,
        app::pages::admin::attention::ReadAttention::PATH,
    ];
    let registered: Vec<&str> = leptos::server_fn::axum::server_fn_paths()
        .map(|(path, _)| path)
        .collect();
    assert!(registered.len() >= wrong.len() + no_arguments.len());
    for path in registered {
        if no_arguments.contains(&path) {
            continue;
        }
        let fields = wrong
            .iter()
            .find(|(p, _)| *p == path)
            .map(|(_, f)| f.clone())
            .unwrap_or_else(|| panic!("{path} is not covered: add it to this test"));
        let a = send(r, "POST", path, form(&fields), None, &[], [10, 0, 0, 40]).await;
        assert_eq!(a.status, 400, "{path}: {}", a.body);
        assert_eq!(a.json["error"]["code"], "bad_request", "{path}: {}", a.body);
        // Without JavaScript the same mistake goes back to the form, not to a 5xx.
        let html = send(
            r,
            "POST",
            path,
            form(&fields),
            None,
            &[("accept", "text/html")],
            [10, 0, 0, 41],
        )
        .await;
        assert!(html.status < 500, "{path}: {} {}", html.status, html.body);
    }
    // Signed in, too: a negative lease window is refused before anything is read.
    let viewer = sign_in(r, VIEWER_PW, [10, 0, 0, 42]).await.unwrap();
    let a = call::<Leases>(r, &[("within_ms", "-5")], Some(&viewer), &[]).await;
    assert_eq!(
        (a.status, &a.json["error"]["code"]),
        (400, &"bad_request".into())
    );
    let ok = call::<Leases>(r, &[("within_ms", "5")], Some(&viewer), &[]).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    // A refusal of our own keeps its status and its words.
    let refused = call::<Act>(r, &[("op", "pause")], None, &[]).await;
    assert_eq!(
        (refused.status, refused.body.contains("sign in required")),
        (401, true)
    );
    env.redis.stop().await;
}

/// Leptos sends a form posted without JavaScript back to its `Referer`, and to `/` without
/// one: an admin form then landed on the query page. It goes back to its own admin page.
#[tokio::test]
async fn an_admin_form_posted_without_referer_goes_back_to_its_page() {
    let env = start().await;
    let r = &env.router;
    let no_js = [("accept", "text/html")];
    let path_of = |a: &common::Reply| {
        let l = a.headers["location"].to_str().unwrap().to_string();
        let l = l
            .strip_prefix(&format!("http://{HOST}"))
            .unwrap_or(&l)
            .to_string();
        l.split('?').next().unwrap().to_string()
    };
    let wrong = send(
        r,
        "POST",
        SignIn::PATH,
        form(&[("password", "no")]),
        None,
        &no_js,
        [10, 0, 0, 50],
    )
    .await;
    assert_eq!(path_of(&wrong), "/admin/login", "{wrong:?}");
    let admin = sign_in(r, ADMIN_PW, [10, 0, 0, 51]).await.unwrap();
    let acted = send(
        r,
        "POST",
        Act::PATH,
        form(&[("op", "pause")]),
        Some(&admin),
        &no_js,
        [10, 0, 0, 51],
    )
    .await;
    assert_eq!(path_of(&acted), "/admin", "{acted:?}");
    assert!(env.queue.stats().await.unwrap().paused);
    let refused = send(
        r,
        "POST",
        Act::PATH,
        form(&[("op", "nope")]),
        Some(&admin),
        &no_js,
        [10, 0, 0, 51],
    )
    .await;
    assert_eq!(path_of(&refused), "/admin", "{refused:?}");
    let bulk = send(
        r,
        "POST",
        BulkAct::PATH,
        form(&[("op", "nope"), ("filter[state]", "dead")]),
        Some(&admin),
        &no_js,
        [10, 0, 0, 51],
    )
    .await;
    assert_eq!(path_of(&bulk), "/admin/bulk", "{bulk:?}");
    env.redis.stop().await;
}

/// `/metrics` with a token configured: every client needs it, loopback ones too.
#[tokio::test]
async fn with_a_metrics_token_every_client_needs_it() {
    let env = start().await;
    let router = restarted(
        &env,
        false,
        |_| {},
        |s| s.api.metrics_token = Some("scrape-tok".into()),
    );
    let metrics = |ip: [u8; 4], auth: Option<&'static str>| {
        let router = router.clone();
        async move {
            let extra: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", *a)).collect();
            send(&router, "GET", "/metrics", String::new(), None, &extra, ip)
                .await
                .status
        }
    };
    assert_eq!(metrics([127, 0, 0, 1], None).await, 401);
    assert_eq!(metrics([127, 0, 0, 1], Some("Bearer wrong")).await, 401);
    assert_eq!(
        metrics([127, 0, 0, 1], Some("Bearer scrape-tok")).await,
        200
    );
    assert_eq!(
        metrics([10, 0, 0, 13], Some("Bearer scrape-tok")).await,
        200
    );
    assert_eq!(metrics([10, 0, 0, 13], None).await, 401);
    env.redis.stop().await;
}

/// Without a token, a loopback socket peer *and* a loopback client: behind
/// REPOLL_TRUST_FORWARDED, a last `X-Forwarded-For: 127.0.0.1` from another host does not make
/// a client local, and a remote address named by a local proxy makes it remote.
#[tokio::test]
async fn without_a_metrics_token_a_forwarded_loopback_address_is_not_let_in() {
    let env = start_with(true).await;
    let get = |ip: [u8; 4], xff: Option<&'static str>| {
        let router = env.router.clone();
        async move {
            let extra: Vec<(&str, &str)> = xff.iter().map(|a| ("x-forwarded-for", *a)).collect();
            send(&router, "GET", "/metrics", String::new(), None, &extra, ip)
                .await
                .status
        }
    };
    assert_eq!(get([10, 0, 0, 13], Some("127.0.0.1")).await, 401);
    assert_eq!(get([10, 0, 0, 13], Some("10.9.9.9, 127.0.0.1")).await, 401);
    assert_eq!(get([127, 0, 0, 1], None).await, 200);
    // A local proxy forwarding a remote client: the socket is loopback, but the client the
    // trusted proxy names is remote, so it needs the token (issue 39 row 8).
    assert_eq!(get([127, 0, 0, 1], Some("203.0.113.7")).await, 401);
    assert_eq!(get([127, 0, 0, 1], Some("127.0.0.1")).await, 200);
    env.redis.stop().await;
}
