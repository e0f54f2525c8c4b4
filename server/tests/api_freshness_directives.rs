//! Issue 26's request directives and answer headers over HTTP: `max-age`, `max-stale[=N]`,
//! `no-cache` and `only-if-cached`, each by the `Cache-Control` header AND by the body's
//! `cache_control` field, and by both at once (one list, the body's last); malformed ones
//! refused (400 `invalid_cache_control`); refusals of the store limited per client (429); and `Age`, `Cache-Control` and `Cache-Status` on every
//! kind of answer (created, joined, fresh, stale, negative, and the GET of each). No worker
//! runs unless a test starts one: a refresh waits where the test can see it. Windows are a
//! minute; results are made older in Redis (`common/fresh.rs`).

use crate::common;
use common::fresh;

use std::net::SocketAddr;

use axum::{
    extract::ConnectInfo,
    http::{HeaderValue, Request},
};
use fresh::*;
use queue::{Retry, TaskState};
use serde_json::{json, Value};

const OLD: &str = r#"{"v":"old"}"#;

/// A stored result's age past the fresh window: one second.
const STALE_BY: i64 = LONG as i64 + 1_000;

/// The two ways to send a directive.
#[derive(Clone, Copy, Debug)]
enum Via {
    Header,
    Field,
}

const VIAS: [Via; 2] = [Via::Header, Via::Field];

/// `POST` of `query` with the directives `cc` sent `via`.
async fn ask(env: &Env, query: &str, cc: &str, via: Via) -> common::Reply {
    match via {
        Via::Header => env.ask(query, Some(cc), json!({})).await,
        Via::Field => env.ask(query, None, json!({ "cache_control": cc })).await,
    }
}

/// `POST` of `query` with each of `lines` as a `Cache-Control` header line of its own (raw
/// bytes: a value need not be text) and `field` as the body's `cache_control`, from client
/// address `ip` when given (the limits are per client; without one, all share one bucket).
async fn ask_raw(
    env: &Env,
    query: &str,
    lines: &[&[u8]],
    field: Option<&str>,
    ip: Option<[u8; 4]>,
) -> common::Reply {
    let extra = match field {
        Some(f) => json!({ "cache_control": f }),
        None => json!({}),
    };
    let mut req: Request<_> = ask_request(query, None, extra);
    for line in lines {
        req.headers_mut()
            .append("cache-control", HeaderValue::from_bytes(line).unwrap());
    }
    if let Some(ip) = ip {
        req.extensions_mut()
            .insert(ConnectInfo(SocketAddr::from((ip, 40000))));
    }
    env.send(req).await
}

/// The task beside `query`'s result (its refresh), if any.
async fn task_of(env: &Env, query: &str) -> Option<queue::Task> {
    let q = &env.queue;
    q.get(&id_of(q, query)).await.unwrap().and_then(|d| d.task)
}

/// The answer is a task's progress (a refresh, or a first ask): no data yet, not to be kept.
#[track_caller]
fn assert_progress(r: &common::Reply, cache_status: &str) {
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(r.json["status"], "processing", "{}", r.body);
    assert_eq!(
        (&r.json["result"], &r.json["freshness"]),
        (&Value::Null, &Value::Null)
    );
    assert_eq!(r.header("cache-control"), "no-store", "{r:?}");
    assert_eq!(r.header("age"), "", "{r:?}");
    assert_eq!(r.cache_status(), cache_status, "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_age_refuses_an_older_result_and_answers_its_refresh() {
    let env = Env::start(Opts::default()).await;
    for via in VIAS {
        let key = format!("max age {via:?}");
        env.seed(&env.queue, &key, OLD).await;
        env.backdate_result(&env.queue, &key, 5_000).await;
        // Five seconds old: fresh for a caller who takes ten.
        let r = ask(&env, &key, "max-age=10", via).await;
        assert_eq!(
            (r.status, r.json["freshness"].as_str()),
            (200, Some("fresh")),
            "{via:?}"
        );
        assert!(
            task_of(&env, &key).await.is_none(),
            "{via:?}: no refresh for a fresh hit"
        );
        // Too old for a caller who takes two: a refresh starts and its progress is the
        // answer, not the stored data; asked again, that refresh is joined. Forwarded for
        // the request's directive (RFC 9211 `fwd=request`): the result was fresh by ours.
        let r = ask(&env, &key, "max-age=2", via).await;
        assert_progress(&r, "repoll; fwd=request");
        let t = task_of(&env, &key).await.expect("the refresh");
        let r = ask(&env, &key, "max-age=2", via).await;
        assert_progress(&r, "repoll; fwd=request; collapsed");
        let again = task_of(&env, &key).await.expect("the refresh");
        assert_eq!(
            (again.state, again.created_ms),
            (TaskState::Due, t.created_ms)
        );
    }
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_stale_says_how_stale_a_caller_takes_within_the_windows() {
    let env = Env::start(Opts::default()).await;
    for via in VIAS {
        let key = format!("max stale {via:?}");
        env.seed(&env.queue, &key, OLD).await;
        // Five seconds past its fresh window.
        env.backdate_result(&env.queue, &key, STALE_BY + 4_000)
            .await;
        let r = ask(&env, &key, "max-stale=2", via).await;
        assert_progress(&r, "repoll; fwd=stale");
        for cc in ["max-stale=10", "max-stale", "max-age=1, max-stale"] {
            let r = ask(&env, &key, cc, via).await;
            assert_eq!(r.status, 200, "{via:?} {cc}: {}", r.body);
            assert_eq!(r.json["freshness"], "stale", "{via:?} {cc}: {}", r.body);
            assert_eq!(r.json["result"], json!({"v": "old"}));
        }
        // The service's windows still decide: past the stale window, while a refresh runs
        // (no error), no caller is shown the old result.
        env.backdate_result(&env.queue, &key, LONG as i64).await;
        let r = ask(&env, &key, "max-stale", via).await;
        assert_progress(&r, "repoll; fwd=stale; collapsed");
    }
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_cache_starts_one_refresh_now_and_later_ones_join_it() {
    let mut env = Env::start(Opts::default()).await;
    let key = "no cache polls=1";
    env.seed(&env.queue, key, OLD).await;
    // A fresh result, refused: one refresh starts, whichever way no-cache comes.
    let r = ask(&env, key, "no-cache", Via::Header).await;
    assert_progress(&r, "repoll; fwd=request");
    let t = task_of(&env, key).await.expect("the refresh");
    let r = ask(&env, key, "no-cache", Via::Field).await;
    assert_progress(&r, "repoll; fwd=request; collapsed");
    let r = ask(&env, key, "No-Cache, max-age=5", Via::Header).await;
    assert_progress(&r, "repoll; fwd=request; collapsed");
    assert_eq!(
        task_of(&env, key).await.map(|t| t.created_ms),
        Some(t.created_ms)
    );
    // Who takes what is stored still gets it, fresh, meanwhile.
    let r = env.submit(key).await;
    assert_eq!(
        (r.status, r.json["freshness"].as_str()),
        (200, Some("fresh")),
        "{}",
        r.body
    );
    assert_eq!(r.json["result"], json!({"v": "old"}));
    // One refresh, one chain of calls.
    env.start_workers();
    until(
        "the refreshed result",
        async || env.read(key).await,
        |r| r.json["result"]["query"] == key,
    )
    .await;
    assert_eq!(env.sim_calls(key).await, (1, 1));
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_if_cached_answers_what_is_stored_and_never_creates_a_task() {
    let env = Env::start(Opts::default()).await;
    let q = &env.queue;
    for via in VIAS {
        let key = format!("nothing stored {via:?}");
        let r = ask(&env, &key, "only-if-cached", via).await;
        assert_eq!(r.status, 504, "{via:?}: {}", r.body);
        assert_eq!(r.error_code(), "not_cached");
        assert!(
            q.get(&id_of(q, &key)).await.unwrap().is_none(),
            "{via:?}: nothing written"
        );

        let key = format!("stored stale {via:?}");
        env.seed(q, &key, OLD).await;
        env.backdate_result(q, &key, STALE_BY).await;
        let r = ask(&env, &key, "only-if-cached", via).await;
        assert_eq!(r.status, 200, "{via:?}: {}", r.body);
        assert_eq!(r.json["freshness"], "stale", "{}", r.body);
        assert_eq!(
            (&r.json["stale_reason"], &r.json["refreshing"]),
            (&Value::Null, &json!(false))
        );
        let cs = r.cache_status();
        assert!(
            cs.starts_with("repoll; hit; ttl=-") && !cs.contains("detail"),
            "{cs}"
        );
        assert!(
            task_of(&env, &key).await.is_none(),
            "{via:?}: no refresh started"
        );

        // A running task is what there is: joined, not refused.
        let key = format!("running {via:?}");
        assert_eq!(env.submit(&key).await.status, 202);
        let r = ask(&env, &key, "only-if-cached", via).await;
        assert_progress(&r, "repoll; fwd=miss; collapsed");
    }
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_directives_are_refused_before_anything_is_written() {
    let env = Env::start(Opts::default()).await;
    let long = format!("max-age=1, {}", "x".repeat(300));
    // The 17 malformed directives of the issue 39 probe (each held: 400, nothing written),
    // each sent both ways. A silent default would be worse than a refusal: `max-age=1.5`
    // read as "no max-age" serves what the caller said it refuses.
    let malformed = [
        "max-age=soon",
        "max-age",
        "max-stale=-1",
        "max-age=1.5",
        long.as_str(),
        "max-age=-1",
        "max-age=",
        "max-age=\"\"",
        "max-age=+5",
        "max-age=5s",
        "max-age=0x10",
        "max-age=1e3",
        "max-stale=soon",
        "max-stale=",
        // Arabic-Indic digits: digits to Unicode, not to RFC 9111; by header not even text.
        "Max-Age=\u{662}\u{663}",
        "max-age=1, max-age=x",
        "no-cache, max-stale=2.5",
    ];
    assert_eq!(malformed.len(), 17);
    for cc in malformed {
        for via in VIAS {
            let key = format!("malformed {cc} {via:?}");
            let r = match via {
                Via::Header => ask_raw(&env, &key, &[cc.as_bytes()], None, None).await,
                Via::Field => ask_raw(&env, &key, &[], Some(cc), None).await,
            };
            assert_eq!(r.status, 400, "{cc:?} {via:?}: {}", r.body);
            assert_eq!(r.error_code(), "invalid_cache_control", "{cc:?} {via:?}");
            let q = &env.queue;
            assert!(
                q.get(&id_of(q, &key)).await.unwrap().is_none(),
                "{cc:?} {via:?}"
            );
        }
    }
    // Unknown directives are ignored, as RFC 9111 asks.
    let r = ask(
        &env,
        "unknown directive",
        "x-whatever=1, private",
        Via::Header,
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.body);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusing_the_store_is_limited_per_client() {
    // One a minute, a burst of three.
    let env = Env::start(Opts {
        refresh_per_min: 1,
        ..Opts::default()
    })
    .await;
    for (i, via) in [Via::Header, Via::Field, Via::Header]
        .into_iter()
        .enumerate()
    {
        let r = ask(&env, &format!("refuse {i}"), "no-cache", via).await;
        assert_eq!(r.status, 202, "within the burst: {}", r.body);
    }
    for (cc, via) in [("no-cache", Via::Field), ("max-age=0", Via::Header)] {
        let r = ask(&env, "refuse more", cc, via).await;
        assert_eq!(r.status, 429, "{cc} {via:?}: {}", r.body);
        assert_eq!(r.error_code(), "rate_limited");
        assert!(
            r.header("retry-after").parse::<u64>().unwrap() >= 1,
            "{r:?}"
        );
    }
    // Asks that take the store are not limited by it, nor is a max-age at least the fresh
    // window (it refuses nothing the store would answer as fresh).
    for cc in ["max-stale", "only-if-cached", "max-age=315360000"] {
        let r = ask(&env, "refuse more", cc, Via::Header).await;
        assert_ne!(r.status, 429, "{cc}: {}", r.body);
    }
    assert_eq!(env.submit("refuse more").await.status, 202);
    env.stop().await;
}

/// Issue 39's probe: the refresh limit held under 14 spellings of "refuse the store" —
/// names in any case, quoted and spaced values, empty list members, an argument on
/// `no-cache`, unknown directives around it, `max-stale` beside it, two header lines, header
/// and body together. Each spelling is asked by a client of its own against a fresh result,
/// so each is shown to take a token itself: the burst (3) is answered, the fourth ask is 429,
/// and that client still takes the store unlimited (the 429 is the refresh limit's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_spelling_of_refusing_the_store_is_limited() {
    let env = Env::start(Opts {
        refresh_per_min: 1,
        ..Opts::default()
    })
    .await;
    // (Cache-Control header lines, the body's cache_control). The fresh window is a minute
    // and the stored result half a minute old: every one of these refuses it (a refresh
    // starts; with `max-stale` the old result is still answered meanwhile).
    let spellings: [(&[&str], Option<&str>); 14] = [
        (&["no-cache"], None),
        (&[], Some("no-cache")),
        (&["No-Cache"], None),
        (&[], Some("NO-CACHE")),
        (&["max-age=0"], None),
        (&[], Some("max-age=\"0\"")),
        (&["Max-Age=29"], None),
        (&["max-age = 0"], None),
        (&[" , no-cache , "], None),
        (&["max-age=000"], None),
        (&["x-unknown=1, no-cache=\"set-cookie\""], None),
        (&["max-stale, max-age=0"], None),
        (&["max-stale", "no-cache"], None),
        (&["max-stale"], Some("max-age=1")),
    ];
    for (n, (lines, field)) in spellings.into_iter().enumerate() {
        let ip = [10, 0, 1, n as u8 + 1];
        let key = format!("spelling {n}");
        env.seed(&env.queue, &key, OLD).await;
        env.backdate_result(&env.queue, &key, 30_000).await;
        let spelled = format!("{lines:?} + {field:?}");
        let lines: Vec<&[u8]> = lines.iter().map(|l| l.as_bytes()).collect();
        for nth in 1..=3 {
            let r = ask_raw(&env, &key, &lines, field, Some(ip)).await;
            assert!(
                r.status == 200 || r.status == 202,
                "{spelled} ask {nth}, within the burst: {} {}",
                r.status,
                r.body
            );
        }
        assert!(task_of(&env, &key).await.is_some(), "{spelled}: a refresh");
        let r = ask_raw(&env, &key, &lines, field, Some(ip)).await;
        assert_eq!(r.status, 429, "{spelled}: the fourth refusal: {}", r.body);
        assert_eq!(r.error_code(), "rate_limited", "{spelled}");
        // The same client taking the store is not limited: the refusal was what counted.
        let r = ask_raw(&env, &key, &[], None, Some(ip)).await;
        assert_eq!(
            (r.status, r.json["freshness"].as_str()),
            (200, Some("fresh")),
            "{spelled}: {}",
            r.body
        );
    }
    env.stop().await;
}

/// Sent both ways at once, the directives are one list, the header's first: each adds what
/// the other lacks, a directive in both takes the body's value (the later one), and the
/// 256-byte bound and the check of values hold for the two together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_and_body_directives_are_read_together_the_body_last() {
    let env = Env::start(Opts::default()).await;
    let both = async |key: &str, header: &str, field: &str| {
        env.ask(key, Some(header), json!({ "cache_control": field }))
            .await
    };
    // A result five seconds old under `key`.
    let stored = async |key: &str| {
        env.seed(&env.queue, key, OLD).await;
        env.backdate_result(&env.queue, key, 5_000).await;
    };
    let nothing_written = async |key: &str| {
        let q = &env.queue;
        q.get(&id_of(q, key)).await.unwrap().is_none()
    };

    // `max-age` both ways: the body's value decides, whichever is the stricter.
    let key = "both max-age, the body's 2";
    stored(key).await;
    let r = both(key, "max-age=10", "max-age=2").await;
    assert_eq!(
        (r.status, &r.json["result"]),
        (202, &Value::Null),
        "the body's max-age=2: the refresh's progress, not the result: {}",
        r.body
    );
    assert!(task_of(&env, key).await.is_some(), "the body's max-age=2");
    let key = "both max-age, the body's 10";
    stored(key).await;
    let r = both(key, "max-age=2", "max-age=10").await;
    assert_eq!(
        (r.status, r.json["freshness"].as_str()),
        (200, Some("fresh")),
        "the body's max-age=10: {}",
        r.body
    );
    assert!(task_of(&env, key).await.is_none(), "no refresh: {}", r.body);

    // One directive each way: both hold. `max-age=2` alone refuses a result five seconds old
    // (max_age_refuses_…); with `max-stale` it is taken, while the refresh it asked for runs.
    for (header, field) in [("max-age=2", "max-stale"), ("max-stale", "max-age=2")] {
        let key = format!("max-age and max-stale: {header} + {field}");
        stored(&key).await;
        let r = both(&key, header, field).await;
        assert_eq!(r.status, 200, "{header} + {field}: {}", r.body);
        assert_eq!(r.json["result"], json!({"v": "old"}), "{}", r.body);
        assert!(
            task_of(&env, &key).await.is_some(),
            "{header} + {field}: the refresh max-age asked for"
        );
    }
    // `only-if-cached` never starts the refresh the other side's `max-age` would: nothing
    // this caller takes is stored, so 504 (alone, each would be answered: 200, or 202).
    for (header, field) in [
        ("only-if-cached", "max-age=2"),
        ("max-age=2", "only-if-cached"),
    ] {
        let key = format!("only-if-cached and max-age: {header} + {field}");
        stored(&key).await;
        let r = both(&key, header, field).await;
        assert_eq!(r.status, 504, "{header} + {field}: {}", r.body);
        assert_eq!(r.error_code(), "not_cached");
        assert!(task_of(&env, &key).await.is_none(), "{header} + {field}");
    }

    // The bound is on the two together: 150 bytes each way is refused, either alone is not.
    let pad = format!("x-pad={}", "p".repeat(144));
    let r = both("padded both ways", &pad, &pad).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.error_code(), "invalid_cache_control");
    assert!(r.body.contains("256 bytes"), "{}", r.body);
    assert!(nothing_written("padded both ways").await);
    assert_eq!(
        ask(&env, "padded header", &pad, Via::Header).await.status,
        202
    );
    assert_eq!(
        ask(&env, "padded field", &pad, Via::Field).await.status,
        202
    );
    // A malformed value on either side refuses the request, however good the other side.
    for (header, field) in [
        ("max-age=10", "max-age=soon"),
        ("max-stale=-1", "max-age=10"),
    ] {
        let key = format!("malformed: {header} + {field}");
        let r = both(&key, header, field).await;
        assert_eq!(r.status, 400, "{header} + {field}: {}", r.body);
        assert_eq!(r.error_code(), "invalid_cache_control");
        assert!(nothing_written(&key).await, "{header} + {field}");
    }
    env.stop().await;
}

/// The whole seconds of a header (panics when absent or not a number).
#[track_caller]
fn secs(r: &common::Reply, name: &str) -> i64 {
    r.header(name)
        .parse()
        .unwrap_or_else(|_| panic!("{name}: {r:?}"))
}

/// `Cache-Control: max-age=N` as N.
#[track_caller]
fn max_age(r: &common::Reply) -> i64 {
    let cc = r.header("cache-control");
    cc.strip_prefix("max-age=")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("Cache-Control {cc:?}: {r:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answer_says_its_age_how_long_to_keep_it_and_where_it_came_from() {
    let env = Env::start(Opts::default()).await;
    let q = &env.queue;

    // Created, joined, and read while it runs: progress, kept by nobody.
    let created = env.submit("kind created").await;
    assert_progress(&created, "repoll; fwd=miss; stored");
    let joined = env.submit("kind created").await;
    assert_progress(&joined, "repoll; fwd=miss; collapsed");
    let read = env.read("kind created").await;
    assert_eq!(read.status, 200, "{}", read.body);
    assert_eq!(
        (read.header("cache-control"), read.header("age")),
        ("no-store", "")
    );
    assert_eq!(read.cache_status(), "repoll; fwd=miss");

    // Fresh: five seconds old, 55 s left (a moment less by the time it is read).
    env.seed(q, "kind fresh", OLD).await;
    env.backdate_result(q, "kind fresh", 5_000).await;
    for r in [env.submit("kind fresh").await, env.read("kind fresh").await] {
        assert_eq!(r.status, 200, "{}", r.body);
        assert!((5..=6).contains(&secs(&r, "age")), "{r:?}");
        let left = max_age(&r);
        assert!((53..=55).contains(&left), "{r:?}");
        assert_eq!(r.cache_status(), format!("repoll; hit; ttl={left}"));
    }

    // Stale: a second past its window; nothing left to keep it.
    env.seed(q, "kind stale", OLD).await;
    env.backdate_result(q, "kind stale", STALE_BY).await;
    let ask = env.submit("kind stale").await;
    let read = env.read("kind stale").await;
    for r in [&ask, &read] {
        assert_eq!(r.status, 200, "{}", r.body);
        assert!((61..=62).contains(&secs(r, "age")), "{r:?}");
        assert_eq!(max_age(r), 0, "{r:?}");
    }
    let ttl = |r: &common::Reply| -> i64 {
        let cs = r.cache_status();
        let t = cs.split("; ").find_map(|p| p.strip_prefix("ttl="));
        t.and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("{cs}"))
    };
    assert!((-3..=-1).contains(&ttl(&ask)), "{ask:?}");
    assert_eq!(
        ask.cache_status(),
        format!(
            "repoll; fwd=stale; fwd-status=202; ttl={}; detail=refreshing",
            ttl(&ask)
        )
    );
    assert_eq!(
        read.cache_status(),
        format!(
            "repoll; fwd=stale; fwd-status=202; ttl={}; detail=refreshing",
            ttl(&read)
        )
    );

    // Negative: a task that died for good, kept for the failed window (a minute).
    let key = "kind negative";
    q.enqueue(key, "", &Default::default()).await.unwrap();
    let id = id_of(q, key);
    let token = claim_task(q, &id).await;
    q.fail(&id, token, "refused", Retry::Dead, 1).await.unwrap();
    for r in [env.submit(key).await, env.read(key).await] {
        assert_eq!(
            (r.status, r.json["status"].as_str()),
            (200, Some("failed")),
            "{}",
            r.body
        );
        assert!((0..=1).contains(&secs(&r, "age")), "{r:?}");
        let left = max_age(&r);
        assert!((58..=60).contains(&left), "{r:?}");
        assert_eq!(
            r.cache_status(),
            format!("repoll; hit; ttl={left}; detail=negative")
        );
    }
    env.stop().await;
}
