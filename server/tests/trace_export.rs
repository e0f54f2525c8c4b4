//! OpenTelemetry traces end to end (issue 27), against a real OTLP/HTTP receiver inside the
//! test (axum, decoding the exporter's protobuf): a query asked over HTTP with a
//! `traceparent`, joined by a second caller, polled by a separate `repoll worker` process
//! against the simulator; its process spans name the tenant it was asked for. And tracing
//! off: no context stored, none sent. (A collector that is down or never answers:
//! trace_collector_down.rs.)
//! Last, a `repoll serve`'s own log: its lines carry the ids of the span they are events of.

use std::sync::Arc;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::Span;
use testkit::free_port;
use testkit::http::BlockingHttp;

mod common;
use common::otlp;
use common::process::*;
use otlp::*;

async fn sim_traceparents(sim_port: u16, key: &str) -> Vec<String> {
    let detail: sim::state::KeyDetail = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{sim_port}/_sim/key"))
        .query(&[("q", key)])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    detail.traceparents
}

/// The tenant of the first caller of [`one_query_is_one_trace_from_the_caller_to_the_upstream`].
const TENANT: &str = "acme.eu@team-7";

const JOINER: &str = "00-1bf7651916cd43dd8448eb211c80319c-c7ad6b7169203331-01";

/// A caller who asks once the result is stored: a fresh hit.
const HITTER: &str = "00-2cf7651916cd43dd8448eb211c80319d-d7ad6b7169203332-01";

#[test]
fn one_query_is_one_trace_from_the_caller_to_the_upstream() {
    let rt = runtime();
    let received: Received = Arc::default();
    let endpoint = rt.block_on(receiver(received.clone()));
    let sim_port = rt.block_on(simulator());
    let redis = spawn_redis(free_port(), &[]);
    let url = redis.url();
    let web = free_port();
    let mut reaped = Reaped::default();

    let mut serve = serve_command(&url, web);
    traced(&mut serve, &endpoint);
    reaped.serve(serve, web);

    // Two callers, the second joining the first's task before any worker runs; the first
    // asks for a tenant, whom the task's process spans name.
    let key = "traced polls=3";
    let id = ask_as(web, key, TENANT, CALLER);
    assert_eq!(ask(web, key, JOINER), id, "one task");

    let mut worker = worker_command(&url, sim_port);
    traced(&mut worker, &endpoint);
    let mut worker = testkit::ChildGuard::spawn(worker).expect("repoll worker");
    wait_done(web, &id);
    assert_eq!(ask(web, key, HITTER), id, "the stored result");
    // SIGTERM: a graceful exit, which sends the spans still queued.
    worker.signal(libc::SIGTERM);
    assert!(
        worker.child_mut().wait().unwrap().success(),
        "worker exits 0"
    );
    for child in &mut reaped.0 {
        child.signal(libc::SIGTERM);
        child.child_mut().wait().unwrap();
    }

    let spans = received.lock().unwrap().clone();
    let of_kind = |k: SpanKind| -> Vec<&Span> {
        spans
            .iter()
            .map(|(_, s)| s)
            .filter(|s| s.kind == k as i32)
            .collect()
    };
    let caller_trace = &CALLER[3..35];
    // The server spans: children of each caller's traceparent.
    let servers = of_kind(SpanKind::Server);
    let first = servers
        .iter()
        .find(|s| hex(&s.trace_id) == caller_trace)
        .unwrap_or_else(|| panic!("no server span in the caller's trace: {spans:#?}"));
    assert_eq!(hex(&first.parent_span_id), &CALLER[36..52]);
    assert_eq!(attr(first, "http.request.method").as_deref(), Some("POST"));
    // create <queue>: under the first server span; the joiner's in its own trace.
    let creates = of_kind(SpanKind::Producer);
    let create = creates
        .iter()
        .find(|s| s.parent_span_id == first.span_id)
        .expect("create span under the server span");
    assert_eq!(create.name, "create repoll");
    assert_eq!(attr(create, "messaging.system").as_deref(), Some("repoll"));
    assert_eq!(attr(create, "repoll.outcome").as_deref(), Some("created"));
    let joined = creates
        .iter()
        .find(|s| hex(&s.trace_id) == JOINER[3..35])
        .expect("the joiner's create span");
    assert_eq!(attr(joined, "repoll.outcome").as_deref(), Some("joined"));
    // A fresh hit made no task: its server span, and no create span beside it.
    let hit = servers
        .iter()
        .find(|s| hex(&s.trace_id) == HITTER[3..35])
        .expect("the hitter's server span");
    assert_eq!(hex(&hit.parent_span_id), &HITTER[36..52]);
    assert!(
        !creates.iter().any(|s| hex(&s.trace_id) == HITTER[3..35]),
        "no create span for a fresh hit: {creates:#?}"
    );

    // One process span per call, each linked to the maker's create span and the joiner's.
    let processes = of_kind(SpanKind::Consumer);
    let clients = of_kind(SpanKind::Client);
    let sent = rt.block_on(sim_traceparents(sim_port, key));
    assert_eq!(sent.len(), 3, "three calls: {sent:?}");
    assert_eq!(processes.len(), 3, "{processes:#?}");
    assert_eq!(clients.len(), 3, "{clients:#?}");
    for p in &processes {
        assert_eq!(p.name, "process repoll");
        assert!(p.parent_span_id.is_empty(), "a root span");
        let links: Vec<(String, String)> = p
            .links
            .iter()
            .map(|l| (hex(&l.trace_id), hex(&l.span_id)))
            .collect();
        assert!(
            links.contains(&(hex(&create.trace_id), hex(&create.span_id))),
            "linked to the creation: {links:?}"
        );
        assert!(
            links.contains(&(hex(&joined.trace_id), hex(&joined.span_id))),
            "linked to the joiner: {links:?}"
        );
        assert_eq!(
            attr(p, "messaging.operation.type").as_deref(),
            Some("process")
        );
        assert!(attr(p, "messaging.message.id").is_some());
        assert_eq!(attr(p, "repoll.tenant").as_deref(), Some(TENANT));
        // Its upstream call: a client span inside it, whose context the simulator received.
        let client = clients
            .iter()
            .find(|c| c.parent_span_id == p.span_id)
            .expect("a client span in each process span");
        let header = format!("00-{}-{}-01", hex(&client.trace_id), hex(&client.span_id));
        assert!(sent.contains(&header), "{header} not in {sent:?}");
    }
}

#[test]
fn tracing_off_stores_and_sends_no_context() {
    let rt = runtime();
    let sim_port = rt.block_on(simulator());
    let redis = spawn_redis(free_port(), &[]);
    let url = redis.url();
    let web = free_port();
    let mut reaped = Reaped::default();
    let mut serve = serve_command(&url, web);
    serve
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
    reaped.serve(serve, web);
    let key = "untraced polls=0";
    let id = ask(web, key, CALLER);
    let task = rt.block_on(async {
        let q = queue::Queue::connect(&url, queue::QueueConfig::default())
            .await
            .unwrap();
        q.get(&id).await.unwrap().unwrap().task.expect("live task")
    });
    assert!(task.trace.is_empty(), "{:?}", task.trace);

    let mut worker = worker_command(&url, sim_port);
    worker
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
    reaped
        .0
        .push(testkit::ChildGuard::spawn(worker).expect("repoll worker"));
    wait_done(web, &id);
    let sent = rt.block_on(sim_traceparents(sim_port, key));
    assert!(
        !sent.is_empty() && sent.iter().all(String::is_empty),
        "{sent:?}"
    );
}

/// Issue 39's probe, what held: seven malformed `traceparent`s from callers joining a task
/// are never stored. The W3C parser refuses each, so each joiner's server span starts a trace
/// of its own and what the task keeps as the joiner's link is that trace's context — never
/// the caller's text, nor a context made from its parts (a lax parser taking the upper-case
/// one would link the caller's trace id). The maker's valid context is kept beside them.
#[test]
fn malformed_traceparents_of_callers_are_never_stored() {
    let rt = runtime();
    let received: Received = Arc::default();
    let endpoint = rt.block_on(receiver(received.clone()));
    let redis = spawn_redis(free_port(), &[]);
    let url = redis.url();
    let web = free_port();
    let mut reaped = Reaped::default();
    let mut serve = serve_command(&url, web);
    traced(&mut serve, &endpoint);
    reaped.serve(serve, web);

    // Trace id `n` of the callers' texts: 4bf9…000n, so a context made from one is told.
    let trace = |n: u32| format!("4bf92f3577b34da6a3ce9{n:011x}");
    let span = "00f067aa0ba902b7";
    let malformed = [
        format!("00-{}-{span}-01", trace(1).to_uppercase()),
        format!("ff-{}-{span}-01", trace(2)),
        format!("00-{}-{span}-01-00", trace(3)),
        format!("00-{}-{span}", trace(4)),
        format!("00-{}g-{span}-01", &trace(5)[..31]),
        format!("00-{}-0000000000000000-01", trace(6)),
        format!("00-{}-{span}-01", "0".repeat(32)),
    ];
    let key = "malformed callers polls=9";
    let id = ask(web, key, CALLER);
    for tp in &malformed {
        assert_eq!(ask(web, key, tp), id, "{tp}: joined");
    }
    let task = rt.block_on(async {
        let q = queue::Queue::connect(&url, queue::QueueConfig::default())
            .await
            .unwrap();
        q.get(&id).await.unwrap().unwrap().task.expect("live task")
    });
    let created = task.trace.created.as_deref().expect("the maker's context");
    assert_eq!(&created[3..35], &CALLER[3..35], "the maker's trace");
    // One link per joiner (7, within the 8 kept), each well-formed, each a trace of its own.
    assert_eq!(task.trace.joined.len(), malformed.len(), "{:?}", task.trace);
    let callers: Vec<String> = (1..=6).map(trace).collect();
    for link in &task.trace.joined {
        assert!(queue::trace_context::is_traceparent(link), "{link:?}");
        let linked = &link[3..35];
        assert_ne!(linked, &CALLER[3..35], "{link}");
        assert!(
            !callers.iter().any(|c| c == linked) && linked != "0".repeat(32),
            "{link} was made from a caller's malformed context"
        );
        assert!(!malformed.contains(link), "{link} stored as sent");
    }
}

/// Waits (bounded) until the file at `path` holds a line containing `words`; the whole file.
fn wait_for_line(path: &std::path::Path, words: &str) -> String {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.lines().any(|l| l.contains(words)) {
            return text;
        }
        assert!(
            Instant::now() < until,
            "no line with {words:?} in 30 s:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A traced `repoll serve` with one embedded worker polling the simulator, its log (at
/// `info`, in `format`) written to `log`, on the queue `queue`.
fn serve_logging(
    url: &str,
    web: u16,
    sim_port: u16,
    endpoint: &str,
    format: &str,
    log: &std::path::Path,
    queue: &str,
) -> testkit::ChildGuard {
    let mut serve = serve_command(url, web);
    traced(&mut serve, endpoint);
    serve
        .env("REPOLL_WORKERS", "1")
        .env(
            "REPOLL_UPSTREAM_URL",
            format!("http://127.0.0.1:{sim_port}/api/query?q={{key}}"),
        )
        .env("REPOLL_POLL_INTERVAL_MS", "20")
        .env("REPOLL_BREAKER_FAILURES", "1")
        .env("REPOLL_BREAKER_ERROR_PERCENT", "1")
        .env("RUST_LOG", "info")
        .env("REPOLL_LOG_FORMAT", format)
        .env("REPOLL_QUEUE", queue)
        .env("REPOLL_REAP_INTERVAL_MS", "50")
        .env("REPOLL_CALLBACK_SECRET", CALLBACK_SECRET)
        .env("REPOLL_ADMIN_PASSWORD", "trace logs test")
        // The log goes to standard output (the start's own notices to standard error).
        .stdout(std::fs::File::create(log).unwrap());
    let child = testkit::ChildGuard::spawn(serve).expect("repoll serve");
    assert!(wait_ready(web, Duration::from_secs(30)), "serve not ready");
    child
}

/// The callback key of [`serve_logging`]'s processes (at least 32 characters).
const CALLBACK_SECRET: &str = "trace-logs-callback-secret-0123456789";

/// Posts a "still processing" callback for task `id` of queue `queue`, as its upstream would
/// with the URL a worker gave it, sending `traceparent`; the answer's status.
fn post_processing_callback(
    rt: &tokio::runtime::Runtime,
    url: &str,
    queue: &str,
    web: u16,
    id: &str,
    traceparent: &str,
) -> u16 {
    let task = rt.block_on(async {
        let config = queue::QueueConfig {
            name: queue.into(),
            ..queue::QueueConfig::default()
        };
        let q = queue::Queue::connect(url, config).await.unwrap();
        q.get(id).await.unwrap().unwrap().task.expect("live task")
    });
    let signer = worker::Callbacks::new(&worker::CallbackArgs {
        base_url: None,
        secret: Some(CALLBACK_SECRET.into()),
    })
    .unwrap()
    .unwrap();
    let token = signer.token(id, task.created_ms, task.deadline_ms);
    let http = BlockingHttp::local(web);
    http.send(
        http.client
            .post(http.url(&format!("/api/v1/callbacks/{token}")))
            .header("traceparent", traceparent)
            .json(&serde_json::json!({ "status": "processing" })),
    )
    .status
}

/// Stops `serve` gracefully (its queued spans are sent).
fn stop(mut serve: testkit::ChildGuard) {
    serve.signal(libc::SIGTERM);
    serve.child_mut().wait().unwrap();
}

/// The exported span with these ids, which must be a `process` span holding an event `name`.
fn process_span_with_event<'a>(
    spans: &'a [(String, Span)],
    ids: (&str, &str),
    name: &str,
) -> &'a Span {
    let span = spans
        .iter()
        .map(|(_, s)| s)
        .find(|s| hex(&s.trace_id) == ids.0 && hex(&s.span_id) == ids.1)
        .unwrap_or_else(|| panic!("no exported span {ids:?}: {spans:#?}"));
    assert!(span.name.starts_with("process "), "{}", span.name);
    assert!(
        span.events.iter().any(|e| e.name.starts_with(name)),
        "the log line is an event of its span: {:?}",
        span.events
    );
    span
}

/// Starts (`ms` > 0) or ends (`ms` 0) an outage of the simulator on `sim_port`.
fn set_sim_outage(rt: &tokio::runtime::Runtime, sim_port: u16, ms: u64) {
    rt.block_on(async {
        reqwest::Client::new()
            .post(format!("http://127.0.0.1:{sim_port}/_sim/outage?ms={ms}"))
            .send()
            .await
            .unwrap()
    });
}

/// The JSON half: a traced `repoll serve` logging JSON dead-letters a task the upstream says
/// failed, then an outage opens its breaker; each of the two lines carries the ids of a
/// `process` span that has it as an event (the dead-letter's with the task's id, no tenant).
fn check_json_lines_of_a_dead_letter_and_an_opened_breaker(
    rt: &tokio::runtime::Runtime,
    received: &Received,
    url: &str,
    sim_port: u16,
    endpoint: &str,
    dir: &testkit::TempDir,
) {
    // JSON: a task the upstream says failed is dead-lettered; then an outage's 503 opens the
    // breaker (one error is enough here).
    let web = free_port();
    let log = dir.path().join("serve.json.log");
    let serve = serve_logging(url, web, sim_port, endpoint, "json", &log, "repoll");
    let id = ask(web, "logged status=failed", CALLER);
    wait_for_line(&log, "dead-lettered");
    set_sim_outage(rt, sim_port, 60000);
    ask(web, "logged outage", CALLER);
    wait_for_line(&log, "circuit breaker opened");
    stop(serve);
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let spans = received.lock().unwrap().clone();
    for message in ["dead-lettered", "circuit breaker opened"] {
        let line = lines
            .iter()
            .find(|l| {
                l["fields"]["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with(message))
            })
            .unwrap_or_else(|| panic!("no {message:?} line: {text}"));
        let ids = (
            line["trace_id"].as_str().expect("trace_id"),
            line["span_id"].as_str().expect("span_id"),
        );
        assert_eq!((ids.0.len(), ids.1.len()), (32, 16), "{line}");
        let span = process_span_with_event(&spans, ids, message);
        if message == "dead-lettered" {
            assert_eq!(
                attr(span, "messaging.message.id").as_deref(),
                Some(id.as_str())
            );
            assert_eq!(attr(span, "repoll.tenant").as_deref(), Some(""));
        }
    }
}

/// Enqueues a long task on the queue `logs` and claims it for a worker that is gone (50 ms
/// lease, never renewed); its id.
fn leave_a_leased_task_to_expire(rt: &tokio::runtime::Runtime, url: &str) -> queue::TaskId {
    rt.block_on(async {
        let config = queue::QueueConfig {
            name: "logs".into(),
            ..queue::QueueConfig::default()
        };
        let q = queue::Queue::connect(url, config).await.unwrap();
        q.enqueue("leased and left polls=10000", "", &Default::default())
            .await
            .unwrap();
        q.claim("gone-worker", 1, 50).await.unwrap().remove(0).id
    })
}

/// The `trace_id` and `span_id` of the text log line containing `words`, checked to end it.
fn ids_at_the_end_of_the_line(text: &str, words: &str) -> (String, String) {
    let line = text.lines().find(|l| l.contains(words)).unwrap();
    let field = |name: &str| -> String {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("no {name} in {line}"))
            .to_string()
    };
    let (trace_id, span_id) = (field("trace_id"), field("span_id"));
    assert!(
        line.ends_with(&format!("trace_id={trace_id} span_id={span_id}")),
        "{line}"
    );
    (trace_id, span_id)
}

/// Checks the span with these ids is the reaper's `reap logs` span for task `left`, with the
/// `lease expired` event and a link to the trace of the task's maker.
fn check_the_reap_span_of_the_expired_lease(
    spans: &[(String, Span)],
    (trace_id, span_id): (String, String),
    left: &queue::TaskId,
) {
    let reap = spans
        .iter()
        .map(|(_, s)| s)
        .find(|s| hex(&s.trace_id) == trace_id && hex(&s.span_id) == span_id)
        .unwrap_or_else(|| panic!("no reap span {trace_id}: {spans:#?}"));
    assert_eq!(reap.name, "reap logs");
    assert_eq!(attr(reap, "messaging.message.id"), Some(left.to_string()));
    assert!(
        reap.events
            .iter()
            .any(|e| e.name.starts_with("lease expired")),
        "{:?}",
        reap.events
    );
    let linked: Vec<String> = reap.links.iter().map(|l| hex(&l.trace_id)).collect();
    assert_eq!(linked, [CALLER[3..35].to_string()], "linked to its maker");
}

/// Checks the span `span_id` is a server span whose `callback received` event names task
/// `left` and the outcome `processing`.
fn check_the_callback_server_span(spans: &[(String, Span)], span_id: &str, left: &queue::TaskId) {
    let server = spans
        .iter()
        .map(|(_, s)| s)
        .find(|s| hex(&s.span_id) == span_id)
        .unwrap_or_else(|| panic!("no callback span {span_id}: {spans:#?}"));
    assert_eq!(server.kind, SpanKind::Server as i32);
    let event = server
        .events
        .iter()
        .find(|e| e.name == "callback received")
        .unwrap_or_else(|| panic!("{:?}", server.events));
    let said: Vec<String> = event
        .attributes
        .iter()
        .map(|kv| format!("{}={:?}", kv.key, kv.value))
        .collect();
    assert!(
        said.iter()
            .any(|a| a.starts_with("id=") && a.contains(left.as_str())),
        "{said:?}"
    );
    assert!(
        said.iter()
            .any(|a| a.starts_with("outcome=") && a.contains("processing")),
        "{said:?}"
    );
}

/// Issue 27: a log line written inside a traced span carries that span's `trace_id` and
/// `span_id` — in text lines and in `REPOLL_LOG_FORMAT=json` objects — and is an event of the
/// exported span with those ids: where a task was dead-lettered, where an upstream error
/// opened the breaker (`repoll.tenant` on the span too), a lease the reaper took back (a
/// `reap <queue>` span linked to the task's maker), a callback received (its server span).
#[test]
fn log_lines_carry_the_ids_of_their_span_as_text_and_json() {
    let rt = runtime();
    let received: Received = Arc::default();
    let endpoint = rt.block_on(receiver(received.clone()));
    let sim_port = rt.block_on(simulator());
    let redis = spawn_redis(free_port(), &[]);
    let url = redis.url();
    let dir = testkit::TempDir::new("trace-logs");

    check_json_lines_of_a_dead_letter_and_an_opened_breaker(
        &rt, &received, &url, sim_port, &endpoint, &dir,
    );

    // Text: the ids at the end of the line. First a lease left to expire by a worker that is
    // gone (this test, tracing as the caller): the reaper's `reap <queue>` span tells it.
    received.lock().unwrap().clear();
    let web = free_port();
    let log = dir.path().join("serve.text.log");
    set_sim_outage(&rt, sim_port, 0);
    // Its own queue: the first one's breaker stays open for its cool-down.
    queue::trace_context::install(|| Some(CALLER.to_string()));
    let left = leave_a_leased_task_to_expire(&rt, &url);
    let serve = serve_logging(&url, web, sim_port, &endpoint, "text", &log, "logs");
    ask(web, "logged as text status=failed", CALLER);
    wait_for_line(&log, "lease expired");
    // The upstream calls back (not final yet): an event of the callback's server span.
    assert_eq!(
        post_processing_callback(&rt, &url, "logs", web, &left, JOINER),
        202
    );
    wait_for_line(&log, "callback received");
    let text = wait_for_line(&log, "dead-lettered");
    stop(serve);
    let whole = std::fs::read_to_string(&log).unwrap();
    assert!(
        !whole.contains('\u{1b}'),
        "a log written to a file holds no terminal colour codes: {}",
        whole.lines().next().unwrap_or_default()
    );
    let spans = received.lock().unwrap().clone();
    let (trace_id, span_id) = ids_at_the_end_of_the_line(&text, "dead-lettered");
    process_span_with_event(&spans, (&trace_id, &span_id), "dead-lettered");
    let lease_expired = ids_at_the_end_of_the_line(&text, "lease expired");
    check_the_reap_span_of_the_expired_lease(&spans, lease_expired, &left);
    let (trace_id, span_id) = ids_at_the_end_of_the_line(&text, "callback received");
    assert_eq!(trace_id, JOINER[3..35], "the caller's trace");
    check_the_callback_server_span(&spans, &span_id, &left);
}
