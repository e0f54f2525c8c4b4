//! Bulk actions through the real router against a private redis-server: who may start them,
//! the count the operator confirmed, the typed count a destructive one needs, and the one
//! audit entry a run ends in.

use crate::common;
use common::admin::*;

use std::time::{Duration, Instant};

use app::pages::admin::{
    bulk::{BulkAct, BulkPreview},
    overview::Overview,
};

/// Waits (a 60 s hang guard, not a timing) for the queue's bulk run to end.
async fn run_end(q: &queue::Queue) -> queue::BulkProgress {
    let guard = Instant::now() + Duration::from_secs(60);
    while Instant::now() < guard {
        match q.bulk_progress().await.unwrap() {
            Some(p) if !p.running() => return p,
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    panic!("the bulk run did not end");
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
    // The run is the server's: wait for its end.
    let end = run_end(q).await;
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

/// Issue 29, row 2: one click purged or cancelled every task a filter matched (up to the
/// 10,000 limit). A destructive run needs the count typed by the operator: without it, or
/// with another number, nothing is done and the answer says what to type; a retry needs no
/// typing.
#[tokio::test]
async fn a_destructive_bulk_run_needs_the_count_typed() {
    let env = start().await;
    let (r, q) = (&env.router, &env.queue);
    for n in ["one", "two", "three"] {
        dead_task(q, &format!("typed {n}")).await;
    }
    let admin = sign_in(r, ADMIN_PW, [10, 0, 0, 42]).await.ok().unwrap();
    let filter = [("filter[state]", "dead"), ("filter[query]", "typed ")];
    for op in ["purge", "cancel"] {
        for typed in [None, Some("2"), Some("three"), Some("")] {
            let mut form = vec![("op", op), ("confirmed", "3")];
            form.extend(filter);
            if let Some(t) = typed {
                form.push(("typed", t));
            }
            let refused = call::<BulkAct>(r, &form, Some(&admin), &[]).await;
            assert_eq!(
                refused.status, 400,
                "{op} typed {typed:?}: {}",
                refused.body
            );
            assert!(
                refused
                    .body
                    .contains("type the number of tasks (3) to confirm"),
                "{op} typed {typed:?}: {}",
                refused.body
            );
        }
    }
    assert_eq!(q.stats().await.unwrap().dead, 3, "nothing was done");
    // The page offers the typing field for purge and cancel, not for retry.
    let page = get_page(
        r,
        "/admin/bulk?state=dead&query=typed",
        Some(&admin),
        [10, 0, 0, 42],
    )
    .await;
    assert_eq!(page.status, 200);
    for op in ["purge", "cancel"] {
        assert!(
            page.body
                .contains(&format!("data-testid=\"bulk-{op}-typed\"")),
            "{op}: {}",
            page.body
        );
    }
    assert!(!page.body.contains("bulk-retry-typed"));
    assert!(page.body.contains("pattern=\"^3$\""), "{}", page.body);

    let mut form = vec![("op", "purge"), ("confirmed", "3"), ("typed", " 3 ")];
    form.extend(filter);
    let started = call::<BulkAct>(r, &form, Some(&admin), &[]).await;
    assert_eq!(started.body, "\"started: purge 3 tasks\"");
    let end = run_end(q).await;
    assert_eq!((end.state.as_str(), end.changed), ("finished", 3));
    assert_eq!(q.stats().await.unwrap().dead, 0);
    env.redis.stop().await;
}
