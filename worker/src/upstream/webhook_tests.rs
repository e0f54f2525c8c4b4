//! Unit tests of [`super`]: the Standard Webhooks signature (the specification's own example,
//! which the simulator's signer is checked against too),
//! a header secret, and the settings checked at start.

use super::*;
use reqwest::header::HeaderValue;

/// The Standard Webhooks specification's example: secret, id, timestamp, body and signature.
const SPEC_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const SPEC_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
const SPEC_TS: i64 = 1614265330;
const SPEC_BODY: &[u8] = br#"{"test": 2432232314}"#;
const SPEC_SIGNATURE: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

fn args(secret: &str, header: Option<&str>) -> JobArgs {
    JobArgs {
        webhook_secret: Some(Secret::from(secret)),
        webhook_header: header.map(str::to_string),
        ..crate::upstream::UpstreamArgs::default().job
    }
}

fn standard() -> Webhooks {
    Webhooks::new(&args(SPEC_SECRET, None), None, Some("/id"))
        .expect("valid")
        .expect("configured")
}

fn headers(id: &str, ts: &str, sig: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (name, value) in [
        ("webhook-id", id),
        ("webhook-timestamp", ts),
        ("webhook-signature", sig),
    ] {
        h.insert(name, HeaderValue::from_str(value).expect("header"));
    }
    h
}

#[test]
fn the_specification_example_verifies() {
    let d = standard()
        .verify(&headers(SPEC_ID, "1614265330", SPEC_SIGNATURE), SPEC_BODY)
        .expect("authentic");
    assert_eq!(d.id.as_deref(), Some(SPEC_ID));
    assert_eq!(d.timestamp_ms, Some(SPEC_TS * 1000));
}

#[test]
fn any_v1_entry_of_a_rotation_list_is_enough() {
    let list = format!("v1a,AAAA v1,bm90IGl0 {SPEC_SIGNATURE}");
    assert!(standard()
        .verify(&headers(SPEC_ID, "1614265330", &list), SPEC_BODY)
        .is_ok());
}

#[test]
fn a_changed_body_id_or_timestamp_is_forged() {
    let w = standard();
    let h = headers(SPEC_ID, "1614265330", SPEC_SIGNATURE);
    assert_eq!(
        w.verify(&h, br#"{"test": 2432232315}"#),
        Err(Refused::Signature)
    );
    let h = headers("msg_other", "1614265330", SPEC_SIGNATURE);
    assert_eq!(w.verify(&h, SPEC_BODY), Err(Refused::Signature));
    let h = headers(SPEC_ID, "1614265331", SPEC_SIGNATURE);
    assert_eq!(w.verify(&h, SPEC_BODY), Err(Refused::Signature));
    // Only v1 entries count: the same bytes under another version are not a signature.
    let h = headers(SPEC_ID, "1614265330", &SPEC_SIGNATURE.replace("v1,", "v2,"));
    assert_eq!(w.verify(&h, SPEC_BODY), Err(Refused::Signature));
}

#[test]
fn missing_or_malformed_headers_are_named() {
    let w = standard();
    let mut h = headers(SPEC_ID, "1614265330", SPEC_SIGNATURE);
    h.remove("webhook-id");
    assert_eq!(w.verify(&h, SPEC_BODY), Err(Refused::Header("webhook-id")));
    let h = headers(SPEC_ID, "yesterday", SPEC_SIGNATURE);
    assert_eq!(
        w.verify(&h, SPEC_BODY),
        Err(Refused::Header("webhook-timestamp"))
    );
    let long = "x".repeat(MAX_WEBHOOK_ID + 1);
    let h = headers(&long, "1614265330", SPEC_SIGNATURE);
    assert_eq!(w.verify(&h, SPEC_BODY), Err(Refused::Header("webhook-id")));
}

#[test]
fn freshness_is_five_minutes_either_side() {
    let d = Delivery {
        id: None,
        timestamp_ms: Some(1_000_000_000),
    };
    assert!(Webhooks::fresh(&d, 1_000_000_000 + TOLERANCE_MS));
    assert!(Webhooks::fresh(&d, 1_000_000_000 - TOLERANCE_MS));
    assert!(!Webhooks::fresh(&d, 1_000_000_000 + TOLERANCE_MS + 1));
    assert!(!Webhooks::fresh(&d, 1_000_000_000 - TOLERANCE_MS - 1));
    assert!(Webhooks::fresh(&Delivery::default(), 0));
}

#[test]
fn a_header_secret_must_match_exactly() {
    let w = Webhooks::new(&args("s3cret", Some("X-Hook-Auth")), None, Some("/id"))
        .expect("valid")
        .expect("configured");
    let mut h = HeaderMap::new();
    assert_eq!(w.verify(&h, b"{}"), Err(Refused::Signature));
    h.insert("x-hook-auth", HeaderValue::from_static("s3cre"));
    assert_eq!(w.verify(&h, b"{}"), Err(Refused::Signature));
    h.insert("x-hook-auth", HeaderValue::from_static("s3cret!"));
    assert_eq!(w.verify(&h, b"{}"), Err(Refused::Signature));
    h.insert("x-hook-auth", HeaderValue::from_static("s3cret"));
    assert_eq!(w.verify(&h, b"{}"), Ok(Delivery::default()));
}

#[test]
fn the_job_pointer_defaults_to_where_the_job_came_from() {
    let a = args(SPEC_SECRET, None);
    let body = serde_json::json!({"id": "j1", "urls": {"get": "http://x/v1/j1"}});
    let by_url = Webhooks::new(&a, Some("/urls/get"), Some("/id"))
        .expect("valid")
        .expect("on");
    assert_eq!(by_url.job_of(&body).as_deref(), Some("http://x/v1/j1"));
    let by_id = Webhooks::new(&a, None, Some("/id"))
        .expect("valid")
        .expect("on");
    assert_eq!(by_id.job_of(&body).as_deref(), Some("j1"));
    // A poll URL from a header: nothing in a webhook's body is known to hold it.
    let e = Webhooks::new(&a, None, None).expect_err("needs a pointer");
    assert!(
        e.0.contains("REPOLL_UPSTREAM_WEBHOOK_JOB_POINTER"),
        "{}",
        e.0
    );
    let given = JobArgs {
        webhook_job_pointer: Some("/data/job".into()),
        ..a
    };
    let w = Webhooks::new(&given, None, None)
        .expect("valid")
        .expect("on");
    assert_eq!(
        w.job_of(&serde_json::json!({"data": {"job": 7}}))
            .as_deref(),
        Some("7")
    );
}

#[test]
fn wrong_settings_stop_the_start_naming_them() {
    for (a, setting) in [
        (args("not-whsec", None), "REPOLL_UPSTREAM_WEBHOOK_SECRET"),
        (args("whsec_!!!", None), "REPOLL_UPSTREAM_WEBHOOK_SECRET"),
        (
            args("s", Some("bad header")),
            "REPOLL_UPSTREAM_WEBHOOK_HEADER",
        ),
        (
            JobArgs {
                webhook_mode: "sometimes".into(),
                ..args(SPEC_SECRET, None)
            },
            "REPOLL_UPSTREAM_WEBHOOK_MODE",
        ),
        (
            JobArgs {
                job_index_life_ms: 0,
                ..args(SPEC_SECRET, None)
            },
            "REPOLL_UPSTREAM_JOB_INDEX_LIFE_MS",
        ),
    ] {
        let e = Webhooks::new(&a, None, Some("/id")).expect_err(setting);
        assert!(e.0.starts_with(setting), "{}", e.0);
        assert!(!e.0.contains("s3cret"), "{}", e.0);
    }
    assert!(Webhooks::new(
        &crate::upstream::UpstreamArgs::default().job,
        None,
        Some("/id")
    )
    .expect("valid")
    .is_none());
}
