//! The task search box's suggestions (issue 29) through the real router on a real Redis: what
//! the queue holds — its tenants, error classes and messages, the configured upstreams — comes
//! back as completions of the token typed; a request without a session is refused, bad input
//! is a 400; and the vocabulary is read once per few seconds, not per key press.
//!
//! One test function: the vocabulary cache is the process's, and this binary's only user.

mod common;
use common::admin::*;

use std::time::Instant;

use app::pages::admin::search_box::SearchSuggestions;

/// A task of `tenant` that died of `error`.
async fn dead_of(q: &queue::Queue, query: &str, tenant: &str, error: &str) {
    let policy = queue::EnqueuePolicy {
        tenant: tenant.into(),
        ..Default::default()
    };
    q.enqueue(query, "", &policy).await.unwrap();
    let c = q.claim("test-worker", 1, 60_000).await.unwrap().remove(0);
    q.fail(&c.id, c.token, error, queue::Retry::Dead, 5)
        .await
        .unwrap();
}

/// The suggestions of `text` with the caret at its end, as (label, text after accepting).
async fn ask(
    r: &axum::Router,
    cookie: &str,
    text: &str,
    upstream: Option<&str>,
) -> Vec<(String, String)> {
    let caret = text.encode_utf16().count().to_string();
    let mut fields = vec![("text", text), ("caret", caret.as_str())];
    if let Some(u) = upstream {
        fields.push(("upstream", u));
    }
    let a = call::<SearchSuggestions>(r, &fields, Some(cookie), &[]).await;
    assert_eq!(a.status, 200, "{text}: {}", a.body);
    a.json
        .as_array()
        .unwrap_or_else(|| panic!("{text}: {}", a.body))
        .iter()
        .map(|s| {
            (
                s["label"].as_str().unwrap().to_string(),
                s["text"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Redis's count of sorted-set commands run so far (the task lists are sorted sets; signing
/// in and session checks use none).
async fn zset_commands(env: &Env) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut raw_redis(env).await)
        .await
        .unwrap();
    info.lines()
        .filter(|l| l.starts_with("cmdstat_z"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

#[tokio::test]
async fn suggestions_come_from_the_queue_need_a_session_and_are_cached() {
    let env = start().await;
    let r = &env.router;
    dead_of(
        &env.queue,
        "suggest one",
        "acme-corp",
        "GET http://up.test/q: HTTP 503: db-7 is down",
    )
    .await;
    dead_of(&env.queue, "suggest two", "acorn", "timeout after 30000ms").await;
    // The named upstream's tenant is in its own vocabulary only.
    let globex = queue::EnqueuePolicy {
        tenant: "globex".into(),
        ..Default::default()
    };
    env.search
        .enqueue("suggest three", "", &globex)
        .await
        .unwrap();
    // The answers' counts written now: their once-a-second write (a ZADD of a new minute)
    // must not fall among the sorted-set commands counted below.
    env.queue.flush_answer_counts().await.unwrap();
    env.search.flush_answer_counts().await.unwrap();

    // No session: refused before anything is read.
    let fields = [("text", "tenant:a"), ("caret", "8")];
    let anon = call::<SearchSuggestions>(r, &fields, None, &[]).await;
    assert_eq!(anon.status, 401, "{}", anon.body);

    // A viewer may search, so the search box suggests to a viewer too.
    let viewer = sign_in(r, VIEWER_PW, [10, 0, 0, 61]).await.unwrap();
    let admin = sign_in(r, ADMIN_PW, [10, 0, 0, 60]).await.unwrap();
    let filled = Instant::now();
    let before = zset_commands(&env).await;
    let tenants = ask(r, &viewer, "state:dead tenant:ac", None).await;
    let gather_cost = zset_commands(&env).await - before;
    assert!(gather_cost > 0, "the first ask reads the task lists");
    assert_eq!(
        tenants,
        vec![
            (
                "tenant:acme-corp".to_string(),
                "state:dead tenant:acme-corp ".to_string()
            ),
            (
                "tenant:acorn".to_string(),
                "state:dead tenant:acorn ".to_string()
            ),
        ]
    );

    // Typing on: the same vocabulary, from the cache. Every ask within one cache lifetime
    // (5 s) of the first reads no task list; slower than that, one read per lifetime passed.
    let before = zset_commands(&env).await;
    let qualifier = ask(r, &admin, "sta", None).await;
    assert_eq!(qualifier, vec![("state:".into(), "state:".into())]);
    let classes = ask(r, &admin, "class:", None).await;
    assert_eq!(classes[0].0, "class:http-503", "seen first: {classes:?}");
    assert_eq!(classes[1].0, "class:timeout", "{classes:?}");
    let errors = ask(r, &admin, "error:down", None).await;
    assert_eq!(
        errors,
        [("error:\"HTTP 503\"".into(), "error:\"HTTP 503\" ".into())]
    );
    let group = ask(r, &admin, "group:db", None).await;
    assert!(group[0].0.starts_with("group:"), "{group:?}");
    let upstreams = ask(r, &admin, "upstream:", None).await;
    let names: Vec<&str> = upstreams.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(names, ["upstream:default", "upstream:search"]);
    for n in 0..15 {
        ask(r, &admin, &"tenant:acme-corp"[..7 + n % 9], None).await;
    }
    let reads = zset_commands(&env).await - before;
    let lifetimes_passed = filled.elapsed().as_secs() / 5;
    assert!(
        reads <= lifetimes_passed * gather_cost,
        "20 asks {:?} after the first read the lists {reads} commands' worth (one read: {gather_cost})",
        filled.elapsed()
    );

    // Each upstream its own tenants.
    let named = ask(r, &admin, "tenant:", Some("search")).await;
    let named: Vec<&str> = named.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(named, ["tenant:globex", "tenant:none"]);
    // What a suggestion completes to is a search the list runs: it finds the task.
    let accepted = &tenants[0].1;
    let found = get_page(
        r,
        &format!("/admin/tasks?q={}", accepted.replace(' ', "%20")),
        Some(&admin),
        [10, 0, 0, 60],
    )
    .await;
    assert!(found.body.contains("suggest one"), "{}", found.body);
    assert!(!found.body.contains("suggest two"), "{}", found.body);
    // `upstream:` in the text looks in that upstream.
    let there = get_page(
        r,
        "/admin/tasks?q=upstream%3Asearch%20tenant%3Aglobex",
        Some(&admin),
        [10, 0, 0, 60],
    )
    .await;
    assert!(there.body.contains("suggest three"), "{}", there.body);

    // Bad input: a clear 400, never a 5xx.
    let long = "a".repeat(app::pages::admin::search_box::MAX_TEXT + 1);
    for fields in [
        vec![("text", long.as_str()), ("caret", "1")],
        vec![("text", "x"), ("caret", "1"), ("upstream", "nowhere")],
        vec![("text", "x"), ("caret", "-1")],
        vec![("text", "x")],
    ] {
        let a = call::<SearchSuggestions>(r, &fields, Some(&admin), &[]).await;
        assert_eq!(a.status, 400, "{:?}: {}", &fields[1..], a.body);
    }
    // A caret past the end is the end; nothing to complete is an empty answer.
    let a = call::<SearchSuggestions>(r, &[("text", "sta"), ("caret", "99")], Some(&admin), &[]);
    assert_eq!(a.await.json[0]["text"], "state:");
    assert!(ask(r, &admin, "query:x", None).await.is_empty());
    env.redis.stop().await;
}
