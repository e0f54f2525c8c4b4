//! What people see of a stored result's freshness, server-rendered (so without JavaScript):
//! the query page says how old a stale result is and that it is being refreshed (a live
//! `role=status` line, and the page refreshes itself until the refresh is over), or that the
//! refresh failed and how old the result shown is; the admin task page shows the result's
//! age, its windows and the refresh beside it. The live swap to the refreshed result is
//! `live_streams.rs` (the stream) and `end2end/tests/freshness.spec.ts` (the browser).

use crate::common;
use common::{admin, api};

use std::time::Duration;

/// Hang guard of every wait below (never a measure of speed).
const GUARD: Duration = Duration::from_secs(60);

/// The text of the element whose `data-testid` is `testid` (its first text, up to the next
/// tag), or "" when it has none.
fn text_of(body: &str, testid: &str) -> String {
    let Some(at) = body.find(&format!("data-testid=\"{testid}\"")) else {
        return String::new();
    };
    let rest = &body[at..];
    let Some(open) = rest.find('>') else {
        return String::new();
    };
    let rest = &rest[open + 1..];
    rest[..rest.find('<').unwrap_or(rest.len())].to_string()
}

/// The opening tag of the element whose `data-testid` is `testid`.
fn tag_of(body: &str, testid: &str) -> String {
    let at = body
        .find(&format!("data-testid=\"{testid}\""))
        .unwrap_or_else(|| panic!("no {testid} in {body}"));
    let start = body[..at].rfind('<').unwrap();
    let end = at + body[at..].find('>').unwrap();
    body[start..=end].to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_query_page_says_a_stale_result_is_refreshed_then_that_the_refresh_failed() {
    const FRESH_MS: u64 = 300;
    let env = api::Env::start(api::Opts {
        api: crate::common::api_unlimited(),
        fresh_for_ms: Some(FRESH_MS),
        ..Default::default()
    })
    .await;
    let r = env.submit("stale on the page").await;
    let id = r.json["id"].as_str().unwrap().to_string();
    let c = env.queue.claim("test-worker", 1, 60_000).await.unwrap();
    env.queue
        .complete(&c[0].id, c[0].token, r#"{"v":"old"}"#, 1)
        .await
        .unwrap();
    let page = format!("/q/{id}");
    // Fresh: its age, nothing more, and the page has nothing to wait for.
    let fresh = env.get(&page).await;
    assert_eq!(fresh.status, 200);
    let line = text_of(&fresh.body, "query-freshness");
    if fresh.body.contains("data-freshness=\"fresh\"") {
        assert!(line.starts_with("as of "), "{line}");
        assert!(!line.contains("refreshing"), "{line}");
        assert!(!fresh.body.contains("http-equiv"), "final: no self-refresh");
    }
    // Past its fresh window, asked again: the old result at once, with its refresh.
    tokio::time::timeout(GUARD, async {
        while env.get(&format!("/api/v1/queries/{id}")).await.json["freshness"] != "stale" {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the result went stale (hang guard)");
    let r = env.submit("stale on the page").await;
    assert_eq!(r.json["refreshing"], true, "{}", r.body);

    let stale = env.get(&page).await;
    assert_eq!(stale.status, 200);
    let tag = tag_of(&stale.body, "query-freshness");
    assert!(tag.contains("role=\"status\""), "{tag}");
    assert!(tag.contains("data-freshness=\"refreshing\""), "{tag}");
    // A banner that moves while the refresh runs, not small grey text (issue 43, row 9).
    assert!(tag.contains("class=\"freshness banner busy\""), "{tag}");
    let line = text_of(&stale.body, "query-freshness");
    assert!(
        line.starts_with("as of ") && line.ends_with(" · refreshing…"),
        "{line}"
    );
    assert!(stale.body.contains("&quot;old&quot;") || stale.body.contains("\"old\""));
    // Without JavaScript the page reloads itself until the refresh is over.
    assert!(
        stale.body.contains("http-equiv=\"refresh\""),
        "self-refresh"
    );

    // The refresh dies: stale-if-error, said in words, and nothing more to wait for.
    let c = env.queue.claim("test-worker", 1, 60_000).await.unwrap();
    env.queue
        .fail(&c[0].id, c[0].token, "HTTP 500", queue::Retry::Dead, 1)
        .await
        .unwrap();
    let failed = env.get(&page).await;
    let tag = tag_of(&failed.body, "query-freshness");
    assert!(tag.contains("data-freshness=\"upstream_failed\""), "{tag}");
    let line = text_of(&failed.body, "query-freshness");
    assert!(
        line.starts_with("Could not refresh: the upstream failed. Showing the result from ")
            && line.ends_with(" ago."),
        "{line}"
    );
    assert_eq!(
        text_of(&failed.body, "query-status"),
        "done",
        "still the result"
    );
    assert!(
        !failed.body.contains("http-equiv"),
        "final: no self-refresh"
    );
    env.stop().await;
}

#[tokio::test]
async fn the_task_page_shows_a_results_age_windows_and_refresh() {
    let env = admin::start().await;
    let (r, q) = (&env.router, &env.queue);
    q.enqueue("refresh me", "", &Default::default())
        .await
        .unwrap();
    let c = q.claim("w", 1, 60_000).await.unwrap().remove(0);
    q.complete(&c.id, c.token, r#"{"v":1}"#, 5).await.unwrap();
    let id = c.id;
    let ip = [10, 0, 0, 61];
    let cookie = admin::sign_in(r, admin::ADMIN_PW, ip).await.ok().unwrap();
    let path = format!("/admin/tasks/{id}");

    let page = admin::get_page(r, &path, Some(&cookie), ip).await;
    assert_eq!(page.status, 200);
    for field in ["fresh until", "stale until", "stale-if-error until"] {
        let tag = format!("field-{field}");
        assert!(
            page.body.contains(&format!("data-testid=\"{tag}\"><time")),
            "{field} is a time: {}",
            page.body
        );
    }
    assert!(
        text_of(&page.body, "field-age").contains("fresh: answered as it is"),
        "{}",
        text_of(&page.body, "field-age")
    );
    assert_eq!(text_of(&page.body, "field-refresh"), "none");

    // A caller refuses the stored result (max-age=0): a refresh is made beside it.
    let policy = queue::EnqueuePolicy {
        max_age_ms: Some(0),
        ..Default::default()
    };
    let asked = q.enqueue("refresh me", "", &policy).await.unwrap();
    assert!(
        matches!(asked, queue::Enqueued::Stale { created: true, .. }),
        "{asked:?}"
    );
    let page = admin::get_page(r, &path, Some(&cookie), ip).await;
    // The task's own field says it is a refresh, the result's says one waits.
    let fields: Vec<String> = page
        .body
        .match_indices("data-testid=\"field-refresh\"")
        .map(|(at, _)| text_of(&page.body[at..], "field-refresh"))
        .collect();
    assert_eq!(fields.len(), 2, "{fields:?}");
    assert!(
        fields[0].starts_with("yes: its result replaces"),
        "{fields:?}"
    );
    assert!(
        fields[1].starts_with("a refresh waits its turn"),
        "{fields:?}"
    );
    env.redis.stop().await;
}

/// Issue 29, row 4: with the upstream's breaker open, a waiting query's page said "0 polls so
/// far · next poll due now" for up to 15 minutes. It now says the upstream is unavailable and
/// when the next try is (server-rendered, so without JavaScript too; the live page asks again
/// every few seconds), and nothing of the kind once the breaker is closed.
#[tokio::test(flavor = "multi_thread")]
async fn a_query_held_by_the_open_breaker_says_the_upstream_is_unavailable() {
    let env = api::Env::start(api::Opts {
        api: crate::common::api_unlimited(),
        ..Default::default()
    })
    .await;
    let r = env.submit("held by the breaker").await;
    let id = r.json["id"].as_str().unwrap().to_string();
    let page = format!("/q/{id}");
    let before = env.get(&page).await;
    assert_eq!(before.status, 200);
    assert!(!before.body.contains("query-breaker"), "closed: no notice");

    env.queue.open_breaker("ops", 15 * 60_000).await.unwrap();
    let held = env.get(&page).await;
    assert_eq!(held.status, 200);
    let tag = tag_of(&held.body, "query-breaker");
    assert!(tag.contains("role=\"status\""), "{tag}");
    let notice = held
        .body
        .split("data-testid=\"query-breaker\"")
        .nth(1)
        .unwrap();
    let notice = &notice[..notice.find("</p>").unwrap()];
    assert!(
        notice.contains("The upstream API is unavailable right now."),
        "{notice}"
    );
    assert!(notice.contains("the next try is in 1"), "{notice}");
    assert_eq!(
        text_of(&held.body, "query-next-poll"),
        "waiting for the upstream"
    );

    env.queue.close_breaker("ops").await.unwrap();
    let after = env.get(&page).await;
    assert!(
        !after.body.contains("query-breaker"),
        "closed again: no notice"
    );
}

/// The page of a failed query has a "Try again" form — a plain post of the query form, so it
/// works without JavaScript — that starts a new life of the task; for a failure kept by
/// negative caching it says until when asking again answers the same failure.
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_query_can_be_tried_again_from_its_page() {
    use leptos::server_fn::ServerFn;
    let env = api::Env::start(api::Opts::default()).await;
    let mut ids = Vec::new();
    for (text, retry) in [
        ("given up after its attempts", queue::Retry::After(0)),
        ("refused for good", queue::Retry::Dead),
    ] {
        let policy = queue::EnqueuePolicy {
            max_attempts: 1,
            ..Default::default()
        };
        env.queue.enqueue(text, "", &policy).await.unwrap();
        let c = env.queue.claim("test-worker", 1, 60_000).await.unwrap();
        let failed = env.queue.fail(&c[0].id, c[0].token, "HTTP 500", retry, 1);
        assert!(matches!(failed.await.unwrap(), queue::Failed::Dead { .. }));
        ids.push((text, c[0].id.to_string()));
    }
    for (i, (text, id)) in ids.iter().enumerate() {
        let page = env.get(&format!("/q/{id}")).await;
        let form = tag_of(&page.body, "query-retry");
        assert!(form.contains("method=\"post\""), "{form}");
        assert!(form.contains(app::pages::SubmitQuery::PATH), "{form}");
        assert!(
            page.body
                .contains(&format!("name=\"query\" value=\"{text}\"")),
            "the form carries the query: {}",
            page.body
        );
        let kept = text_of(&page.body, "query-retry-kept");
        assert_eq!(kept.contains("until"), i == 1, "{text}: {kept:?}");
        let posted = env
            .send(
                axum::http::Request::post(app::pages::SubmitQuery::PATH)
                    .header("content-type", "application/x-www-form-urlencoded")
                    .header("accept", "text/html")
                    .header("origin", "http://localhost")
                    .header("host", "localhost")
                    .body(axum::body::Body::from(format!(
                        "query={}",
                        text.replace(' ', "+")
                    )))
                    .unwrap(),
            )
            .await;
        assert_eq!(posted.status, 302, "{text}: {}", posted.body);
        let task = env.queue.get(id).await.unwrap().unwrap().task.unwrap();
        let want = [queue::TaskState::Due, queue::TaskState::Dead][i];
        assert_eq!(task.state, want, "{text}: a new life, or the failure kept");
    }
    env.stop().await;
}
