//! What each role is offered on the dashboard, over real HTTP (the router on a socket): a
//! viewer's pages show no control that changes something — no form posting to an action, no
//! "are you sure" question, no purge box, no link to run bulk actions — while an admin's same
//! pages show them. (That the server refuses a viewer's action whatever the page shows is
//! `viewer_sees_everything_and_changes_nothing` below, through the router in process.)

use crate::common;
use common::admin::*;

use std::time::Duration;

use app::pages::admin::{
    actions::Act, bulk::BulkAct, login::SignIn, overview::Overview, tasks::ListTasks,
};
use leptos::server_fn::ServerFn;
use testkit::Http;

/// Signs in over HTTP as a page script does; the session id from the cookie.
async fn sign_in_over(http: &Http, password: &str) -> String {
    let a = http
        .send(
            http.client
                .post(http.url(SignIn::PATH))
                .header("content-type", "application/x-www-form-urlencoded")
                .header("accept", "application/json")
                .body(form(&[("password", password)])),
        )
        .await;
    a.cookies()
        .iter()
        .find_map(|c| c.strip_prefix("repoll_session="))
        .and_then(|c| c.split(';').next())
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| panic!("not signed in: {} {}", a.status, a.body))
        .to_string()
}

/// The page at `path` as a browser asks for it with session `cookie`; its HTML.
async fn page(http: &Http, path: &str, cookie: &str) -> String {
    let a = http
        .send(
            http.client
                .get(http.url(path))
                .header("accept", "text/html")
                .header("cookie", format!("repoll_session={cookie}")),
        )
        .await;
    assert_eq!(a.status, 200, "{path}: {}", a.body);
    a.body
}

/// The controls that change something which `html` offers: forms posting to the action
/// functions, the questions and purge boxes (`confirm`), the banner's way to resume, the
/// link to run bulk actions.
fn write_controls(html: &str) -> Vec<String> {
    let act = format!("action=\"{}\"", Act::PATH);
    let bulk = format!("action=\"{}\"", BulkAct::PATH);
    [
        act.as_str(),
        bulk.as_str(),
        "name=\"confirm\"",
        "Resume on the overview",
        "data-testid=\"bulk-link\"",
    ]
    .into_iter()
    .filter(|m| html.contains(m))
    .map(str::to_string)
    .collect()
}

#[tokio::test]
async fn a_viewer_is_shown_no_control_that_changes_something() {
    let env = start().await;
    let q = &env.queue;
    // Something for every control to act on: a dead task, a lease past its deadline, a
    // paused queue (its banner), a named upstream (its own pause and breaker).
    let dead = dead_task(q, "dead for the roles").await;
    q.enqueue("held for the roles", "", &Default::default())
        .await
        .unwrap();
    let leased = q.claim("gone-worker", 1, 1).await.unwrap().remove(0).id;
    tokio::time::sleep(Duration::from_millis(20)).await;
    q.pause("test").await.unwrap();
    let server = common::listen(env.router.clone()).await;
    let http = &server.http;
    let admin = sign_in_over(http, ADMIN_PW).await;
    let viewer = sign_in_over(http, VIEWER_PW).await;

    let pages = [
        "/admin".to_string(),
        "/admin?confirm=retry_all_dead".into(),
        "/admin/tasks?state=dead".into(),
        "/admin/tasks?state=dead&confirm=retry_all_dead".into(),
        format!("/admin/tasks/{dead}"),
        format!("/admin/tasks/{leased}"),
        "/admin/leases".into(),
        "/admin/leases?confirm=release_stuck".into(),
        "/admin/upstreams".into(),
        "/admin/bulk?state=dead".into(),
    ];
    let mut seen = Vec::new();
    for path in &pages {
        let offered = write_controls(&page(http, path, &admin).await);
        assert!(
            !offered.is_empty(),
            "{path}: the admin is offered its actions"
        );
        seen.extend(offered);
        let html = page(http, path, &viewer).await;
        assert!(html.contains("read-only"), "{path}: the viewer's page");
        let offered = write_controls(&html);
        assert!(offered.is_empty(), "{path} offers a viewer {offered:?}");
    }
    // Each kind of control was offered to the admin somewhere, so none went unchecked above.
    for kind in [
        format!("action=\"{}\"", Act::PATH),
        format!("action=\"{}\"", BulkAct::PATH),
        "name=\"confirm\"".into(),
        "Resume on the overview".into(),
        "data-testid=\"bulk-link\"".into(),
    ] {
        assert!(seen.contains(&kind), "the admin was never offered {kind}");
    }
    // The viewer still reads everything.
    let listing = page(http, "/admin/tasks?state=dead", &viewer).await;
    assert!(listing.contains("dead for the roles"), "{listing}");
    drop(server);
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
