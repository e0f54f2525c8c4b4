//! Issue 39 row 10: the OpenAPI document served at `/api/v1/openapi.json` is valid OpenAPI 3.1,
//! the version it declares. It once used `itemSchema` (an OpenAPI 3.2 keyword) on the live
//! stream, and a validating client generator refused the whole document.
//!
//! This test reads the document through the real router and checks the objects where 3.2 added
//! keywords (media types, path items) hold only what 3.1 allows. The full check is a maintained
//! validator: `scripts/tests/openapi-check.sh` runs this test with `REPOLL_OPENAPI_OUT` set (the
//! document is written there), validates the file with `openapi-spec-validator`, generates a
//! TypeScript client from it and compiles it; `end2end/tests/api_client.spec.ts` makes a call.

use crate::common;
use common::api::*;

use serde_json::Value;

/// The fields OpenAPI 3.1 allows on a Media Type Object (4.8.14); anything else but an `x-`
/// extension is refused by a 3.1 validator (3.2 adds `itemSchema`, `itemEncoding`,
/// `prefixEncoding`).
const MEDIA_TYPE_FIELDS: &[&str] = &["schema", "example", "examples", "encoding"];

/// The fields OpenAPI 3.1 allows on a Path Item Object (4.8.9); 3.2 adds `query` and
/// `additionalOperations`.
const PATH_ITEM_FIELDS: &[&str] = &[
    "$ref",
    "summary",
    "description",
    "get",
    "put",
    "post",
    "delete",
    "options",
    "head",
    "patch",
    "trace",
    "servers",
    "parameters",
];

fn allowed(key: &str, fields: &[&str]) -> bool {
    key.starts_with("x-") || fields.contains(&key)
}

/// Every `content` map's media types anywhere under `v` (responses, request bodies,
/// parameters), with a JSON pointer to each, for the failure message.
fn media_types<'a>(v: &'a Value, at: String, out: &mut Vec<(String, &'a Value)>) {
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                let here = format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
                if k == "content" {
                    if let Some(types) = child.as_object() {
                        for (mt, obj) in types {
                            out.push((format!("{here}/{mt}"), obj));
                        }
                    }
                }
                media_types(child, here, out);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                media_types(child, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

/// Every string under a key named `key`, with its pointer.
fn strings_named<'a>(key: &str, v: &'a Value, at: String, out: &mut Vec<(String, &'a str)>) {
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                let here = format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
                match child.as_str() {
                    Some(s) if k == key => out.push((here, s)),
                    _ => strings_named(key, child, here, out),
                }
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                strings_named(key, child, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

#[tokio::test]
async fn the_served_document_is_valid_openapi_3_1() {
    let env = Env::start(Opts::default()).await;
    let r = env.get("/api/v1/openapi.json").await;
    assert_eq!(r.status, 200, "{}", r.body);
    let doc = r.json.clone();
    env.stop().await;

    // The script's copy first: a document this test refuses is still there to read.
    if let Some(out) = std::env::var_os("REPOLL_OPENAPI_OUT") {
        let out = std::path::PathBuf::from(out);
        if let Some(dir) = out.parent() {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(&out, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
        eprintln!("openapi document written to {}", out.display());
    }

    assert_eq!(doc["openapi"].as_str().map(|v| &v[..4]), Some("3.1."));

    let mut found = Vec::new();
    media_types(&doc, String::new(), &mut found);
    assert!(found.len() > 10, "media types found: {}", found.len());
    let mut bad = Vec::new();
    for (at, obj) in &found {
        let keys = obj.as_object().expect("a media type is an object").keys();
        for k in keys.filter(|k| !allowed(k, MEDIA_TYPE_FIELDS)) {
            bad.push(format!("{at}: {k}"));
        }
    }
    // A pattern in the `u` flag's `\u{...}` escapes: ECMA-262 reads it, the validator's regex
    // engine (Python's `re`) refuses it, and the document with it.
    let mut patterns = Vec::new();
    strings_named("pattern", &doc, String::new(), &mut patterns);
    assert!(!patterns.is_empty(), "the query's pattern is documented");
    for (at, pattern) in patterns {
        if pattern.contains("\\u{") {
            bad.push(format!("{at}: a \\u{{...}} escape"));
        }
    }
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for k in item.as_object().unwrap().keys() {
            if !allowed(k, PATH_ITEM_FIELDS) {
                bad.push(format!("/paths/{path}: {k}"));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "fields OpenAPI 3.1 does not allow (a 3.1 validator refuses the document): {bad:?}"
    );

    // The live stream still says what each event carries, in a 3.1-valid way: a string body
    // (the SSE text), a description naming the Query schema, and the item schema as an
    // extension for tools that read it.
    let ok = &doc["paths"]["/api/v1/queries/{id}/events"]["get"]["responses"]["200"];
    let stream = &ok["content"]["text/event-stream"];
    assert_eq!(stream["schema"]["type"], "string", "{stream:#}");
    assert_eq!(
        stream["x-item-schema"]["$ref"], "#/components/schemas/Query",
        "{stream:#}"
    );
    let said = ok["description"].as_str().unwrap_or_default();
    assert!(said.contains("#/components/schemas/Query"), "{said}");
}

/// What the document lists: every endpoint, the answers each gives, the schemas the API sends,
/// and the query rule and length the API applies.
#[tokio::test]
async fn openapi_document_lists_every_endpoint() {
    let env = Env::start(Opts::default()).await;
    let r = env.get("/api/v1/openapi.json").await;
    assert_eq!(r.status, 200);
    let doc = &r.json;
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let paths = doc["paths"].as_object().unwrap();
    for p in [
        "/api/v1/queries",
        "/api/v1/queries/{id}",
        "/api/v1/queries/{id}/events",
        "/api/v1/openapi.json",
    ] {
        assert!(paths.contains_key(p), "{p} documented");
    }
    let post = &doc["paths"]["/api/v1/queries"]["post"]["responses"];
    for code in ["200", "202", "400", "413", "415", "422", "429", "503"] {
        assert!(post.get(code).is_some(), "POST documents {code}");
    }
    for schema in [
        "Query",
        "Error",
        "SubmitBody",
        "CallbackAck",
        "CallbackOutcome",
    ] {
        assert!(
            doc["components"]["schemas"].get(schema).is_some(),
            "{schema}"
        );
    }
    // Every answer the callback endpoint gives, and an ack that says how the task ended.
    let callback = &doc["paths"]["/api/v1/callbacks/{token}"]["post"]["responses"];
    for code in ["200", "202", "400", "404", "413", "422", "503"] {
        assert!(callback.get(code).is_some(), "callbacks document {code}");
    }
    let ack = &doc["components"]["schemas"]["CallbackAck"]["properties"];
    assert!(
        ack.get("completed").is_some() && ack.get("outcome").is_some(),
        "{ack}"
    );
    // The document states the same character rule and length the API applies.
    let query = &doc["components"]["schemas"]["SubmitBody"]["properties"]["query"];
    assert_eq!(
        query["maxLength"].as_u64(),
        Some(model::MAX_QUERY_CHARS as u64)
    );
    // (Code points above the BMP written as themselves, not `\u{...}`: openapi.rs says why.)
    let shown: String = query["pattern"]
        .as_str()
        .unwrap_or_default()
        .chars()
        .map(|c| match c as u32 {
            u if u > 0xFFFF => format!("\\u{{{u:X}}}"),
            _ => c.to_string(),
        })
        .collect();
    assert_eq!(shown, queue::query_pattern());
    let stream = &doc["paths"]["/api/v1/queries/{id}/events"]["get"]["responses"]["200"]["content"]
        ["text/event-stream"];
    assert_eq!(
        stream["x-item-schema"]["$ref"],
        "#/components/schemas/Query"
    );
    env.stop().await;
}
