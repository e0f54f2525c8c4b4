//! The admin pages and actions through the real router against a private redis-server:
//! counts, actions and their audit, hostile text, the breaker banner. (Render times with many
//! tasks are measured by `scripts/bench-pages --tasks N`, not here.) Named upstreams and
//! tenants: admin_upstreams.rs.

use crate::common;
use common::admin::*;

use app::pages::admin::{actions::Act, overview::Overview, task::ReadTask};

#[tokio::test]
async fn admin_actions_work_and_are_audited() {
    let env = start().await;
    let (r, q) = (&env.router, &env.queue);
    let dead = dead_task(q, "dead four").await;
    let (leased, token) = leased_task(q, "held four").await;
    let cookie = sign_in(r, ADMIN_PW, [10, 0, 0, 7])
        .await
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

/// Issue 28 row 9: every admin page that prints a query shows each invisible character it
/// holds as a marker (`⟨U+200D⟩`) with a badge counting them, so two queries that look alike
/// never look identical to an operator; a plain query has neither.
#[tokio::test]
async fn invisible_characters_of_a_query_are_revealed_on_every_admin_page() {
    let env = start().await;
    let (r, q) = (&env.router, &env.queue);
    // An emoji family (two ZWJ), leased; a Persian word (one ZWNJ), done; a plain query.
    let family = "\u{1F469}\u{200D}\u{1F469}\u{200D}\u{1F467} tickets";
    let (leased, _) = leased_task(q, family).await;
    let persian = "\u{645}\u{6CC}\u{200C}\u{62E}\u{648}\u{627}\u{647}\u{645}";
    q.enqueue(persian, "", &Default::default()).await.unwrap();
    let c = q.claim("w", 1, 60_000).await.unwrap().remove(0);
    q.complete(&c.id, c.token, "{}", 5).await.unwrap();
    let (plain, _) = leased_task(q, "plain tickets").await;

    let cookie = sign_in(r, ADMIN_PW, [10, 0, 0, 41]).await.ok().unwrap();
    let search: String = family.bytes().map(|b| format!("%{b:02X}")).collect();
    for (path, marker, count) in [
        (
            "/admin/tasks?state=leased".to_string(),
            "⟨U+200D⟩",
            "2 hidden characters",
        ),
        (
            format!("/admin/tasks?q={search}"),
            "⟨U+200D⟩",
            "2 hidden characters",
        ),
        (
            "/admin/leases?within=3600000".to_string(),
            "⟨U+200D⟩",
            "2 hidden characters",
        ),
        (
            format!("/admin/tasks/{leased}"),
            "⟨U+200D⟩",
            "2 hidden characters",
        ),
        (
            "/admin/tasks?state=results".to_string(),
            "⟨U+200C⟩",
            "1 hidden character",
        ),
    ] {
        let page = get_page(r, &path, Some(&cookie), [10, 0, 0, 41]).await;
        assert_eq!(page.status, 200, "{path}");
        assert!(page.body.contains(marker), "{path} shows no {marker}");
        assert!(
            page.body.contains("data-testid=\"badge-hidden-chars\""),
            "{path} has no badge"
        );
        assert!(page.body.contains(count), "{path}: no \"{count}\"");
    }
    let page = get_page(
        r,
        &format!("/admin/tasks/{plain}"),
        Some(&cookie),
        [10, 0, 0, 41],
    )
    .await;
    assert!(page.body.contains("plain tickets"), "{}", page.body);
    assert!(!page.body.contains("badge-hidden-chars") && !page.body.contains("⟨U+"));
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
    let cookie = sign_in(r, ADMIN_PW, ip).await.expect("signed in");
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
    let actions: Vec<(&str, &str)> = audit
        .iter()
        .map(|a| (a.action.as_str(), a.target.as_str()))
        .collect();
    // Each names the upstream it acted on, the default one too (issue 29 row 9).
    assert!(
        actions.contains(&("open_breaker", "breaker:default")),
        "{actions:?}"
    );
    assert!(
        actions.contains(&("close_breaker", "breaker:default")),
        "{actions:?}"
    );
    env.redis.stop().await;
}
