//! What one row of a dashboard list shows, through the real router against a private
//! redis-server: long texts (a task's query and last error) cut to 160 characters with "…"
//! and a link to the task page, which shows them whole; partial data and results never sent
//! with a list page (not even in the data it hydrates from); and a page of 50 rows of the
//! longest texts stays small.

use crate::common;
use common::admin::*;

/// The characters a row shows of a long text (app's `format::ROW_TEXT_CHARS`).
const ROW: usize = 160;

/// Issue 28: a dead task whose last error is 1,200 bytes (the most the queue keeps) and whose
/// query is 512 characters shows, in the dead list and in search hits, the first 160
/// characters of each with "…" and a link to its task page; the whole error is nowhere on
/// the list page, and the task page shows it. A stuck lease's long query is cut the same way.
#[tokio::test]
async fn a_list_row_cuts_long_texts_and_links_to_the_task_page() {
    let env = start().await;
    let (r, q) = (&env.router, &env.queue);
    // 100 two-byte characters, then ASCII: 1,200 bytes, 1,100 characters.
    let error = format!("{}{}", "ü".repeat(100), "E".repeat(1000));
    assert_eq!(error.len(), 1200);
    let query = format!("long-row {}", "q".repeat(503));
    assert_eq!(query.chars().count(), 512);
    q.enqueue(&query, "", &Default::default()).await.unwrap();
    let c = q.claim("w", 1, 60_000).await.unwrap().remove(0);
    q.fail(&c.id, c.token, &error, queue::Retry::Dead, 5)
        .await
        .unwrap();
    let id = c.id;
    let leased_query = format!("long-lease {}", "l".repeat(501));
    let (leased, _) = leased_task(q, &leased_query).await;

    let ip = [10, 0, 0, 41];
    let cookie = sign_in(r, ADMIN_PW, ip).await.ok().unwrap();
    let shown_error = format!("{}{}…", "ü".repeat(100), "E".repeat(ROW - 100));
    let link = format!("href=\"/admin/tasks/{id}\"");
    for path in [
        "/admin/tasks?state=dead",
        "/admin/tasks?q=state%3Adead%20error%3AEEE",
    ] {
        let page = get_page(r, path, Some(&cookie), ip).await;
        assert_eq!(page.status, 200, "{path}");
        assert_eq!(testid_text(&page.body, "row-error"), shown_error, "{path}");
        assert!(
            page.body
                .contains(&format!("{}…", "q".repeat(ROW - "long-row ".len()))),
            "{path}: the query is cut"
        );
        assert!(
            page.body.contains(&link),
            "{path}: no link to the task page"
        );
        assert_eq!(
            testid_text(&page.body, "whole-error"),
            "whole error",
            "{path}"
        );
        assert_eq!(
            testid_text(&page.body, "whole-query"),
            "whole query",
            "{path}"
        );
        // Neither the HTML nor the data the page hydrates from carries the whole texts.
        assert!(
            !page.body.contains(&"E".repeat(ROW - 100 + 1)),
            "{path}: the whole error is sent with the list"
        );
        assert!(
            !page.body.contains(&"q".repeat(ROW)),
            "{path}: the whole query is sent with the list"
        );
    }

    let task = get_page(r, &format!("/admin/tasks/{id}"), Some(&cookie), ip).await;
    assert_eq!(testid_text(&task.body, "dead-error"), error);
    assert!(
        task.body.contains(&query),
        "the task page shows the whole query"
    );

    let leases = get_page(r, "/admin/leases?within=3600000", Some(&cookie), ip).await;
    assert_eq!(leases.status, 200);
    assert!(
        leases.body.contains(&format!("/admin/tasks/{leased}")),
        "the lease is listed"
    );
    assert!(leases
        .body
        .contains(&format!("{}…", "l".repeat(ROW - "long-lease ".len()))));
    assert!(!leases.body.contains(&"l".repeat(ROW)));
    assert_eq!(testid_text(&leases.body, "whole-query"), "whole query");
    env.redis.stop().await;
}

/// A list never shows partial data or a result, so they are not sent with it: a waiting
/// task's 200 KB partial and a 200 KB result are on their task pages, not on the waiting and
/// results lists (whose hydration data once carried them whole — 50 rows of megabyte partials
/// made a page of megabytes).
#[tokio::test]
async fn partial_data_and_results_are_not_sent_with_a_list() {
    let env = start().await;
    let (r, q) = (&env.router, &env.queue);
    let big = |c: char| serde_json::json!({ "fill": c.to_string().repeat(200_000) }).to_string();
    q.enqueue("row with partial", "", &Default::default())
        .await
        .unwrap();
    let c = q.claim("w", 1, 60_000).await.unwrap().remove(0);
    q.reschedule(&c.id, c.token, 600_000, Some(&big('P')), 5)
        .await
        .unwrap();
    let waiting = c.id;
    q.enqueue("row with result", "", &Default::default())
        .await
        .unwrap();
    let c = q.claim("w", 1, 60_000).await.unwrap().remove(0);
    q.complete(&c.id, c.token, &big('R'), 5).await.unwrap();
    let done = c.id;

    let ip = [10, 0, 0, 42];
    let cookie = sign_in(r, ADMIN_PW, ip).await.ok().unwrap();
    for (path, id, fill) in [
        ("/admin/tasks?state=waiting", &waiting, 'P'),
        ("/admin/tasks?state=results", &done, 'R'),
    ] {
        let page = get_page(r, path, Some(&cookie), ip).await;
        assert_eq!(page.status, 200, "{path}");
        assert!(page.body.contains(&format!("/admin/tasks/{id}")), "{path}");
        assert!(
            !page.body.contains(&fill.to_string().repeat(100)),
            "{path} sends the data: {} bytes",
            page.body.len()
        );
        let task = get_page(r, &format!("/admin/tasks/{id}"), Some(&cookie), ip).await;
        assert!(
            task.body.contains(&fill.to_string().repeat(200_000)),
            "the task page of {id} shows it"
        );
    }
    env.redis.stop().await;
}

/// Issue 28's figure: the dead list's page of 50 rows, each with a query of 512 four-byte
/// characters and a last error of 1,200 bytes (the longest each can be), is at most 200 KB.
#[tokio::test]
async fn fifty_rows_of_the_longest_texts_make_a_page_under_200_kb() {
    let env = start().await;
    let (r, q) = (&env.router, &env.queue);
    for i in 0..50 {
        let query = format!("{i:03} {}", "𝕏".repeat(508));
        q.enqueue(&query, "", &Default::default()).await.unwrap();
        let c = q.claim("w", 1, 60_000).await.unwrap().remove(0);
        let error = format!("{i:03} {}", "€".repeat(398));
        q.fail(&c.id, c.token, &error, queue::Retry::Dead, 5)
            .await
            .unwrap();
    }
    assert_eq!(q.stats().await.unwrap().dead, 50);
    let ip = [10, 0, 0, 43];
    let cookie = sign_in(r, ADMIN_PW, ip).await.ok().unwrap();
    let page = get_page(r, "/admin/tasks?state=dead", Some(&cookie), ip).await;
    assert_eq!(page.status, 200);
    assert_eq!(page.body.matches("data-testid=\"task-row\"").count(), 50);
    println!(
        "dead list, 50 rows of the longest texts: {} bytes",
        page.body.len()
    );
    assert!(
        page.body.len() <= 200 * 1024,
        "{} bytes for 50 rows",
        page.body.len()
    );
    env.redis.stop().await;
}

/// Issue 43 row 4: a row's last error is its class as a chip and its message without the call
/// that got it (the same `GET http://…` on every row of an outage pushed the message out of
/// view); the task page still shows the call.
#[tokio::test]
async fn a_row_shows_the_error_class_and_the_message_without_its_call() {
    let env = start().await;
    let (r, q) = (&env.router, &env.queue);
    q.enqueue("row class", "", &Default::default())
        .await
        .unwrap();
    let c = q.claim("w", 1, 60_000).await.unwrap().remove(0);
    let error = "GET http://upstream.example/api/query?q=row%20class: HTTP 503: simulated outage";
    q.fail(&c.id, c.token, error, queue::Retry::Dead, 5)
        .await
        .unwrap();
    let ip = [10, 0, 0, 44];
    let cookie = sign_in(r, ADMIN_PW, ip).await.ok().unwrap();
    let list = get_page(r, "/admin/tasks?state=dead", Some(&cookie), ip).await;
    assert_eq!(list.status, 200);
    assert_eq!(
        testid_text(&list.body, "row-error"),
        "HTTP 503: simulated outage"
    );
    let chip = list
        .body
        .split("class=\"chip\">")
        .nth(1)
        .expect("a class chip");
    assert_eq!(
        without_markers(&chip[..chip.find("</").unwrap()]),
        "HTTP 503"
    );
    assert!(
        !list.body.contains("upstream.example"),
        "the call is not in the row"
    );
    let task = get_page(r, &format!("/admin/tasks/{}", c.id), Some(&cookie), ip).await;
    assert!(task.body.contains("GET http://upstream.example/api/query"));
    env.redis.stop().await;
}
