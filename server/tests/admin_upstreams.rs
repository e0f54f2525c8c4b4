//! Named upstreams and tenants on the admin pages, through the real router against a private
//! redis-server: the Upstreams page and each upstream's breaker, task lists, task pages and
//! overviews per upstream, tenants counted, searched and selected, the ready list paged.

use crate::common;
use common::admin::*;

use std::time::{Duration, Instant};

use app::pages::admin::tasks::ListTasks;

/// The Upstreams page lists the default upstream and the named one, each with its own
/// breaker; opening one upstream's breaker leaves the other closed, is audited with the
/// upstream's name, and an unknown upstream is refused.
#[tokio::test]
async fn the_upstreams_page_shows_each_upstream_and_its_own_breaker() {
    let env = start().await;
    let (r, q, search) = (&env.router, &env.queue, &env.search);
    let ip = [10, 0, 0, 14];
    let cookie = sign_in(r, ADMIN_PW, ip).await.expect("signed in");
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
    // A banner above the table says so, as the overview's does for its queue.
    let banner = page
        .body
        .split_once("data-testid=\"paused-banner-search\"")
        .and_then(|(_, after)| after.split_once("</div>"))
        .map_or("", |(banner, _)| banner);
    assert!(
        banner.contains("Upstream search paused") && banner.contains("by admin"),
        "{banner}"
    );
    assert!(!page.body.contains("paused-banner-default"));
    act_as(r, &cookie, &[("op", "resume"), ("id", "search")]).await;
    assert!(!search.stats().await.unwrap().paused);
    let page = get_page(r, "/admin/upstreams", Some(&cookie), ip).await;
    assert!(!page.body.contains("paused-banner-"), "{}", page.body);
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
    let cookie = sign_in(r, ADMIN_PW, ip).await.expect("signed in");
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

    // A query page asks whether its own upstream is paused, or its breaker open, or polled
    // by no worker (none runs in this test).
    search.pause("ops").await.unwrap();
    let hay = q.task_id("hay in default");
    let asks = |task: String| async move {
        call::<app::pages::ServiceHold>(r, &[("id", task.as_str())], None, &[])
            .await
            .body
    };
    assert_eq!(
        asks(id.to_string()).await,
        r#"{"paused":true,"breaker_until":null,"unpolled":true}"#
    );
    assert_eq!(
        asks(hay.to_string()).await,
        r#"{"paused":false,"breaker_until":null,"unpolled":true}"#
    );
    search.resume("ops").await.unwrap();
    search.open_breaker("ops", 60_000).await.unwrap();
    let until = search.breaker().await.unwrap().unwrap().until_ms;
    assert_eq!(
        asks(id.to_string()).await,
        format!(r#"{{"paused":false,"breaker_until":{until},"unpolled":true}}"#)
    );
    search.close_breaker("ops").await.unwrap();

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
    let cookie = sign_in(r, ADMIN_PW, ip).await.expect("signed in");
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
    let body = without_markers(&named.body);
    let ready = body.split("data-testid=\"count-ready\"").nth(1).unwrap();
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
    let cookie = sign_in(r, ADMIN_PW, ip).await.expect("signed in");
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
    let cookie = sign_in(r, ADMIN_PW, ip).await.expect("signed in");
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
