//! The answers by freshness on the admin pages, through the real router against a private
//! redis-server: the Upstreams page gives each upstream's hit ratio of the last minutes, the
//! overview of an upstream its answers charts, hit ratio and table over the chosen window,
//! read from the queue's per-minute counters (the named upstream is partitioned: P = 3).

use crate::common;
use common::admin::*;

/// Asks of the named upstream `search`, through the queue as the API asks: 4 tasks created
/// (misses), 3 completed and asked again (fresh hits), 1 asked with no-cache (a stale hit and
/// its refresh), 1 dead for good and asked again (a negative hit), 1 more task created. 5 hits
/// of 10 answers.
async fn ask_search(search: &queue::Queue) {
    let p = queue::EnqueuePolicy::default();
    for i in 0..4 {
        search.enqueue(&format!("find {i}"), "", &p).await.unwrap();
    }
    let mut leased = Vec::new();
    for _ in 0..20 {
        leased.extend(search.claim("w", 4, 60_000).await.unwrap());
        if leased.len() == 4 {
            break;
        }
    }
    assert_eq!(leased.len(), 4);
    let dying = search.task_id(&queue::normalise_query("find 3").unwrap());
    for c in &leased {
        if c.id == dying {
            search
                .fail(
                    c.id.as_str(),
                    c.token,
                    "no such thing",
                    queue::Retry::Dead,
                    1,
                )
                .await
                .unwrap();
        } else {
            search
                .complete(c.id.as_str(), c.token, "{}", 1)
                .await
                .unwrap();
        }
    }
    for i in 0..4 {
        let e = search.enqueue(&format!("find {i}"), "", &p).await.unwrap();
        let want = if i == 3 { "Negative" } else { "Stored" };
        assert!(format!("{e:?}").starts_with(want), "{e:?}");
    }
    let no_cache = queue::EnqueuePolicy {
        max_age_ms: Some(0),
        ..Default::default()
    };
    let e = search.enqueue("find 0", "", &no_cache).await.unwrap();
    assert!(matches!(e, queue::Enqueued::Stale { .. }), "{e:?}");
    let e = search.enqueue("find 4", "", &p).await.unwrap();
    assert!(matches!(e, queue::Enqueued::Created(_)), "{e:?}");
    // Counted in memory (queue's answer_counts): written now rather than within the second.
    search.flush_answer_counts().await.unwrap();
}

#[tokio::test]
async fn the_upstreams_page_and_the_overview_show_the_answers_by_freshness() {
    let env = start().await;
    let (r, search) = (&env.router, &env.search);
    let ip = [10, 0, 0, 31];
    let cookie = sign_in(r, ADMIN_PW, ip).await.expect("signed in");
    ask_search(search).await;

    let page = get_page(r, "/admin/upstreams", Some(&cookie), ip).await;
    assert_eq!(page.status, 200, "{}", page.body);
    let row = |name: &str| {
        page.body
            .split(&format!("data-testid=\"upstream-{name}\""))
            .nth(1)
            .unwrap_or_else(|| panic!("no row {name}: {}", page.body))
            .split("</tr>")
            .next()
            .unwrap()
            .to_string()
    };
    let search_row = row("search");
    assert_eq!(testid_text(&search_row, "upstream-hit-ratio"), "50 %");
    assert_eq!(testid_text(&search_row, "upstream-hits"), "5 of 10");
    assert!(
        search_row.contains("3 fresh, 1 stale, 1 negative"),
        "{search_row}"
    );
    assert!(
        search_row.contains("href=\"/admin?window=1h&amp;upstream=search\""),
        "{search_row}"
    );
    // The default upstream answered nothing: no ratio, not 0 %.
    let default_row = row("default");
    assert_eq!(testid_text(&default_row, "upstream-hit-ratio"), "—");
    assert_eq!(testid_text(&default_row, "upstream-hits"), "0 of 0");

    // The overview of `search`, on every window: the same answers (all in the last minutes).
    for window in ["1h", "24h", "7d"] {
        let path = format!("/admin?window={window}&upstream=search");
        let page = get_page(r, &path, Some(&cookie), ip).await;
        assert_eq!(page.status, 200, "{path}: {}", page.body);
        let b = &page.body;
        assert_eq!(testid_text(b, "hit-ratio"), "50 %", "{path}");
        let summary = b.split("data-testid=\"answers-summary\"").nth(1).unwrap();
        assert!(
            summary.contains(
                "5 of 10 answers from the store (3 fresh, 1 stale, 1 negative), 5 misses; \
                 refreshes: 0 started ahead, 0 failed"
            ),
            "{path}: {summary}"
        );
        for chart in ["answers-chart", "hit-ratio-chart", "answers-table"] {
            assert!(
                b.contains(&format!("data-testid=\"{chart}\"")),
                "{path}: {chart}"
            );
        }
        // The hit ratio over the window in the chart's caption, and no NaN drawn.
        let caption = b.split("data-testid=\"hit-ratio-chart\"").nth(1).unwrap();
        assert!(caption.contains("(5 of 10 answers)"), "{path}");
        assert!(!b.contains("NaN"), "{path}");
        // The table: a row of the point with the answers (fresh, stale, negative, miss,
        // ahead, failed, ratio), or two when the asks spanned a minute's end.
        let table = b.split("data-testid=\"answers-table\"").nth(1).unwrap();
        // (Without the hydration markers between the cells.)
        let table = table.split("</details>").next().unwrap().replace("<!>", "");
        let rows = table.matches("<tr>").count() - 1;
        assert!(rows == 1 || rows == 2, "{path}: {table}");
        if rows == 1 {
            assert!(
                table.contains(
                    "<td class=\"num\">3</td><td class=\"num\">1</td><td class=\"num\">1</td>\
                     <td class=\"num\">5</td><td class=\"num\">0</td><td class=\"num\">0</td>\
                     <td class=\"num\">50 %</td>"
                ),
                "{path}: {table}"
            );
        }
    }
    // The default upstream's overview: no answers, the charts say so.
    let page = get_page(r, "/admin?window=1h", Some(&cookie), ip).await;
    assert_eq!(testid_text(&page.body, "hit-ratio"), "—");
    assert!(page
        .body
        .contains("No answers and no refreshes in this window."));
    env.redis.stop().await;
}
