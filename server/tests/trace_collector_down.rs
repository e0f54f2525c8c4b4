//! A collector that is down or never answers slows nothing (issue 27's promise; issue 39 asked
//! for it measured, not only bounded by a hang guard): answer times with tracing on against
//! such a collector are compared, as a ratio of medians, with those of tracing off and of a
//! working collector, every process on the same machine at the same time; and the spans that
//! do not fit the export queue are counted.

use std::sync::Arc;
use std::time::{Duration, Instant};

use testkit::free_port;
use testkit::http::BlockingHttp;

use crate::common;
use common::otlp;
use common::process::*;
use otlp::*;

#[test]
fn a_collector_that_never_answers_slows_nothing_and_drops_are_counted() {
    let rt = runtime();
    let sim_port = rt.block_on(simulator());
    // A "collector" that accepts connections and never answers: every export waits for its
    // timeout while the spans behind it find the queue (one span here) full.
    let stalled = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", stalled.local_addr().unwrap());
    let held = std::thread::spawn(move || {
        let _open: Vec<_> = stalled.incoming().take(16).collect();
    });
    let redis = spawn_redis(free_port(), &[]);
    let url = redis.url();
    let web = free_port();
    let metrics = free_port();
    let mut reaped = Reaped::default();
    let mut serve = serve_command(&url, web);
    traced(&mut serve, &endpoint);
    serve.env("OTEL_BSP_MAX_QUEUE_SIZE", "1");
    reaped
        .0
        .push(testkit::ChildGuard::spawn(serve).expect("repoll serve"));
    assert!(wait_ready(web, Duration::from_secs(30)), "serve not ready");
    let mut worker = worker_command(&url, sim_port);
    traced(&mut worker, &endpoint);
    worker
        .env("OTEL_BSP_MAX_QUEUE_SIZE", "1")
        .env("REPOLL_METRICS_ADDR", format!("127.0.0.1:{metrics}"));
    reaped
        .0
        .push(testkit::ChildGuard::spawn(worker).expect("repoll worker"));

    // Requests are answered and tasks finished as without tracing (bounded waits only).
    for n in 0..3 {
        let id = ask(web, &format!("stalled collector {n} polls=2"), CALLER);
        wait_done(web, &id);
    }
    let dropped = BlockingHttp::local(metrics)
        .get("/metrics")
        .body
        .lines()
        .find_map(|l| l.strip_prefix("repoll_trace_spans_dropped_total "))
        .and_then(|v| v.trim().parse::<f64>().ok());
    assert!(
        dropped.is_some_and(|d| d >= 1.0),
        "the worker counts the spans it dropped: {dropped:?}"
    );
    drop(reaped);
    drop(held);
}

/// Rounds of the measure: each round asks every server once, in a turning order.
const ROUNDS: usize = 200;

/// The most a traced server's median answer may take: this many times the baseline's median,
/// plus [`SLACK`]. Generous (a busy 2-core machine; tracing does some work per request):
/// what it guards against is a request waiting on the collector — an export timeout is 10 s.
const RATIO_MAX: f64 = 3.0;
const SLACK: Duration = Duration::from_millis(5);

/// The median of `xs` (sorted here).
fn median(xs: &mut [Duration]) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

/// One timed `POST /api/v1/queries` of a new query with a `traceparent` (answered at once:
/// no first-answer wait); the time to the answer's end. A request that fails (the client's
/// 30 s timeout) counts with the time it took: a server waiting on its collector is what
/// this measures.
fn timed_ask(http: &BlockingHttp, query: &str) -> Duration {
    let t0 = Instant::now();
    let answer = http.try_send(
        http.client
            .post(http.url("/api/v1/queries"))
            .header("traceparent", CALLER)
            .json(&serde_json::json!({ "query": query })),
    );
    let took = t0.elapsed();
    if let Ok(answer) = answer {
        assert_eq!(answer.status, 202, "{answer:?}");
    }
    took
}

/// Four `repoll serve` on one Redis — tracing off; exporting to a working collector; to one
/// that accepts connections and never answers; to a port nothing listens on — each asked 200
/// new queries in interleaved rounds (so a busy spell of the machine falls on all alike). The
/// median answer time of each traced server against a down or stalled collector stays within
/// 3 × the median of tracing off and of the working collector, plus 5 ms. The export queue is
/// small (16 spans), so it is full for most of the run: dropping is measured too.
#[test]
fn answer_times_with_a_down_or_stalled_collector_are_those_of_a_working_one() {
    let rt = runtime();
    let received: Received = Arc::default();
    let working = rt.block_on(receiver(received.clone()));
    // Stalled: connections are taken (into the kernel's backlog) and never read.
    let stalled = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let stalled_at = format!("http://{}", stalled.local_addr().unwrap());
    // Down: the port of a listener closed at once (connections are refused).
    let down_at = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let redis = spawn_redis(free_port(), &[]);
    let kinds: [(&str, Option<&str>); 4] = [
        ("off", None),
        ("working", Some(&working)),
        ("stalled", Some(&stalled_at)),
        ("down", Some(&down_at)),
    ];
    let mut reaped = Reaped::default();
    let mut servers = Vec::new();
    for (name, endpoint) in kinds {
        let web = free_port();
        let mut serve = serve_command(&redis.url(), web);
        serve
            .env("REPOLL_FIRST_ANSWER_MS", "0")
            .env("REPOLL_RATE_PER_MIN", "0")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
        if let Some(endpoint) = endpoint {
            traced(&mut serve, endpoint);
            serve.env("OTEL_BSP_MAX_QUEUE_SIZE", "16");
        }
        reaped
            .0
            .push(testkit::ChildGuard::spawn(serve).expect("repoll serve"));
        servers.push((name, web));
    }
    // Hang guard on the whole measure: a server that waits on its collector would take 10 s
    // (the export timeout) for some answers.
    let t0 = Instant::now();
    let over = || t0.elapsed() > Duration::from_secs(120);
    let mut clients = Vec::new();
    for (name, web) in &servers {
        assert!(
            wait_ready(*web, Duration::from_secs(30)),
            "{name}: serve not ready"
        );
        let http = BlockingHttp::local(*web);
        // Warm: connections open, first pages and scripts loaded, the export queue filled.
        for i in 0..20 {
            if !over() {
                timed_ask(&http, &format!("warm {name} {i}"));
            }
        }
        clients.push((*name, http));
    }
    let mut times: Vec<Vec<Duration>> = vec![Vec::with_capacity(ROUNDS); clients.len()];
    for round in 0..ROUNDS {
        if over() && round > 0 {
            break;
        }
        for k in 0..clients.len() {
            let i = (round + k) % clients.len();
            let (name, http) = &clients[i];
            times[i].push(timed_ask(http, &format!("measured {name} {round}")));
        }
    }
    let medians: Vec<Duration> = times.iter_mut().map(|t| median(t)).collect();
    let figures: Vec<String> = clients
        .iter()
        .zip(&medians)
        .zip(&times)
        .map(|(((name, _), m), t)| format!("{name} {m:?} (max {:?})", t.last().unwrap()))
        .collect();
    println!(
        "median answer over {} rounds: {}",
        times[0].len(),
        figures.join(", ")
    );
    assert!(
        !received.lock().unwrap().is_empty(),
        "the working collector got spans"
    );
    let (off, working) = (medians[0], medians[1]);
    for (i, name) in [(2, "stalled"), (3, "down")] {
        for (base_name, base) in [("off", off), ("working", working)] {
            let bound = base.mul_f64(RATIO_MAX) + SLACK;
            assert!(
                medians[i] <= bound,
                "{name}: median {:?} over {RATIO_MAX} × tracing {base_name}'s {base:?} + \
                 {SLACK:?} ({} rounds; {})",
                medians[i],
                times[i].len(),
                figures.join(", ")
            );
        }
    }
    drop(reaped);
    drop(stalled);
}
