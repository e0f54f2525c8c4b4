//! The simulator over real HTTP on 127.0.0.1:0.

use std::time::Duration;

use serde_json::Value;
use sim::state::{KeyDetail, Stats};
use sim::SimArgs;

struct Sim {
    base: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Sim {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

async fn start(args: SimArgs) -> Sim {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(sim::serve(listener, args, async move {
        let _ = rx.await;
    }));
    Sim {
        base: format!("http://{addr}"),
        stop: Some(tx),
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .expect("client")
}

async fn get(sim: &Sim, q: &str) -> reqwest::Response {
    client()
        .get(format!("{}/api/query", sim.base))
        .query(&[("q", q)])
        .send()
        .await
        .expect("send")
}

async fn stats(sim: &Sim) -> Stats {
    let v: Value = client()
        .get(format!("{}/_sim/stats", sim.base))
        .send()
        .await
        .expect("stats")
        .json()
        .await
        .expect("json");
    // Exactly the documented shape: {"calls": n, "keys": {k: {"calls": n, "done": d}}}.
    let obj = v.as_object().expect("object");
    assert_eq!(obj.len(), 2, "{v}");
    for (_, k) in v["keys"].as_object().expect("keys") {
        assert_eq!(k.as_object().map(|o| o.len()), Some(2), "{k}");
    }
    serde_json::from_value(v).expect("stats shape")
}

#[tokio::test]
async fn polls_until_done_and_stats_count() {
    let sim = start(SimArgs::default()).await;
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let v: Value = get(&sim, "alpha polls=3").await.json().await.expect("json");
        statuses.push(v["status"].as_str().unwrap_or_default().to_string());
        assert_eq!(v["data"]["query"], "alpha polls=3");
    }
    assert_eq!(statuses, ["processing", "processing", "done", "done"]);
    let _ = get(&sim, "beta polls=1").await;
    let st = stats(&sim).await;
    assert_eq!(st.calls, 5);
    assert_eq!(st.keys["alpha polls=3"].calls, 4);
    assert_eq!(st.keys["alpha polls=3"].done, 2);
    assert_eq!(st.keys["beta polls=1"].done, 1);

    let reset = client()
        .post(format!("{}/_sim/reset", sim.base))
        .send()
        .await
        .expect("reset");
    assert!(reset.status().is_success());
    assert_eq!(stats(&sim).await.calls, 0);
}

#[tokio::test]
async fn time_based_done_and_query_string_overrides() {
    let sim = start(SimArgs::default()).await;
    let url = format!("{}/api/query?q=timed&ms=300", sim.base);
    let v: Value = client()
        .get(&url)
        .send()
        .await
        .expect("1")
        .json()
        .await
        .expect("j");
    assert_eq!(v["status"], "processing");
    tokio::time::sleep(Duration::from_millis(350)).await;
    let v: Value = client()
        .get(&url)
        .send()
        .await
        .expect("2")
        .json()
        .await
        .expect("j");
    assert_eq!(v["status"], "done");
}

#[tokio::test]
async fn forced_faults() {
    let sim = start(SimArgs {
        hang_ms: 5_000,
        ..SimArgs::default()
    })
    .await;
    let r = get(&sim, "a fail=429 retry_after=7 fail_times=1 polls=1").await;
    assert_eq!(r.status(), 429);
    assert_eq!(
        r.headers().get("retry-after").and_then(|v| v.to_str().ok()),
        Some("7")
    );
    let v: Value = get(&sim, "a fail=429 retry_after=7 fail_times=1 polls=1")
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(v["status"], "done");

    assert_eq!(get(&sim, "b fail=500").await.status(), 500);
    assert_eq!(get(&sim, "b fail=503").await.status(), 503);
    let body = get(&sim, "c fail=malformed")
        .await
        .text()
        .await
        .expect("text");
    assert!(serde_json::from_str::<Value>(&body).is_err());
    let v: Value = get(&sim, "d fail=shape").await.json().await.expect("json");
    assert!(v.get("status").is_none());

    // A reset: the answer starts, then the connection is cut.
    // hyper may not even flush the headers, so the error shows at send or at the body.
    let r = client()
        .get(format!("{}/api/query", sim.base))
        .query(&[("q", "e fail=reset")])
        .send()
        .await;
    match r {
        Ok(r) => assert!(r.text().await.is_err()),
        Err(e) => assert!(!e.is_timeout(), "{e}"),
    }

    // A hang outlasts the client's timeout.
    let err = client()
        .get(format!("{}/api/query", sim.base))
        .query(&[("q", "f fail=hang")])
        .timeout(Duration::from_millis(200))
        .send()
        .await
        .expect_err("hang");
    assert!(err.is_timeout());

    let v: Value = get(&sim, "g status=failed error=boom")
        .await
        .json()
        .await
        .expect("j");
    assert_eq!(v["status"], "failed");
    assert_eq!(v["error"], "boom");

    let payload = "<script>alert(1)</script> & more";
    let v: Value = get(&sim, &format!("h polls=1 payload={payload}"))
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(v["data"]["payload"], payload);

    // `pad=`: filler in the data, or appended to a failed answer's message.
    let v: Value = get(&sim, "p1 polls=2 pad=5000")
        .await
        .json()
        .await
        .expect("padded json");
    assert_eq!(v["status"], "processing");
    assert_eq!(v["data"]["pad"].as_str().map(str::len), Some(5000));
    assert_eq!(v["data"]["query"], "p1 polls=2 pad=5000");
    let v: Value = get(&sim, "p2 status=failed error=\"boom\" pad=3")
        .await
        .json()
        .await
        .expect("padded failed json");
    assert_eq!(v["error"], "\"boom\"xxx");

    let detail: KeyDetail = client()
        .get(format!("{}/_sim/key", sim.base))
        .query(&[("q", "b fail=500")])
        .send()
        .await
        .expect("key")
        .json()
        .await
        .expect("json");
    assert_eq!(detail.calls, 1);
    assert_eq!(detail.call_ms.len(), 1);
    assert_eq!(stats(&sim).await.keys["b fail=500"].done, 0);
}

/// `pad_partial=` pads the `processing` answers only (huge partials, then a small final
/// answer); `deep=` nests that many arrays in the data (or next to a failed message): JSON
/// that a parser with a recursion limit refuses, sent whole and nothing else changed.
#[tokio::test]
async fn pad_partial_and_deep_shape_the_answers() {
    let sim = start(SimArgs::default()).await;
    let key = "pp polls=2 pad_partial=5000";
    let v: Value = get(&sim, key).await.json().await.expect("padded partial");
    assert_eq!(v["status"], "processing");
    assert_eq!(v["data"]["pad"].as_str().map(str::len), Some(5000));
    let v: Value = get(&sim, key).await.json().await.expect("final");
    assert_eq!(v["status"], "done");
    assert!(v["data"].get("pad").is_none(), "{v}");

    let v: Value = get(&sim, "d1 polls=1 deep=3")
        .await
        .json()
        .await
        .expect("deep 3");
    assert_eq!(v["status"], "done");
    assert_eq!(v["data"]["deep"], serde_json::json!([[[]]]));
    assert_eq!(v["data"]["query"], "d1 polls=1 deep=3");
    let v: Value = get(&sim, "d2 status=failed error=boom deep=2")
        .await
        .json()
        .await
        .expect("deep failed");
    assert_eq!(
        (&v["error"], &v["deep"]),
        (&"boom".into(), &serde_json::json!([[]]))
    );

    let deep = 60_000;
    let body = get(&sim, &format!("d3 polls=1 deep={deep}"))
        .await
        .text()
        .await
        .expect("deep body");
    assert!(
        body.starts_with(r#"{"status":"done","data":{"#),
        "{}",
        &body[..80]
    );
    let nest = format!(r#""deep":{}{}}}}}"#, "[".repeat(deep), "]".repeat(deep));
    assert!(body.ends_with(&nest), "{} bytes", body.len());
    let e = serde_json::from_str::<Value>(&body).expect_err("deeper than serde_json's limit");
    assert!(e.to_string().contains("recursion limit"), "{e}");
}

/// The status of each of 200 calls (keys `k0`..`k199`, one after the other) to a fresh
/// simulator with a 50 % error rate and `seed`.
async fn statuses_with_seed(seed: u64) -> Vec<u16> {
    let sim = start(SimArgs {
        error_rate: 0.5,
        seed: Some(seed),
        polls: 1,
        ..SimArgs::default()
    })
    .await;
    let mut out = Vec::with_capacity(200);
    for i in 0..200 {
        out.push(get(&sim, &format!("k{i}")).await.status().as_u16());
    }
    out
}

/// The rate is followed, and the seed repeats the dice: the same seed on a fresh simulator
/// gives the same answer to every call, in order; another seed gives another sequence.
#[tokio::test]
async fn random_faults_follow_rates_with_a_seed() {
    let first = statuses_with_seed(42).await;
    let errors = first.iter().filter(|s| **s >= 500).count();
    assert!((60..=140).contains(&errors), "{errors} errors of 200");
    assert!(
        first.iter().all(|s| [200, 500, 503].contains(s)),
        "{first:?}"
    );
    let again = statuses_with_seed(42).await;
    assert_eq!(first, again, "the same seed, another sequence of answers");
    let other = statuses_with_seed(43).await;
    assert_ne!(first, other, "another seed, the same sequence of answers");
}

#[tokio::test]
async fn missing_key_is_a_400() {
    let sim = start(SimArgs::default()).await;
    let r = client()
        .get(format!("{}/api/query", sim.base))
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), 400);
}

#[tokio::test]
async fn an_override_out_of_range_is_a_400_naming_the_knob_and_creates_nothing() {
    let sim = start(SimArgs::default()).await;
    for (key, knob) in [
        ("boom items=4294967295 polls=1", "items"),
        ("x polls=99999999", "polls"),
        ("x ms=abc", "ms"),
        ("x latency=86400000", "latency"),
        ("x fail=explode", "fail"),
    ] {
        let r = get(&sim, key).await;
        assert_eq!(r.status(), 400, "{key}");
        let v: Value = r.json().await.expect("json");
        let msg = v["error"].as_str().unwrap_or_default();
        assert!(msg.starts_with(&format!("{knob}: ")), "{key}: {v}");
    }
    let v: Value = get(&sim, "boom items=4294967295 polls=1")
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(
        v["error"], "items: 4294967295 is out of range 0..=1000",
        "{v}"
    );
    let long = "k".repeat(sim::limits::MAX_KEY_BYTES + 1);
    let r = get(&sim, &long).await;
    assert_eq!(r.status(), 400);
    let st = stats(&sim).await;
    assert_eq!((st.calls, st.keys.len()), (0, 0), "{st:?}");
}

#[tokio::test]
async fn items_at_the_maximum_answer_fine() {
    let sim = start(SimArgs::default()).await;
    let key = format!("big items={} polls=1", sim::limits::MAX_ITEMS);
    let r = get(&sim, &key).await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["status"], "done");
    assert_eq!(
        v["data"]["items"].as_array().map(Vec::len),
        Some(sim::limits::MAX_ITEMS as usize)
    );
}

#[tokio::test]
async fn a_panicking_handler_is_a_500_and_the_simulator_carries_on() {
    let sim = start(SimArgs::default()).await;
    let r = get(&sim, "p fail=panic").await;
    assert_eq!(r.status(), 500);
    let v: Value = r.json().await.expect("json");
    assert!(
        v["error"]
            .as_str()
            .is_some_and(|e| e.contains("simulated panic")),
        "{v}"
    );
    let v: Value = get(&sim, "after polls=1").await.json().await.expect("json");
    assert_eq!(v["status"], "done");
    assert_eq!(stats(&sim).await.keys["p fail=panic"].calls, 1);
}

/// A third request while two hold the simulator's two slots is refused with 503 and
/// `Retry-After: 1` at once: its answer comes while the other two still run (they hang for a
/// minute), so it was not queued behind them; it is not counted as a call. Once they are gone,
/// the slots serve again.
#[tokio::test]
async fn requests_beyond_the_concurrency_limit_are_503_at_once() {
    let sim = start(SimArgs {
        max_concurrency: 2,
        hang_ms: 60_000,
        ..SimArgs::default()
    })
    .await;
    // Two requests that hang (a minute; the client waits longer) take both slots...
    let patient = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .expect("client");
    let slow: Vec<_> = (0..2)
        .map(|i| {
            let req = patient
                .get(format!("{}/api/query", sim.base))
                .query(&[("q", format!("slow-{i} fail=hang"))]);
            tokio::spawn(async move { req.send().await.map(|r| r.status().as_u16()) })
        })
        .collect();
    // ...which shows when the test's own stats request (never two at once) finds no slot.
    let stats_status = || async {
        client()
            .get(format!("{}/_sim/stats", sim.base))
            .send()
            .await
            .expect("stats")
            .status()
            .as_u16()
    };
    let t0 = std::time::Instant::now();
    while stats_status().await != 503 {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the two hanging requests never held both slots"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // ...so a third is refused straight away, with a hint when to come back.
    let r = get(&sim, "third polls=1").await;
    assert_eq!(r.status(), 503);
    assert_eq!(
        r.headers().get("retry-after").and_then(|v| v.to_str().ok()),
        Some("1")
    );
    assert!(
        slow.iter().all(|s| !s.is_finished()),
        "the refusal came only after a slot was freed"
    );
    // The hanging requests go away (their connections closed): the slots are free again.
    for s in &slow {
        s.abort();
    }
    let t0 = std::time::Instant::now();
    while stats_status().await != 200 {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the slots were not freed when their requests went away"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(get(&sim, "fourth polls=1").await.status(), 200);
    let st = stats(&sim).await;
    assert_eq!(st.keys["slow-0 fail=hang"].calls, 1, "{st:?}");
    assert_eq!(st.keys["slow-1 fail=hang"].calls, 1, "{st:?}");
    assert!(
        !st.keys.contains_key("third polls=1"),
        "refused, not counted: {st:?}"
    );
    assert_eq!(st.calls, 3, "{st:?}");
}

/// `POST /_sim/outage?ms=N`: every call is a 503 (still counted) until it ends or is ended;
/// a bad or too long duration is a 400.
#[tokio::test]
async fn an_outage_answers_503_until_it_ends() {
    let sim = start(SimArgs::default()).await;
    let query = format!("{}/api/query?q=down", sim.base);
    let outage = |ms: &str| {
        client()
            .post(format!("{}/_sim/outage?ms={ms}", sim.base))
            .send()
    };
    let r = outage("60000").await.expect("outage");
    assert!(r.status().is_success());
    let left: Value = r.json().await.expect("json");
    assert!(left["outage_ms"].as_u64().unwrap() > 59_000, "{left}");
    for _ in 0..3 {
        let r = client().get(&query).send().await.expect("query");
        assert_eq!(r.status().as_u16(), 503);
    }
    assert_eq!(stats(&sim).await.calls, 3, "calls in an outage are counted");
    for bad in ["", "x", "-1", "3600001"] {
        let r = outage(bad).await.expect("bad outage");
        assert_eq!(r.status().as_u16(), 400, "ms={bad}");
    }
    let r = outage("0").await.expect("end");
    let left: Value = r.json().await.expect("json");
    assert_eq!(left["outage_ms"], 0);
    let r = client().get(&query).send().await.expect("query");
    assert_eq!(r.status().as_u16(), 200);
}

/// `--sim-upstreams search`: a second simulated upstream under `/search`, with its own state
/// (its calls are not the main one's, its outage neither); a bad prefix is refused by the flag.
#[tokio::test]
async fn extra_upstreams_live_under_their_prefix_with_their_own_state() {
    let sim = start(SimArgs {
        upstreams: vec!["search".into()],
        ..SimArgs::default()
    })
    .await;
    let get = |path: String| client().get(path).send();
    let r = get(format!("{}/search/api/query?q=k&polls=1", sim.base))
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["status"], "done");
    let search: Value = get(format!("{}/search/_sim/stats", sim.base))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(search["calls"], 1);
    assert_eq!(stats(&sim).await.calls, 0, "the main upstream saw nothing");
    // An outage of the prefixed one leaves the main one answering.
    client()
        .post(format!("{}/search/_sim/outage?ms=60000", sim.base))
        .send()
        .await
        .unwrap();
    let down = get(format!("{}/search/api/query?q=k", sim.base))
        .await
        .unwrap();
    assert_eq!(down.status().as_u16(), 503);
    let up = get(format!("{}/api/query?q=k", sim.base)).await.unwrap();
    assert_eq!(up.status().as_u16(), 200);

    use clap::Parser;
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        sim: SimArgs,
    }
    let ok = Cli::try_parse_from(["t", "--sim-upstreams", "search,reports"]).unwrap();
    assert_eq!(ok.sim.upstreams, vec!["search", "reports"]);
    for bad in ["Search", "a/b", "api", "_sim", ""] {
        assert!(
            Cli::try_parse_from(["t", "--sim-upstreams", bad]).is_err(),
            "{bad:?}"
        );
    }
}
