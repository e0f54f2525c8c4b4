//! The admin task page tells a task's story at the default history level (issue 29): its
//! claims, its polls summed up, its query, upstream and tenant while it runs and once it is
//! done, the time to result from its creation, and a failed call's HTTP status, duration and
//! body as fields of their own (the body as text, never HTML, and to admins only; invisible
//! characters of upstream text shown as markers).

mod common;
use common::admin::*;

use std::time::Duration;

use queue::{EnqueuePolicy, FailedCall, Retry};

const IP: [u8; 4] = [10, 0, 0, 29];

/// The text of the field `name` of the task page (its first occurrence).
fn field(body: &str, name: &str) -> String {
    testid_text(body, &format!("field-{name}"))
}

/// The timeline's entries of `kind`, as their raw markup.
fn timeline_entries<'a>(body: &'a str, kind: &str) -> Vec<&'a str> {
    let marker = format!("data-kind=\"{kind}\"");
    body.split(&marker)
        .skip(1)
        .map(|rest| rest.split("</li>").next().unwrap_or(rest))
        .collect()
}

#[tokio::test]
async fn the_task_page_tells_the_polls_claims_and_who_asked_before_and_after_done() {
    let env = start().await;
    let (r, q) = (&env.router, &env.queue);
    let cookie = sign_in(r, ADMIN_PW, IP).await.expect("admin signs in");
    let policy = EnqueuePolicy {
        tenant: "acme".into(),
        ..EnqueuePolicy::default()
    };
    q.enqueue("story page query", "", &policy).await.unwrap();
    let mut last = None;
    for _ in 0..3 {
        let c = q.claim("poller-1", 1, 60_000).await.unwrap().remove(0);
        tokio::time::sleep(Duration::from_millis(5)).await;
        q.reschedule(&c.id, c.token, 0, None, 1).await.unwrap();
        last = Some(c);
    }
    let last = last.unwrap();
    let id = last.id.clone();
    let path = format!("/admin/tasks/{id}");

    // Waiting between polls: the polls summed up, the last claim, the tenant.
    let page = get_page(r, &path, Some(&cookie), IP).await;
    assert_eq!(page.status, 200);
    let polls = field(&page.body, "polls");
    assert!(polls.starts_with("3 polls, every ~"), "{polls}");
    assert!(
        polls.contains(", first ") && polls.contains(", last "),
        "{polls}"
    );
    assert_eq!(field(&page.body, "tenant"), "acme");
    assert!(!field(&page.body, "upstream").is_empty());
    let claims = timeline_entries(&page.body, "claimed");
    assert!(
        claims
            .iter()
            .any(|c| c.contains(&format!("by poller-1 token {}", last.token))),
        "{claims:?}"
    );
    assert_eq!(timeline_entries(&page.body, "polled").len(), 1);
    // Entries seconds apart keep their order to the eye: each says its time to the second
    // ("17:44:38 · just now"), not only "just now" / "7 min ago" (issue 43 row 7).
    for entry in &claims {
        let when = entry
            .split("<time")
            .nth(1)
            .and_then(|t| t.split_once('>'))
            .map(|(_, text)| text)
            .unwrap_or_else(|| panic!("no time in {entry}"));
        let b = when.as_bytes();
        assert!(
            b.len() > 11
                && b[2] == b':'
                && b[5] == b':'
                && [0, 1, 3, 4, 6, 7].iter().all(|&i| b[i].is_ascii_digit())
                && when[8..].starts_with(" · "),
            "{entry}"
        );
    }

    // Done: the result's fields tell the query, upstream and tenant, the claim that completed
    // it, the polls, and the time to result counted from the enqueue.
    let c = q.claim("finisher-2", 1, 60_000).await.unwrap().remove(0);
    tokio::time::sleep(Duration::from_millis(5)).await;
    q.complete(&c.id, c.token, "{\"answer\":42}", 0)
        .await
        .unwrap();
    let page = get_page(r, &path, Some(&cookie), IP).await;
    assert_eq!(page.status, 200);
    let body = &page.body;
    assert!(
        body.contains("story page query"),
        "the query is on a done task's page"
    );
    assert_eq!(field(body, "tenant"), "acme");
    assert!(!field(body, "upstream").is_empty());
    assert_eq!(
        field(body, "completed by"),
        format!("finisher-2 token {}", c.token)
    );
    assert!(field(body, "polls").starts_with("3 polls, every ~"));
    let ttr = field(body, "time to result");
    assert!(
        ttr.ends_with("from the enqueue") && !ttr.starts_with("under 1 ms"),
        "{ttr}"
    );
    let done = timeline_entries(body, "completed");
    assert_eq!(done.len(), 1);
    assert!(
        done[0].contains("after the enqueue") && !done[0].contains("result under 1 ms"),
        "{}",
        done[0]
    );
    assert!(timeline_entries(body, "claimed")
        .iter()
        .any(|e| e.contains(&format!("by finisher-2 token {}", c.token))));
    env.redis.stop().await;
}

#[tokio::test]
async fn a_failed_call_shows_its_status_duration_and_body_as_text() {
    let env = start().await;
    let (r, q) = (&env.router, &env.queue);
    let cookie = sign_in(r, ADMIN_PW, IP).await.expect("admin signs in");
    q.enqueue("story failing query", "", &EnqueuePolicy::default())
        .await
        .unwrap();
    let c = q.claim("w-fail", 1, 60_000).await.unwrap().remove(0);
    // Upstream text with a direction override and a zero-width space (issue 39 row 6).
    let call = FailedCall {
        http_status: Some(503),
        took_ms: 1_250,
        body: "<b>db-7</b> is down: evil\u{202E}txt.exe".into(),
    };
    q.fail_and_claim(
        &c.id,
        c.token,
        "HTTP 503: db-7\u{200B} is down",
        &call,
        Retry::After(60_000),
        "w-fail",
        0,
        60_000,
    )
    .await
    .unwrap()
    .0
    .unwrap();
    let page = get_page(r, &format!("/admin/tasks/{}", c.id), Some(&cookie), IP).await;
    assert_eq!(page.status, 200);
    let body = &page.body;
    assert_eq!(field(body, "HTTP status"), "503");
    assert_eq!(field(body, "call took"), "1.2 s");
    assert!(
        body.contains("&lt;b&gt;db-7&lt;/b&gt; is down"),
        "the body is text"
    );
    assert!(!body.contains("<b>db-7</b>"), "never HTML");
    // Invisible characters of upstream text are shown as markers (each in its own element,
    // so read as the text a person sees), never raw.
    let shown = without_tags(body);
    assert!(shown.contains("evil⟨U+202E⟩txt.exe"), "the override marked");
    assert!(
        shown.contains("db-7⟨U+200B⟩ is down"),
        "the zero-width space marked"
    );
    assert!(
        !body.contains('\u{202E}') && !body.contains('\u{200B}'),
        "never raw"
    );
    // A viewer sees the status and the error, never the body (README: admins only), not
    // even in the data the page hydrates from (issue 39 row 7).
    let viewer = sign_in(r, VIEWER_PW, [10, 0, 0, 30])
        .await
        .expect("viewer signs in");
    let seen = get_page(r, &format!("/admin/tasks/{}", c.id), Some(&viewer), IP).await;
    assert_eq!(seen.status, 200);
    assert_eq!(field(&seen.body, "HTTP status"), "503");
    assert!(
        seen.body
            .contains("data-testid=\"failed-body-admins-only\""),
        "the viewer is told the body is for admins"
    );
    assert!(
        !seen.body.contains("db-7&lt;/b&gt;") && !seen.body.contains("evil"),
        "no body for a viewer"
    );
    // The next try, in words that stay true (not a countdown that does not tick).
    let then = testid_text(body, "attempt-then");
    assert_eq!(then, "next try due 1 min later");
    // A live task may still get partial data.
    assert_eq!(testid_text(body, "task-partial"), "No partial data yet.");

    // Dead now: nothing "yet" about partial data.
    assert!(q.retry(&c.id, "test").await.unwrap(), "due now");
    let c = q.claim("w-fail", 1, 60_000).await.unwrap().remove(0);
    q.fail(&c.id, c.token, "HTTP 404", Retry::Dead, 3)
        .await
        .unwrap();
    let page = get_page(r, &format!("/admin/tasks/{}", c.id), Some(&cookie), IP).await;
    assert_eq!(
        testid_text(&page.body, "task-partial"),
        "The upstream sent no partial data."
    );
    assert_eq!(
        field(&page.body, "HTTP status"),
        "none (no HTTP error answer)"
    );
    env.redis.stop().await;
}

/// The caller context the queue stores, as a tracing process's source would give it.
static CALLER_CONTEXT: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

fn caller_context() -> Option<String> {
    CALLER_CONTEXT.lock().unwrap().clone()
}

/// The markup of the task page's `trace` field, `None` when the page has none.
fn trace_field(body: &str) -> Option<&str> {
    let after = body.split_once("data-testid=\"field-trace\"")?.1;
    Some(after.split("</dd>").next().unwrap_or(after))
}

/// Issue 27: the task page shows the traces a task keeps — the creator's and a joiner's —
/// linked through REPOLL_TRACE_URL (the id put in, encoded; a new tab that gets no opener
/// or referrer), as text without it, and nothing for a task made while tracing was off.
#[tokio::test]
async fn the_task_page_links_the_creators_and_joiners_traces() {
    // Other tests of this binary store whatever context is set meanwhile; none reads it.
    queue::trace_context::install(caller_context);
    let env = start().await;
    let (r, q) = (&env.router, &env.queue);
    let cookie = sign_in(r, ADMIN_PW, IP).await.expect("admin signs in");
    let (creator, joiner) = ("a".repeat(32), "b".repeat(32));
    let policy = EnqueuePolicy::default();
    let enqueue_as = |trace_id: Option<&str>, query: &'static str| {
        *CALLER_CONTEXT.lock().unwrap() = trace_id.map(|t| format!("00-{t}-00f067aa0ba902b7-01"));
        q.enqueue(query, "", &policy)
    };
    let id = match enqueue_as(Some(&creator), "traced query").await.unwrap() {
        queue::Enqueued::Created(t) => t.id,
        other => panic!("{other:?}"),
    };
    let joined = enqueue_as(Some(&joiner), "traced query").await.unwrap();
    assert!(matches!(joined, queue::Enqueued::Joined(_)), "{joined:?}");
    let untraced = match enqueue_as(None, "untraced query").await.unwrap() {
        queue::Enqueued::Created(t) => t.id,
        other => panic!("{other:?}"),
    };
    let path = format!("/admin/tasks/{id}");

    // No template: the ids as text, no link.
    let page = get_page(r, &path, Some(&cookie), IP).await;
    assert_eq!(page.status, 200);
    let field = trace_field(&page.body).expect("a trace field").to_string();
    let made = field.find(&creator).expect("the creator's trace id");
    let join = field.find(&joiner).expect("the joiner's trace id");
    assert!(made < join, "the creator's first: {field}");
    assert!(
        field.contains("made by") && field.contains("joined by"),
        "{field}"
    );
    assert!(!field.contains("<a "), "{field}");

    // With a template: each id a link into the viewer.
    let linked = restarted(
        &env,
        false,
        |_| {},
        |s| s.app.trace_url = Some("https://tempo.example/explore?trace={trace_id}&org=1".into()),
    );
    let page = get_page(&linked, &path, Some(&cookie), IP).await;
    assert_eq!(page.status, 200);
    let field = trace_field(&page.body).expect("a trace field");
    for trace_id in [&creator, &joiner] {
        let href = format!("href=\"https://tempo.example/explore?trace={trace_id}&amp;org=1\"");
        assert!(field.contains(&href), "{href} in {field}");
    }
    assert_eq!(
        field.matches("rel=\"noopener noreferrer\"").count(),
        2,
        "{field}"
    );

    // A task made while tracing was off: no trace field at all.
    let page = get_page(
        &linked,
        &format!("/admin/tasks/{untraced}"),
        Some(&cookie),
        IP,
    )
    .await;
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains("data-testid=\"task-fields\""),
        "the task is shown"
    );
    assert!(trace_field(&page.body).is_none(), "{}", page.body);
}

/// The page's text as a browser shows it, roughly: markup left out, entities as they are.
fn without_tags(html: &str) -> String {
    let mut out = String::with_capacity(html.len());
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => in_tag = false,
            _ if !in_tag => out.push(c),
            _ => {}
        }
    }
    out
}

#[tokio::test]
async fn a_job_apis_job_shows_on_the_task_page_without_its_query_string() {
    let env = start().await;
    let (r, q) = (&env.router, &env.queue);
    let cookie = sign_in(r, ADMIN_PW, IP).await.expect("admin signs in");
    q.enqueue("story job query", "", &EnqueuePolicy::default())
        .await
        .unwrap();
    let c = q.claim("w-job", 1, 60_000).await.unwrap().remove(0);
    // The job as a worker stores it after a submit: a URL taken from the answer, here a
    // presigned one whose query string carries a credential.
    let stored = q
        .reschedule_many(&[queue::Reschedule {
            id: c.id.clone(),
            token: c.token,
            delay_ms: 60_000,
            partial: None,
            latency_ms: 3,
            job: Some("https://api.example/v1/jobs/j-1?sig=s3cret-sig".into()),
        }])
        .await
        .unwrap();
    assert!(stored[0].is_ok(), "{stored:?}");
    let page = get_page(r, &format!("/admin/tasks/{}", c.id), Some(&cookie), IP).await;
    assert_eq!(page.status, 200);
    assert_eq!(
        field(&page.body, "upstream job"),
        "https://api.example/v1/jobs/j-1"
    );
    assert!(
        !page.body.contains("s3cret-sig"),
        "the query string is never shown"
    );
    let submitted = timeline_entries(&page.body, "submitted");
    assert_eq!(submitted.len(), 1, "the history's submit entry");
    assert!(submitted[0].contains("upstream job https://api.example/v1/jobs/j-1"));
    // A task of the repeating kind has no such field.
    q.enqueue("story plain query", "", &EnqueuePolicy::default())
        .await
        .unwrap();
    let plain = queue::TaskId::of_query(&queue::normalise_query("story plain query").unwrap());
    let page = get_page(r, &format!("/admin/tasks/{plain}"), Some(&cookie), IP).await;
    assert_eq!(page.status, 200);
    assert!(!page.body.contains("field-upstream job"));
}
