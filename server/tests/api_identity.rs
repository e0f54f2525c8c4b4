//! Headers that name a caller have one value: a repeated tenant header is refused (behind a
//! gateway that appends instead of replacing, the client's copy came first and won), and the
//! forwarded address is the last entry of the last `X-Forwarded-For` line, however the client
//! shapes the lines before it. Through the real router against a private redis-server.

use crate::common;
use common::api::*;

use std::net::SocketAddr;

use axum::{
    extract::ConnectInfo,
    http::{HeaderName, HeaderValue, Request},
};
use serde_json::json;
use server::api::ApiArgs;

/// A submit of `query` carrying `headers` (each appended, so a name may repeat).
fn submit_with(query: &str, headers: &[(&'static str, &[u8])]) -> Request<axum::body::Body> {
    let mut req = post_json(&json!({ "query": query }).to_string());
    for (name, value) in headers {
        req.headers_mut().append(
            HeaderName::from_static(name),
            HeaderValue::from_bytes(value).unwrap(),
        );
    }
    req
}

#[tokio::test]
async fn a_repeated_tenant_header_is_refused_and_writes_nothing() {
    let env = Env::start(Opts {
        api: ApiArgs {
            rate_per_min: 0,
            tenant_header: Some(HeaderName::from_static("x-tenant")),
            ..ApiArgs::default()
        },
        ..Opts::default()
    })
    .await;
    // The client's own copy, then the gateway's appended one: neither is taken.
    let r = env
        .send(submit_with(
            "twice named",
            &[("x-tenant", b"victim"), ("x-tenant", b"realgw")],
        ))
        .await;
    assert_eq!(
        (r.status, r.error_code()),
        (422, "invalid_tenant"),
        "{}",
        r.body
    );
    assert!(r.body.contains("x-tenant"), "names the header: {}", r.body);
    assert!(
        !exists(&env, "twice named").await,
        "a refused submit wrote nothing"
    );
    // Even the same value twice: one header, one value.
    let r = env
        .send(submit_with(
            "twice the same",
            &[("x-tenant", b"acme"), ("x-tenant", b"acme")],
        ))
        .await;
    assert_eq!(
        (r.status, r.error_code()),
        (422, "invalid_tenant"),
        "{}",
        r.body
    );
    // Joined by a comma into one line it was refused already (no valid tenant).
    let r = env
        .send(submit_with(
            "comma joined",
            &[("x-tenant", b"victim, realgw")],
        ))
        .await;
    assert_eq!(
        (r.status, r.error_code()),
        (422, "invalid_tenant"),
        "{}",
        r.body
    );
    assert!(!exists(&env, "comma joined").await);
    // Once: that tenant.
    let r = env
        .send(submit_with("named once", &[("x-tenant", b"realgw")]))
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let id = r.json["id"].as_str().unwrap();
    let task = env.queue.get(id).await.unwrap().unwrap().task.unwrap();
    assert_eq!(task.tenant, "realgw");
    env.stop().await;
}

/// The per-client submit limit keys on the forwarded address (REPOLL_TRUST_FORWARDED): the
/// proxy's entry, last on the last line. A client that sends its own line first and makes
/// the line the proxy appended to unreadable as text used to get its own (first-line) entry
/// taken, and so a fresh limit per request.
#[tokio::test]
async fn the_forwarded_address_is_the_last_entry_of_the_last_line() {
    let env = Env::start(Opts {
        api: ApiArgs {
            rate_per_min: 1,
            rate_burst: 1,
            first_answer_ms: 0,
            ..ApiArgs::default()
        },
        trust_forwarded: true,
        ..Opts::default()
    })
    .await;
    let from_proxy = |query: &str, client_line: &'static [u8]| {
        let mut req = submit_with(
            query,
            &[
                ("x-forwarded-for", client_line),
                // The line the proxy appended its address to; the client wrote its start.
                ("x-forwarded-for", b"\xff\xfe, 203.0.113.7"),
            ],
        );
        req.extensions_mut()
            .insert(ConnectInfo(SocketAddr::from(([10, 0, 0, 9], 40000))));
        req
    };
    let r = env.send(from_proxy("xff one", b"6.6.6.6")).await;
    assert_eq!(r.status, 202, "{}", r.body);
    // Another first line, the same proxy entry: the same client, out of its one submit.
    let r = env.send(from_proxy("xff two", b"7.7.7.7")).await;
    assert_eq!(
        (r.status, r.error_code()),
        (429, "rate_limited"),
        "{}",
        r.body
    );
    env.stop().await;
}
