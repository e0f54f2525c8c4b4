//! The trace context a task keeps (issue 27): nothing while tracing is off; with it on, the
//! maker's `traceparent` (`tc`), the joiners' as bounded links (`tl`), handed to the worker
//! by the claim. One test, in order: turning tracing on is once per process (this binary).
mod common;

use common::*;
use queue::*;
use std::sync::Mutex;

/// What the installed source answers: the "current span" of this test.
static CURRENT: Mutex<Option<String>> = Mutex::new(None);

fn source() -> Option<String> {
    CURRENT.lock().unwrap().clone()
}

fn tp(n: u64) -> String {
    format!("00-4bf92f3577b34da6a3ce92{n:010x}-00f067aa0ba902b7-01")
}

async fn record(q: &Queue, id: &str) -> Vec<(String, String)> {
    let mut c = raw().await;
    let fields: Vec<(String, String)> = redis::cmd("HGETALL")
        .arg(task_key(q, id))
        .query_async(&mut c)
        .await
        .unwrap();
    fields
}

async fn memory_usage(q: &Queue, id: &str) -> i64 {
    let mut c = raw().await;
    redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(task_key(q, id))
        .query_async(&mut c)
        .await
        .unwrap()
}

fn id_of(e: Enqueued) -> String {
    match e {
        Enqueued::Created(t) | Enqueued::Joined(t) => t.id.to_string(),
        other => panic!("expected a task, got {other:?}"),
    }
}

#[tokio::test]
async fn context_kept_only_while_tracing_and_links_bounded() {
    let q = queue("trace_context").await;
    let policy = EnqueuePolicy::default();

    // Off: no source installed, so nothing is asked and nothing stored, not even on a join.
    assert!(!trace_context::enabled());
    let off = id_of(q.enqueue("traced query 1", "", &policy).await.unwrap());
    id_of(q.enqueue("traced query 1", "", &policy).await.unwrap());
    let fields = record(&q, &off).await;
    assert!(
        fields.iter().all(|(k, _)| k != "tc" && k != "tl"),
        "{fields:?}"
    );
    let off_bytes = memory_usage(&q, &off).await;

    // On: the maker's context is kept, each joiner's becomes a link, at most MAX_LINKS.
    trace_context::install(source);
    *CURRENT.lock().unwrap() = Some(tp(0));
    let on = id_of(q.enqueue("traced query 2", "", &policy).await.unwrap());
    let on_bytes = memory_usage(&q, &on).await;
    for n in 1..=(trace_context::MAX_LINKS as u64 + 3) {
        *CURRENT.lock().unwrap() = Some(tp(n));
        q.enqueue("traced query 2", "", &policy).await.unwrap();
    }
    // A malformed context (upper-case hex) is not stored: the record keeps only the form the
    // script and the worker read.
    *CURRENT.lock().unwrap() = Some(tp(99).to_uppercase());
    q.enqueue("traced query 2", "", &policy).await.unwrap();
    let t = q.get(&on).await.unwrap().unwrap().task.unwrap();
    assert_eq!(t.trace.created.as_deref(), Some(tp(0).as_str()));
    let want: Vec<String> = (1..=trace_context::MAX_LINKS as u64).map(tp).collect();
    assert_eq!(t.trace.joined, want);

    // The claim hands both to the worker; the untraced task's claim carries none.
    let mut claimed = Vec::new();
    for _ in 0..2 {
        claimed.push(claim_one(&q, "w", 30_000).await);
    }
    let traced = claimed.iter().find(|c| c.id == on).unwrap();
    assert_eq!(traced.trace, t.trace);
    let untraced = claimed.iter().find(|c| c.id == off).unwrap();
    assert!(untraced.trace.is_empty());

    // What tracing costs a task record: the figure ARCHITECTURE.md quotes.
    println!("task record: {off_bytes} bytes untraced, {on_bytes} bytes traced (MEMORY USAGE)");
    assert!(
        on_bytes > off_bytes && on_bytes - off_bytes <= 128,
        "{off_bytes} -> {on_bytes}"
    );

    // Issue 39's probe: seven malformed contexts, none stored — not as the maker's, not as a
    // joiner's, with link room to spare (the links above were full, where even a kept one
    // would not show). The record keeps only what the worker parses back.
    let good = tp(7);
    let malformed = [
        good.to_uppercase(),
        good.replacen("00-", "ff-", 1),
        good[..good.len() - 1].to_string(),
        format!("{good}-00"),
        good.replacen("4bf9", "4bg9", 1),
        good.replacen("-00f0", "_00f0", 1),
        format!(" {good}"),
    ];
    for m in &malformed {
        assert!(!trace_context::is_traceparent(m), "{m:?} is not malformed");
    }
    *CURRENT.lock().unwrap() = Some(malformed[0].clone());
    let made = id_of(q.enqueue("traced query 3", "", &policy).await.unwrap());
    for m in &malformed {
        *CURRENT.lock().unwrap() = Some(m.clone());
        q.enqueue("traced query 3", "", &policy).await.unwrap();
    }
    // A well-formed joiner after them is kept: the record was not merely closed to links.
    *CURRENT.lock().unwrap() = Some(good.clone());
    q.enqueue("traced query 3", "", &policy).await.unwrap();
    let fields = record(&q, &made).await;
    assert!(fields.iter().all(|(k, _)| k != "tc"), "{fields:?}");
    let t = q.get(&made).await.unwrap().unwrap().task.unwrap();
    assert_eq!(t.trace.created, None);
    assert_eq!(t.trace.joined, vec![good]);
}
