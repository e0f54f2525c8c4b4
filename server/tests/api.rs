//! The public API through the real router against a private redis-server and the simulator:
//! input errors, submit and answer, joiners, tenants. The live stream: api_events.rs.

use crate::common;
use common::api::*;

use std::time::Duration;

use app::context::AppContext;
use axum::{body::Body, http::Request};
use serde_json::{json, Value};
use server::api::ApiArgs;

/// Polls `GET /api/v1/queries/{id}` until it is final (a 60 s hang guard, not a timing).
async fn wait_final(env: &Env, id: &str) -> Value {
    let guard = Duration::from_secs(60);
    let end = std::time::Instant::now() + guard;
    while std::time::Instant::now() < end {
        let r = env.get(&format!("/api/v1/queries/{id}")).await;
        assert_eq!(r.status, 200, "{}", r.body);
        if r.json["status"] != "processing" {
            return r.json;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("query {id} did not finish within {guard:?}");
}

#[tokio::test]
async fn bad_input_is_4xx_with_the_error_shape() {
    let env = Env::start(Opts::default()).await;

    for (body, status, code) in [
        (r#"{"query": ""}"#, 422, "invalid_query"),
        (r#"{"query": "   \t "}"#, 422, "invalid_query"),
        (r#"{"query": "a\u0007b"}"#, 422, "invalid_query"),
        (r#"{"nope": 1}"#, 422, "invalid_body"),
        (r#"{"query": 5}"#, 422, "invalid_body"),
        (r#"{"query": "#, 400, "malformed_json"),
        ("not json at all", 400, "malformed_json"),
    ] {
        let r = env.send(post_json(body)).await;
        assert_eq!(r.status, status, "{body}: {}", r.body);
        assert_eq!(r.error_code(), code, "{body}");
    }

    let long = "x".repeat(513);
    let r = env.submit(&long).await;
    assert_eq!((r.status, r.error_code()), (422, "invalid_query"));
    // 512 characters after trimming are fine.
    let ok = format!("  {}  ", "y".repeat(512));
    assert_eq!(env.submit(&ok).await.status, 202);

    // Wrong or missing content type.
    let r = env
        .send(
            Request::post("/api/v1/queries")
                .header("content-type", "text/plain")
                .body(Body::from(r#"{"query":"a"}"#))
                .unwrap(),
        )
        .await;
    assert_eq!((r.status, r.error_code()), (415, "unsupported_media_type"));
    let r = env
        .send(
            Request::post("/api/v1/queries")
                .body(Body::from(r#"{"query":"a"}"#))
                .unwrap(),
        )
        .await;
    assert_eq!((r.status, r.error_code()), (415, "unsupported_media_type"));

    // Oversized: beyond the API's own limit, a JSON 413 ...
    let big = format!(r#"{{"query": "{}"}}"#, "z".repeat(8 * 1024));
    let r = env.send(post_json(&big)).await;
    assert_eq!((r.status, r.error_code()), (413, "payload_too_large"));
    // ... and beyond the global limit (a layer, before any handler), the same JSON 413.
    let huge = format!(r#"{{"query": "{}"}}"#, "z".repeat(100 * 1024));
    let r = env.send(post_json(&huge)).await;
    assert_eq!((r.status, r.error_code()), (413, "payload_too_large"));

    // The query page's form (a server function) answers the same mistake with a 4xx and
    // the reason, never a 500.
    {
        use leptos::server_fn::ServerFn;
        let r = env
            .send(
                Request::post(app::pages::SubmitQuery::PATH)
                    .header("content-type", "application/x-www-form-urlencoded")
                    .body(Body::from(format!("query={}", "x".repeat(600))))
                    .unwrap(),
            )
            .await;
        assert_eq!(r.status, 422, "{}", r.body);
        assert!(r.body.contains("at most 512"), "{}", r.body);
    }

    // Invisible and bidirectional-control characters are refused like control characters.
    for q in ["pay\u{200B}ment", "invoice\u{202E}fdp.exe", "\u{FEFF}x"] {
        let r = env.submit(q).await;
        assert_eq!((r.status, r.error_code()), (422, "invalid_query"), "{q:?}");
    }

    // Unknown ids and malformed ids are 404 in the error shape, on both read endpoints.
    for uri in [
        "/api/v1/queries/0123456789abcdef0123456789abcdef",
        "/api/v1/queries/NOT-AN-ID",
        "/api/v1/queries/0123456789ABCDEF0123456789ABCDEF",
        "/api/v1/queries/0123456789abcdef0123456789abcdef/events",
        "/api/v1/queries/..%2F..%2Fetc/events",
        "/api/v1/nothing/here",
    ] {
        let r = env.get(uri).await;
        assert_eq!((r.status, r.error_code()), (404, "not_found"), "{uri}");
    }
    env.stop().await;
}

#[tokio::test]
async fn submit_is_202_then_done_with_partial_first_and_one_chain_of_polls() {
    // A first-answer budget of a minute: the submit waits for the first poll however slow the
    // machine, and answers as soon as it is in (the default 300 ms would make this a race).
    let env = Env::start(Opts {
        worker: true,
        api: ApiArgs {
            rate_per_min: 0,
            first_answer_ms: 60_000,
            ..ApiArgs::default()
        },
        ..Default::default()
    })
    .await;
    let key = "order-7 polls=4";
    let r = env.submit(key).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let v = &r.json;
    let id = v["id"].as_str().unwrap().to_string();
    assert_eq!(id.len(), 32);
    assert_eq!(v["status"], "processing");
    assert_eq!(v["query"], key);
    assert!(v["result"].is_null());
    assert!(v["created_at"].as_i64().unwrap() > 0);
    // The submit waited for the first poll: partial data is in the first answer, structured
    // (the upstream sent JSON). (How many polls are in by then depends on how soon the submit
    // read after the first: the worker polls again 100 ms later.)
    assert!(v["partial"].is_object(), "partial in first answer: {v}");
    assert!(
        matches!(v["polls"].as_u64(), Some(1..=3)),
        "not done yet: {v}"
    );
    assert_eq!(
        r.headers["location"].to_str().unwrap(),
        format!("/api/v1/queries/{id}")
    );

    let done = wait_final(&env, &id).await;
    assert_eq!(done["status"], "done", "{done}");
    assert!(done["result"].is_object(), "{done}");
    assert!(done["partial"].is_null());
    assert!(done["error"].is_null());

    // A fresh stored result answers 200 at once, without a new task.
    let again = env.submit("  order-7   polls=4 ").await;
    assert_eq!(again.status, 200);
    assert_eq!(again.json["status"], "done");
    assert_eq!(again.json["id"], id.as_str());
    assert_eq!(again.json["result"], done["result"]);

    // One chain of upstream polls: 3 processing answers + 1 done.
    let sim = env.sim_key(key).await;
    assert_eq!(sim["calls"], 4, "{sim}");
    assert_eq!(sim["done"], 1, "{sim}");
    env.stop().await;
}

#[tokio::test]
async fn failed_upstream_is_failed_with_a_plain_reason() {
    let env = Env::start(Opts {
        worker: true,
        ..Default::default()
    })
    .await;
    let r = env
        .submit("broken-1 status=failed error=no_such_order")
        .await;
    assert!(matches!(r.status, 200 | 202), "{}", r.body);
    let id = r.json["id"].as_str().unwrap().to_string();
    let v = wait_final(&env, &id).await;
    assert_eq!(v["status"], "failed", "{v}");
    let error = v["error"].as_str().unwrap();
    assert_eq!(
        error,
        "The upstream API refused this query; it said: no_such_order"
    );
    env.stop().await;
}

/// The public sees public errors: a permanent HTTP error shows its status, never the call
/// (scheme, host, port, path) nor the upstream's body, which the record keeps for the
/// dashboard; a hostile 3.9 MB "failed" message makes a short answer, not a 3.9 MB one.
#[tokio::test]
async fn a_failed_query_shows_no_internal_call_and_no_upstream_body() {
    let env = Env::start(Opts {
        worker: true,
        ..Default::default()
    })
    .await;
    let host = env.sim_url.trim_start_matches("http://").to_string();

    // The simulator answers 400 {"error": "items: 4294967295 is out of range 0..=1000"}.
    let r = env.submit("refused-1 items=4294967295").await;
    let id = r.json["id"].as_str().unwrap().to_string();
    let v = wait_final(&env, &id).await;
    assert_eq!(v["status"], "failed", "{v}");
    let error = v["error"].as_str().unwrap();
    assert_eq!(error, "The upstream API refused this query (HTTP 400).");
    for internal in ["http://", host.as_str(), "/api/query", "out of range"] {
        assert!(!v.to_string().contains(internal), "{internal}: {v}");
    }
    let id = queue::TaskId::parse(&id).unwrap();
    let t = env.queue.get(&id).await.unwrap().unwrap().task.unwrap();
    let stored = t.last_error.unwrap();
    assert!(
        stored.contains(&host) && stored.contains("HTTP 400: items: 4294967295 is out of range"),
        "the dashboard keeps the detail: {stored}"
    );

    let r = env
        .submit("hostile-1 status=failed error=boom pad=3900000")
        .await;
    let id = r.json["id"].as_str().unwrap().to_string();
    let v = wait_final(&env, &id).await;
    let error = v["error"].as_str().unwrap();
    assert!(
        error.starts_with("The upstream API refused this query; it said: boomxxx")
            && error.ends_with('…'),
        "{} bytes: {}",
        error.len(),
        error.chars().take(200).collect::<String>()
    );
    let r = env.get(&format!("/api/v1/queries/{id}")).await;
    assert!(r.body.len() < 1024, "{} bytes", r.body.len());
    env.stop().await;
}

#[tokio::test]
async fn concurrent_submits_of_the_same_query_share_one_task() {
    // No worker: the task stays put, so both answers are "processing".
    let env = Env::start(Opts {
        api: crate::common::api_unlimited(),
        ..Default::default()
    })
    .await;
    let (a, b) = tokio::join!(env.submit("shared-1"), env.submit("  shared-1  "));
    assert_eq!((a.status, b.status), (202, 202));
    assert_eq!(a.json["id"], b.json["id"]);
    let stats = env.queue.stats().await.unwrap();
    assert_eq!(stats.ready, 1, "{stats:?}");

    // The shared code says which request created the task and which joined it.
    let ctx = AppContext {
        queue: env.queue.clone(),
        named: Default::default(),
        enqueue_policy: Default::default(),
        admin: Default::default(),
        first_answer: Duration::ZERO,
        trace_url: None,
    };
    let (x, y) = tokio::join!(
        app::query_view::submit(&ctx, "shared-2"),
        app::query_view::submit(&ctx, "shared-2")
    );
    let (x, y) = (x.unwrap(), y.unwrap());
    assert_eq!(x.0.id, y.0.id);
    let mut created = [x.1, y.1];
    created.sort();
    assert_eq!(created, [false, true], "one Created, one Joined");

    let got = env
        .get(&format!(
            "/api/v1/queries/{}",
            a.json["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(got.status, 200);
    assert_eq!(got.json["status"], "processing");
    assert!(got.json["next_poll_at"].as_i64().is_some());
    env.stop().await;
}

#[tokio::test]
async fn one_text_typed_two_ways_is_one_query() {
    let env = Env::start(Opts {
        api: crate::common::api_unlimited(),
        ..Default::default()
    })
    .await;
    let composed = env.submit("caf\u{e9} report").await;
    let decomposed = env.submit("cafe\u{301} report").await;
    assert_eq!(composed.status, 202, "{}", composed.body);
    assert_eq!(composed.json["id"], decomposed.json["id"]);
    assert_eq!(decomposed.json["query"], "caf\u{e9} report");
    env.stop().await;
}

/// Issue 28 row 9: a query holding characters that show nothing (tag characters after
/// "report") is refused with the code point named; the joiners of real text (an emoji family,
/// a Persian word) are accepted and stored as typed.
#[tokio::test]
async fn invisible_characters_are_refused_and_real_joiners_kept() {
    let env = Env::start(Opts {
        api: crate::common::api_unlimited(),
        ..Default::default()
    })
    .await;
    for (q, cp) in [
        ("report\u{E0041}", "U+E0041"),
        ("report\u{E0041}\u{E0042}", "U+E0041"),
        ("re\u{200D}port", "U+200D"),
        ("\u{200D}\u{1F469}", "U+200D"),
    ] {
        let r = env.submit(q).await;
        assert_eq!((r.status, r.error_code()), (422, "invalid_query"), "{q:?}");
        let message = r.json["error"]["message"].as_str().unwrap();
        assert!(message.contains(cp), "{q:?}: {message}");
    }
    for q in [
        "\u{1F469}\u{200D}\u{1F469}\u{200D}\u{1F467}",
        "\u{1F3F3}\u{FE0F}\u{200D}\u{1F308}",
        "\u{645}\u{6CC}\u{200C}\u{62E}\u{648}\u{627}\u{647}\u{645}",
    ] {
        let r = env.submit(q).await;
        assert_eq!(r.status, 202, "{q:?}: {}", r.body);
        assert_eq!(r.json["query"], q);
    }
    env.stop().await;
}

fn post_json_with(body: &str, header: (&str, &str)) -> Request<Body> {
    let mut req = post_json(body);
    req.headers_mut().insert(
        axum::http::HeaderName::from_bytes(header.0.as_bytes()).unwrap(),
        axum::http::HeaderValue::from_str(header.1).unwrap(),
    );
    req
}

async fn tenant_of(env: &Env, id: &str) -> String {
    env.queue
        .get(id)
        .await
        .unwrap()
        .unwrap()
        .task
        .unwrap()
        .tenant
}

#[tokio::test]
async fn a_submit_names_its_tenant_by_body_or_by_the_operators_header() {
    // Without a tenant header: the body's `tenant`, checked.
    let env = Env::start(Opts::default()).await;
    let r = env
        .send(post_json(
            &json!({"query": "t one", "tenant": "acme"}).to_string(),
        ))
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(
        tenant_of(&env, r.json["id"].as_str().unwrap()).await,
        "acme"
    );
    let r = env.submit("t two").await;
    assert_eq!(tenant_of(&env, r.json["id"].as_str().unwrap()).await, "");
    for bad in ["a|b", "with space", &"x".repeat(65)] {
        let r = env
            .send(post_json(
                &json!({"query": "t bad", "tenant": bad}).to_string(),
            ))
            .await;
        assert_eq!(r.status, 422, "{bad:?}: {}", r.body);
        assert_eq!(r.json["error"]["code"], "invalid_tenant", "{}", r.body);
    }
    assert!(
        !exists(&env, "t bad").await,
        "a refused tenant wrote nothing"
    );
    // A header given while none is configured means nothing.
    let r = env
        .send(post_json_with(
            &json!({"query": "t three"}).to_string(),
            ("x-api-key-id", "other"),
        ))
        .await;
    assert_eq!(tenant_of(&env, r.json["id"].as_str().unwrap()).await, "");
    env.stop.cancel();

    // With the operator's header: it alone names the tenant; the body's is ignored.
    let env = Env::start(Opts {
        api: ApiArgs {
            rate_per_min: 0,
            tenant_header: Some(axum::http::HeaderName::from_static("x-api-key-id")),
            ..ApiArgs::default()
        },
        ..Opts::default()
    })
    .await;
    let r = env
        .send(post_json_with(
            &json!({"query": "h one", "tenant": "spoof"}).to_string(),
            ("x-api-key-id", "key-17"),
        ))
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(
        tenant_of(&env, r.json["id"].as_str().unwrap()).await,
        "key-17"
    );
    let r = env
        .send(post_json(
            &json!({"query": "h two", "tenant": "spoof"}).to_string(),
        ))
        .await;
    assert_eq!(tenant_of(&env, r.json["id"].as_str().unwrap()).await, "");
    let r = env
        .send(post_json_with(
            &json!({"query": "h three"}).to_string(),
            ("x-api-key-id", "not|valid"),
        ))
        .await;
    assert_eq!(r.status, 422, "{}", r.body);
    assert_eq!(r.json["error"]["code"], "invalid_tenant");
    env.stop.cancel();
}
