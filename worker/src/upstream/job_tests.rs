//! Unit tests of [`super`]: settings checked at start, URLs built, the origin guard.

use super::*;

fn args(submit: &str, poll: &str) -> JobArgs {
    JobArgs {
        submit_url: Some(submit.into()),
        poll_url: Some(poll.into()),
        ..crate::upstream::UpstreamArgs::default().job
    }
}

#[test]
fn no_submit_url_is_the_repeating_kind() {
    let a = crate::upstream::UpstreamArgs::default().job;
    assert!(JobApi::new(&a).expect("valid").is_none());
}

#[test]
fn settings_that_cannot_work_stop_the_start_naming_the_setting() {
    for (a, names) in [
        (args("not a url", "body:/urls/get"), "SUBMIT_URL"),
        (args("ftp://h/jobs", "body:/urls/get"), "SUBMIT_URL"),
        (args("http://h/jobs", ""), "POLL_URL"),
        (args("http://h/jobs", "http://h/jobs/x"), "POLL_URL"),
        (args("http://h/jobs", "body:urls"), "POLL_URL"),
        (args("http://h/jobs", "http://other/jobs/{job}"), "POLL_URL"),
        (
            JobArgs {
                submit_body: Some("{\"a\": {key}}".into()),
                ..args("http://h/j", "body:/u")
            },
            "SUBMIT_BODY",
        ),
        (
            JobArgs {
                allowed_origins: vec!["https://s3.example/bucket".into()],
                ..args("http://h/j", "body:/u")
            },
            "ALLOWED_ORIGINS",
        ),
    ] {
        let e = JobApi::new(&a).expect_err("refused");
        assert!(e.0.contains(names), "{e} should name {names}");
    }
}

#[test]
fn one_job_one_idempotency_key_a_new_life_another() {
    let api = JobApi::new(&args("http://h/jobs", "body:/urls/get"))
        .unwrap()
        .unwrap();
    let k = api.idempotency_key("q", "t1", 1000);
    assert_eq!(k, api.idempotency_key("q", "t1", 1000), "stable");
    assert_ne!(k, api.idempotency_key("q", "t1", 1001), "a new life");
    assert_ne!(k, api.idempotency_key("q", "t2", 1000), "another task");
    assert_eq!(k.len(), 36);
    assert_eq!(&k[14..15], "8", "version 8: {k}");
    let with_secret = JobApi::new(&JobArgs {
        idempotency_secret: Some("deployment secret".into()),
        ..args("http://h/jobs", "body:/urls/get")
    })
    .unwrap()
    .unwrap();
    assert_ne!(
        k,
        with_secret.idempotency_key("q", "t1", 1000),
        "the secret is mixed in"
    );
}

#[test]
fn the_body_template_fills_whole_values_and_stays_json() {
    let api = JobApi::new(&JobArgs {
        submit_body: Some(
            r#"{"input": {"q": "{key}", "note": "asked: {key}"}, "webhook": "{callback_url}", "n": 1}"#.into(),
        ),
        ..args("http://h/jobs", "body:/urls/get")
    })
    .unwrap()
    .unwrap();
    let body = api
        .submit_body("say \"hi\" {x}", "http://cb/1", "k")
        .unwrap();
    let v: Value = serde_json::from_slice(&body).expect("JSON");
    assert_eq!(v["input"]["q"], "say \"hi\" {x}");
    assert_eq!(v["input"]["note"], "asked: say \"hi\" {x}");
    assert_eq!(v["webhook"], "http://cb/1");
    assert_eq!(v["n"], 1);
    assert_eq!(
        body,
        api.submit_body("say \"hi\" {x}", "http://cb/1", "k")
            .unwrap(),
        "byte-identical"
    );
}

#[test]
fn job_urls_from_answers_pass_the_origin_guard() {
    let api = JobApi::new(&JobArgs {
        allowed_origins: vec!["https://store.example".into()],
        ..args(
            "http://api.example:8080/v1/jobs",
            "header:Operation-Location",
        )
    })
    .unwrap()
    .unwrap();
    let submit = api.submit_url("k", "", "i").unwrap();
    let mut h = HeaderMap::new();
    for (loc, ok) in [
        ("/v1/ops/1", true),
        ("http://api.example:8080/v1/ops/2", true),
        ("https://store.example/x?sig=1", true),
        ("http://api.example:9090/v1/ops/3", false),
        ("http://169.254.169.254/latest", false),
        ("http://user:pw@api.example:8080/v1/ops/4", false),
        ("file:///etc/passwd", false),
    ] {
        h.insert("operation-location", loc.parse().unwrap());
        let r = api.job_from_answer(&submit, &h, b"");
        assert_eq!(r.is_ok(), ok, "{loc}: {r:?}");
        if let Err(e) = r {
            assert!(e.is_permanent(), "{e}");
        }
    }
    let own = Url::parse("http://api.example:8080/v1/ops/1").unwrap();
    let storage = Url::parse("https://store.example/x").unwrap();
    assert!(api.sends_credentials(&own) && !api.sends_credentials(&storage));
}

#[test]
fn a_job_id_goes_into_the_poll_template_slashes_kept_dots_refused() {
    let api = JobApi::new(&args("http://h/v1/models/m:run", "http://h/v1/{job}"))
        .unwrap()
        .unwrap();
    let submit = api.submit_url("k", "", "i").unwrap();
    let job = api
        .job_from_answer(&submit, &HeaderMap::new(), br#"{"id": "operations/ab c"}"#)
        .unwrap();
    assert_eq!(
        api.poll_url(&job).unwrap().as_str(),
        "http://h/v1/operations/ab%20c"
    );
    assert!(api.poll_url("../admin").is_err());
    let numeric = api
        .job_from_answer(&submit, &HeaderMap::new(), br#"{"id": 42}"#)
        .unwrap();
    assert_eq!(numeric, "42");
    assert!(api
        .job_from_answer(&submit, &HeaderMap::new(), br#"{"other": 1}"#)
        .is_err());
}

#[test]
fn an_input_goes_in_whole_where_the_body_says_input() {
    let a = JobArgs {
        submit_body: Some(r#"{"input": "{input}", "note": "for {input}", "q": "{key}"}"#.into()),
        ..args("https://api.example/v1/jobs", "body:/urls/get")
    };
    let api = JobApi::new(&a).expect("valid").expect("job api");
    let input =
        model::canonical_input(&serde_json::json!({"prompt": "a  cat", "n": 2})).expect("input");
    let body: Value =
        serde_json::from_slice(&api.submit_body(&input, "", "k").expect("a body")).expect("json");
    assert_eq!(
        body["input"],
        serde_json::json!({"n": 2, "prompt": "a  cat"})
    );
    assert_eq!(body["note"], format!("for {input}"));
    assert_eq!(body["q"], input.as_str());
    // A plain query where an input is asked for goes in as a string.
    let body: Value =
        serde_json::from_slice(&api.submit_body("a cat", "", "k").expect("a body")).expect("json");
    assert_eq!(body["input"], "a cat");
}
