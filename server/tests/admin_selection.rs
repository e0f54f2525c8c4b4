//! Acting on ticked rows of the task list (issue 29) through the real router, as a browser
//! without JavaScript posts the selection form: the bulk run on exactly the chosen ids, a
//! destructive one only with their number typed, and nothing at all when no row is ticked.

use crate::common;
use common::admin::*;

use std::time::{Duration, Instant};

use app::pages::admin::bulk::BulkAct;
use leptos::server_fn::ServerFn;

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

/// The selection form posted without JavaScript (`Accept: text/html`) from the dead tab;
/// returns the page the browser is sent back to, as it renders then.
async fn post_form(r: &axum::Router, admin: &str, fields: &[(&str, &str)]) -> (u16, String) {
    let from = "/admin/tasks?state=dead";
    let posted = send(
        r,
        "POST",
        BulkAct::PATH,
        form(fields),
        Some(admin),
        &[
            ("accept", "text/html"),
            ("referer", &format!("http://{HOST}{from}")),
        ],
        [10, 0, 0, 50],
    )
    .await;
    assert!(
        posted.status == 302 || posted.status == 303,
        "{}: {}",
        posted.status,
        posted.body
    );
    let location = posted.headers["location"].to_str().unwrap();
    let location = location
        .strip_prefix(&format!("http://{HOST}"))
        .unwrap_or(location)
        .to_string();
    assert!(location.starts_with(from), "{location}");
    // The flash cookie of a success travels with the redirect, as the browser would send it.
    let mut cookie = admin.to_string();
    if let Some(flash) = posted.headers.get_all("set-cookie").iter().find_map(|v| {
        let v = v.to_str().ok()?;
        v.strip_prefix("repoll_flash=")
            .map(|rest| rest.split(';').next().unwrap_or_default().to_string())
    }) {
        cookie = format!("{admin}; repoll_flash={flash}");
    }
    let page = get_page(r, &location, Some(&cookie), [10, 0, 0, 50]).await;
    (page.status, page.body)
}

#[tokio::test]
async fn ticked_rows_are_acted_on_exactly_and_a_purge_needs_their_number_typed() {
    let env = start().await;
    let (r, q) = (&env.router, &env.queue);
    let mut dead = Vec::new();
    for n in 0..5 {
        dead.push(dead_task(q, &format!("ticked {n}")).await.to_string());
    }
    let admin = sign_in(r, ADMIN_PW, [10, 0, 0, 50]).await.ok().unwrap();
    let viewer = sign_in(r, VIEWER_PW, [10, 0, 0, 51]).await.ok().unwrap();

    // The dead tab offers a box per row (joined to the selection form) to the admin only,
    // and `select=page` renders every box ticked.
    let page = get_page(r, "/admin/tasks?state=dead", Some(&admin), [10, 0, 0, 50]).await;
    assert_eq!(page.status, 200);
    assert_eq!(page.body.matches("data-testid=\"row-select\"").count(), 5);
    assert!(
        page.body.contains("form=\"task-selection\""),
        "{}",
        page.body
    );
    assert!(
        page.body.contains("<option value=\"purge\""),
        "{}",
        page.body
    );
    assert!(!page.body.contains(" checked"), "nothing ticked yet");
    let all = get_page(
        r,
        "/admin/tasks?state=dead&select=page",
        Some(&admin),
        [10, 0, 0, 50],
    );
    assert_eq!(all.await.body.matches(" checked").count(), 5);
    let seen = get_page(r, "/admin/tasks?state=dead", Some(&viewer), [10, 0, 0, 51]).await;
    assert!(!seen.body.contains("row-select"), "a viewer cannot act");

    let base = [
        ("chosen", "rows"),
        ("filter[state]", "dead"),
        ("filter[upstream]", ""),
    ];
    let with = |op: &'static str, ids: &[&'static str], typed: Option<&'static str>| {
        let mut f: Vec<(&str, &str)> = base.to_vec();
        f.push(("op", op));
        for id in ids {
            f.push(("ids[]", id));
        }
        if let Some(t) = typed {
            f.push(("typed", t));
        }
        f
    };
    let ids: Vec<&'static str> = dead.iter().map(|s| &*s.clone().leak()).collect();

    // No row ticked: nothing done (never the whole state), and the page says why.
    let (status, body) = post_form(r, &admin, &with("retry", &[], None)).await;
    assert_eq!(status, 200);
    assert!(body.contains("nothing done: no task chosen"), "{body}");
    assert_eq!(q.stats().await.unwrap().dead, 5);

    // A purge of two ticked rows without their number typed, or with another: nothing.
    for typed in [None, Some("5"), Some("")] {
        let (_, body) = post_form(r, &admin, &with("purge", &ids[..2], typed)).await;
        assert!(
            body.contains("nothing done: type the number of tasks (2) to confirm a purge"),
            "typed {typed:?}: {body}"
        );
    }
    assert_eq!(q.stats().await.unwrap().dead, 5, "one click purges nothing");

    // With it: exactly those two go.
    let (_, body) = post_form(r, &admin, &with("purge", &ids[..2], Some("2"))).await;
    assert!(body.contains("started: purge 2 tasks"), "{body}");
    let end = run_end(q).await;
    assert_eq!((end.state.as_str(), end.changed), ("finished", 2));
    for (i, id) in dead.iter().enumerate() {
        let there = q.get(id).await.unwrap().and_then(|d| d.task).is_some();
        assert_eq!(there, i >= 2, "task {i}");
    }

    // A retry of two others (one ticked twice) needs no typing and retries only them.
    let (_, body) = post_form(r, &admin, &with("retry", &[ids[2], ids[4], ids[4]], None)).await;
    assert!(body.contains("started: retry 2 tasks"), "{body}");
    assert_eq!(run_end(q).await.changed, 2);
    let state = |i: usize| {
        let id = dead[i].clone();
        async move { q.get(&id).await.unwrap().unwrap().task.unwrap().state }
    };
    assert_eq!(state(2).await, queue::TaskState::Due);
    assert_eq!(state(3).await, queue::TaskState::Dead);
    assert_eq!(state(4).await, queue::TaskState::Due);

    // A viewer's post is refused; a bad id is a clear 400.
    let refused = call::<BulkAct>(r, &with("retry", &[ids[3]], None), Some(&viewer), &[]).await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    let bad = call::<BulkAct>(r, &with("retry", &["not-an-id"], None), Some(&admin), &[]).await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert!(bad.body.contains("bad task id"), "{}", bad.body);
    assert_eq!(state(3).await, queue::TaskState::Dead);
    env.redis.stop().await;
}

/// The triage panel and the dead work view as the server renders them: counts by class that
/// link to the search narrowing to them, and the dead work grouped by error with its
/// "retry this group" link carrying the group to the bulk page, which counts exactly it.
#[tokio::test]
async fn facets_and_dead_work_link_to_exactly_their_tasks() {
    let env = start().await;
    let (r, q) = (&env.router, &env.queue);
    for n in 0..3 {
        dead_task(q, &format!("grouped {n}")).await;
    }
    let admin = sign_in(r, ADMIN_PW, [10, 0, 0, 52]).await.ok().unwrap();
    let page = get_page(r, "/admin/tasks?state=dead", Some(&admin), [10, 0, 0, 52]).await;
    assert_eq!(page.status, 200);
    // dead_task fails with "boom": class other, 3 of them.
    assert!(
        page.body
            .contains("href=\"/admin/tasks?q=state%3Adead%20class%3Aother\""),
        "{}",
        page.body
    );
    assert!(page.body.contains("data-testid=\"dead-work-link\""));
    let dead = get_page(r, "/admin/dead", Some(&admin), [10, 0, 0, 52]).await;
    assert_eq!(dead.status, 200);
    assert_eq!(
        dead.body.matches("data-testid=\"dead-group\"").count(),
        1,
        "{}",
        dead.body
    );
    assert!(dead.body.contains("data-count=\"3\""), "{}", dead.body);
    let key = model::error_class::group_of(Some("boom"), Some("fatal")).key;
    let href = format!("/admin/bulk?state=dead&amp;group={key}");
    assert!(dead.body.contains(&href), "{}", dead.body);
    let bulk = get_page(
        r,
        &format!("/admin/bulk?state=dead&group={key}"),
        Some(&admin),
        [10, 0, 0, 52],
    )
    .await;
    assert!(bulk.body.contains("data-count=\"3\""), "{}", bulk.body);
    // The state counts follow the search: one of the three dead tasks is "grouped 1"
    // (issue 43, row 11: "dead 3" was shown beside one found); a tab alone keeps the
    // queue's own count.
    let narrowed = get_page(
        r,
        "/admin/tasks?q=grouped%201",
        Some(&admin),
        [10, 0, 0, 52],
    )
    .await;
    assert_eq!(
        state_count(&narrowed.body, "dead"),
        "1",
        "{}",
        narrowed.body
    );
    let tab = get_page(r, "/admin/tasks?state=dead", Some(&admin), [10, 0, 0, 52]).await;
    assert_eq!(state_count(&tab.body, "dead"), "3");
    env.redis.stop().await;
}

/// The count the triage panel shows beside the state `state`.
fn state_count(body: &str, state: &str) -> String {
    let link = format!("data-facet=\"state\" data-key=\"{state}\"");
    let at = body
        .find(&link)
        .unwrap_or_else(|| panic!("no {state} facet in {body}"));
    let rest = &body[at..];
    let count = rest.find("data-testid=\"facet-count\"").unwrap();
    let rest = &rest[count..];
    let open = rest.find('>').unwrap() + 1;
    rest[open..open + rest[open..].find('<').unwrap()].to_string()
}

/// Issue 39's probe, what held: a selection naming tasks that are not there (forged ids:
/// well-formed, of no task) or tasks its filter does not cover (live tasks posted from the
/// dead tab, another upstream's dead task) acts on nothing: 409, every task as it was, no run
/// started — the ids are checked against the state and upstream, never trusted. And 10,001
/// ids, one more than a bulk run may touch, are refused whole (413, the body limit) before
/// the function reads any of them.
#[tokio::test]
async fn forged_or_foreign_ids_act_on_nothing_and_10001_ids_are_413() {
    let env = start().await;
    let (r, q) = (&env.router, &env.queue);
    let dead = dead_task(q, "ours, dead").await.to_string();
    let theirs = dead_task(&env.search, "theirs, dead").await.to_string();
    let (leased, _) = leased_task(q, "ours, held").await;
    let leased = leased.to_string();
    q.enqueue("ours, waiting", "", &Default::default())
        .await
        .unwrap();
    let waiting = q
        .task_id(&queue::normalise_query("ours, waiting").unwrap())
        .to_string();
    let admin = sign_in(r, ADMIN_PW, [10, 0, 0, 53]).await.ok().unwrap();

    let forged = [
        "0".repeat(32),
        "f".repeat(32),
        // The id the query would have, never asked: a guess of a real id's shape.
        queue::TaskId::of_query("never asked").to_string(),
    ];
    let forged_ids: Vec<&str> = forged.iter().map(String::as_str).collect();
    let selections: Vec<(&str, &str, Vec<&str>)> = vec![
        ("forged", "", forged_ids.clone()),
        (
            "live tasks under the dead tab",
            "",
            vec![waiting.as_str(), leased.as_str()],
        ),
        ("another upstream's dead task", "", vec![theirs.as_str()]),
        (
            "our dead task as the other upstream's",
            "search",
            vec![dead.as_str()],
        ),
        (
            "all of them but ours",
            "",
            [
                forged_ids,
                vec![waiting.as_str(), leased.as_str(), theirs.as_str()],
            ]
            .concat(),
        ),
    ];
    for (what, upstream, ids) in &selections {
        let count = ids.len().to_string();
        for (op, typed) in [("retry", None), ("purge", Some(count.as_str()))] {
            let mut fields = vec![
                ("chosen", "rows"),
                ("filter[state]", "dead"),
                ("filter[upstream]", *upstream),
                ("op", op),
            ];
            fields.extend(ids.iter().map(|id| ("ids[]", *id)));
            if let Some(t) = typed {
                fields.push(("typed", t));
            }
            let reply = call::<BulkAct>(r, &fields, Some(&admin), &[]).await;
            assert_eq!(reply.status, 409, "{what}, {op}: {}", reply.body);
            assert!(
                reply.body.contains("nothing done: no task matches"),
                "{what}, {op}: {}",
                reply.body
            );
        }
    }
    let as_before = async || {
        assert!(q.bulk_progress().await.unwrap().is_none(), "no run started");
        let state = async |q: &queue::Queue, id: &str| {
            q.get(id)
                .await
                .unwrap()
                .and_then(|d| d.task)
                .map(|t| t.state)
        };
        use queue::TaskState::*;
        assert_eq!(state(q, &dead).await, Some(Dead));
        assert_eq!(state(&env.search, &theirs).await, Some(Dead));
        assert_eq!(state(q, &leased).await, Some(Leased));
        assert_eq!(state(q, &waiting).await, Some(Due));
        for id in &forged {
            assert!(q.get(id).await.unwrap().is_none(), "{id}: nothing made");
        }
    };
    as_before().await;

    // 10,001 ids: the bulk limit's 10,000 and one; ours among them.
    let many: Vec<String> = (0..10_000u32)
        .map(|i| format!("{:032x}", u128::from(i) + 1))
        .chain([dead.clone()])
        .collect();
    let mut fields = vec![
        ("chosen", "rows"),
        ("filter[state]", "dead"),
        ("filter[upstream]", ""),
        ("op", "retry"),
    ];
    fields.extend(many.iter().map(|id| ("ids[]", id.as_str())));
    let reply = call::<BulkAct>(r, &fields, Some(&admin), &[]).await;
    assert_eq!(reply.status, 413, "{}", reply.body);
    as_before().await;

    // The same form naming our dead task is acted on: the refusals above were the checks.
    let fields = [
        ("chosen", "rows"),
        ("filter[state]", "dead"),
        ("filter[upstream]", ""),
        ("op", "retry"),
        ("ids[]", dead.as_str()),
    ];
    let reply = call::<BulkAct>(r, &fields, Some(&admin), &[]).await;
    assert_eq!(reply.body, "\"started: retry 1 task\"");
    assert_eq!(run_end(q).await.changed, 1);
    env.redis.stop().await;
}
