//! The attention strip (issue 43 row 1) through the real router against a private
//! redis-server: every admin page says, under its navigation, what is wrong right now — no
//! worker, every worker quiet, a breaker open, a pause, an old ready task — red while nothing
//! polls, and nothing when all is well; the overview's status line agrees.

use crate::common;
use common::admin::*;

use std::time::Duration;

/// A worker's heartbeat entry in `q`'s registry (a minute to live: past the test).
async fn beat(q: &queue::Queue, id: &str, mode: queue::WorkerMode) {
    let info = queue::WorkerInfo {
        id: id.to_string(),
        host: "test-host".into(),
        pid: 4242,
        started_ms: 0,
        in_flight: 0,
        completed: 0,
        dead: 0,
        last_seen_ms: 0,
        rss_bytes: None,
        mode,
        command: None,
    };
    q.heartbeat(&info, 60_000).await.unwrap();
}

/// The strip's markup on `path`: its class and the `attention-*` items it holds.
async fn strip(env: &Env, cookie: &str, path: &str) -> (String, Vec<String>) {
    let page = get_page(&env.router, path, Some(cookie), [10, 0, 0, 90]).await;
    assert_eq!(page.status, 200, "{path}: {}", page.body);
    let at = page
        .body
        .find("data-testid=\"attention\"")
        .unwrap_or_else(|| panic!("{path}: no attention strip: {}", page.body));
    let open = page.body[..at].rfind('<').unwrap();
    let close = at + page.body[at..].find("</div>").unwrap();
    let html = &page.body[open..close];
    let class = html
        .split_once("class=\"")
        .and_then(|(_, rest)| rest.split_once('"'))
        .map(|(c, _)| c.to_string())
        .unwrap_or_default();
    let items = html
        .match_indices("data-testid=\"attention-")
        .map(|(i, m)| {
            let rest = &html[i + m.len()..];
            let key = &rest[..rest.find('"').unwrap()];
            let text_at = i + rest.find('>').unwrap() + m.len() + 1;
            let text = without_markers(&html[text_at..]);
            format!("{key}: {}", &text[..text.find('<').unwrap_or(text.len())])
        })
        .collect();
    (class, items)
}

#[tokio::test]
async fn every_admin_page_says_what_is_wrong_and_nothing_when_all_is_well() {
    let env = start_custom(
        false,
        server::admin::events::QUIET_REFRESH,
        Default::default(),
        |s| s.attention_ready_age_ms = 50,
    )
    .await;
    let (q, search) = (&env.queue, &env.search);
    let cookie = sign_in(&env.router, ADMIN_PW, [10, 0, 0, 90])
        .await
        .expect("signed in");

    // Nobody polls either upstream: red, on every page, each upstream named.
    for path in [
        "/admin",
        "/admin/tasks",
        "/admin/leases",
        "/admin/upstreams",
        "/admin/bulk",
        "/admin/dead",
    ] {
        let (class, items) = strip(&env, &cookie, path).await;
        assert_eq!(class, "attention red", "{path}: {items:?}");
        assert_eq!(items.len(), 2, "{path}: {items:?}");
        assert!(
            items[0].starts_with("no-worker: No worker of default has reported in")
                && items[1].starts_with("no-worker: No worker of search has reported in"),
            "{path}: {items:?}"
        );
    }
    let overview = get_page(&env.router, "/admin", Some(&cookie), [10, 0, 0, 90]).await;
    assert!(
        overview.body.contains("data-testid=\"not-polled\""),
        "the overview's status line says nothing polls"
    );
    // Without JavaScript the page never connects: the server's render says "not live", not
    // "reconnecting" for ever (issue 43 row 12; the browser's script says "live", admin.spec).
    assert_eq!(testid_text(&overview.body, "live-indicator"), "not live");

    // Workers on both: all is well, and the strip is hidden.
    beat(q, "w-default", queue::WorkerMode::Running).await;
    beat(search, "w-search", queue::WorkerMode::Running).await;
    let (class, items) = strip(&env, &cookie, "/admin/tasks").await;
    assert!(items.is_empty(), "{items:?}");
    assert!(class.contains("hidden"), "{class}");
    let overview = get_page(&env.router, "/admin", Some(&cookie), [10, 0, 0, 90]).await;
    assert!(!overview.body.contains("data-testid=\"not-polled\""));

    // The search upstream's only worker goes quiet: red again, for that one.
    beat(search, "w-search", queue::WorkerMode::Quiet).await;
    let (class, items) = strip(&env, &cookie, "/admin/dead").await;
    assert_eq!(class, "attention red");
    assert_eq!(items.len(), 1, "{items:?}");
    assert!(
        items[0].starts_with("all-quiet: Every worker of search is quiet or stopping (1)"),
        "{items:?}"
    );
    beat(search, "w-search", queue::WorkerMode::Running).await;

    // A ready task older than the configured age (50 ms here), with workers running: amber.
    q.enqueue("waits a while", "", &Default::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(120)).await;
    let (class, items) = strip(&env, &cookie, "/admin").await;
    assert_eq!(class, "attention amber", "{items:?}");
    assert_eq!(items.len(), 1, "{items:?}");
    assert!(
        items[0].starts_with("ready-waiting: The oldest ready task of default has waited"),
        "{items:?}"
    );

    // Paused and a breaker open: each said, the pause explaining the wait (no ready item).
    q.pause("alice").await.unwrap();
    search.open_breaker("bob", 60_000).await.unwrap();
    let (class, items) = strip(&env, &cookie, "/admin/upstreams").await;
    assert_eq!(class, "attention amber", "{items:?}");
    let keys: Vec<&str> = items.iter().map(|i| i.split(':').next().unwrap()).collect();
    assert_eq!(keys, ["breaker", "paused"], "{items:?}");
    assert!(items[1].contains("is paused by alice"), "{items:?}");
    env.redis.stop().await;
}

/// A repartition started while this server runs (its heartbeat reads the queue's meta): the
/// strip says so first, in red, and says nothing else of that queue (its counts would be the
/// old layout's); the layout given back (a refused repartition), the item goes.
#[tokio::test]
async fn a_repartition_under_a_running_server_is_said_first() {
    let env = start().await;
    let cookie = sign_in(&env.router, ADMIN_PW, [10, 0, 0, 91])
        .await
        .expect("signed in");
    let meta = format!("{{{}}}:meta", env.queue.config().name);
    let mut r = raw_redis(&env).await;
    let _: () = redis::cmd("HSET")
        .arg(&meta)
        .arg("moving_to")
        .arg(4)
        .query_async(&mut r)
        .await
        .unwrap();
    beat(&env.queue, "w-moving", queue::WorkerMode::Running).await;
    let (class, items) = strip(&env, &cookie, "/admin/tasks").await;
    assert_eq!(class, "attention red", "{items:?}");
    assert_eq!(
        items.first().map(String::as_str),
        Some(
            "repartition: The queue of default is moving to 4 partitions (repoll admin repartition) while \
             this server runs its old layout of 1: it accepts and claims nothing until it is \
             restarted with REPOLL_PARTITIONS=4. "
        ),
        "{items:?}"
    );
    assert!(
        !items.iter().skip(1).any(|i| i.contains(" of default ")),
        "nothing else of that queue: {items:?}"
    );
    let _: () = redis::cmd("HDEL")
        .arg(&meta)
        .arg("moving_to")
        .query_async(&mut r)
        .await
        .unwrap();
    beat(&env.queue, "w-moving", queue::WorkerMode::Running).await;
    let (_, items) = strip(&env, &cookie, "/admin/tasks").await;
    assert!(
        !items.iter().any(|i| i.starts_with("repartition")),
        "{items:?}"
    );
    env.redis.stop().await;
}
