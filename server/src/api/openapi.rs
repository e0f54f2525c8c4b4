//! `GET /api/v1/openapi.json`: the API described as OpenAPI 3.1, derived from the code.
//!
//! Why derived (utoipa): the schemas come from the very types the handlers serialise
//! (`QueryView` as `Query`, `SubmitBody`, `ErrorBody` with every `ErrorCode`), so a field or an
//! error code added there is in the document without anyone remembering to write it. The
//! operations are the handlers' `#[utoipa::path]` attributes, beside the code they describe.
//! What a derive cannot know is added here: the query text's pattern, built from the same
//! character table the normalisation refuses (`queue::query_pattern`), and the schema of each
//! event on the live stream (as `x-item-schema`: the document must stay valid OpenAPI 3.1).

use axum::Json;
use serde_json::{json, Value};
use utoipa::OpenApi;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "repoll public API",
        version = "1.0.0",
        description = "Ask a slow asynchronous upstream API through repoll: the first answer comes at once with what is known (partial data when the upstream has some), and the final result is pushed over Server-Sent Events. The same query text (normalised: NFC, trimmed, inner whitespace collapsed) is the same query: concurrent askers share one chain of upstream polls."
    ),
    paths(
        super::queries::submit,
        super::queries::get,
        super::events::events,
        super::callbacks::receive,
        super::webhooks::receive,
        document
    ),
    components(schemas(super::error::ErrorCode))
)]
struct ApiDoc;

/// This document.
#[utoipa::path(
    get,
    path = "/api/v1/openapi.json",
    operation_id = "openapi",
    summary = "This document",
    responses((status = 200, content_type = "application/json", body = Object, description = "OpenAPI 3.1 document."))
)]
pub async fn document() -> Json<Value> {
    Json(spec())
}

/// The document itself.
pub fn spec() -> Value {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or_else(|_| json!({}));
    if let Some(query) = doc.pointer_mut("/components/schemas/SubmitBody/properties/query") {
        query["pattern"] = json!(portable_pattern(&queue::query_pattern()));
    }
    // Each event's data is a Query. OpenAPI 3.2 says so with `itemSchema`, but this document is
    // 3.1 and a 3.1 validator refuses the whole document for that one field (issue 39 row 10):
    // the body stays a string (the SSE text), the description names the schema, and the item
    // schema goes in an extension, which 3.1 allows on a media type.
    if let Some(stream) = doc.pointer_mut(
        "/paths/~1api~1v1~1queries~1{id}~1events/get/responses/200/content/text~1event-stream",
    ) {
        stream["x-item-schema"] = json!({ "$ref": "#/components/schemas/Query" });
    }
    doc
}

/// The query rule's pattern as the document gives it: each `\u{...}` escape (a code point
/// above the BMP) written as the character itself. JSON Schema reads a pattern as ECMA-262 with
/// the `u` flag, where both mean the same; but a validator's regex engine outside JavaScript
/// (Python's `re`, under openapi-spec-validator) knows no `\u{...}` and refuses the whole
/// document (issue 39 row 10). A literal character reads alike in every Unicode-aware engine.
fn portable_pattern(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len());
    let mut rest = pattern;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let escape = &rest[at..];
        let braced = escape
            .strip_prefix("\\u{")
            .and_then(|hex| hex.split_once('}'))
            .and_then(|(hex, after)| {
                let c = char::from_u32(u32::from_str_radix(hex, 16).ok()?)?;
                Some((c, after))
            });
        match braced {
            Some((c, after)) => {
                out.push(c);
                rest = after;
            }
            // Any other escape (`\\`, `\S`, `\uFEFF`) is kept whole, so its second character
            // is never read as the start of an escape.
            None => {
                let len = escape[1..].chars().next().map_or(0, char::len_utf8);
                out.push_str(&escape[..1 + len]);
                rest = &escape[1 + len..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ErrorCode;

    fn schema<'a>(doc: &'a Value, name: &str) -> &'a Value {
        doc.pointer(&format!("/components/schemas/{name}"))
            .unwrap_or_else(|| panic!("no schema {name}: {doc:#}"))
    }

    /// The `Query` schema has exactly the fields a serialised view has, all required (every
    /// field is always present, null when unknown), and the status values the type has.
    #[test]
    fn the_query_schema_is_the_view_the_api_sends() {
        let doc = spec();
        assert!(
            doc["openapi"].as_str().unwrap().starts_with("3.1"),
            "{doc:#}"
        );
        let q = schema(&doc, "Query");
        let view = app::query_view::QueryView {
            id: model::TaskId::of_query("x"),
            query: "x".into(),
            upstream: "default".into(),
            status: app::query_view::QueryStatus::Processing,
            partial: None,
            result: None,
            error: None,
            polls: 0,
            next_poll_at: None,
            created_at: 0,
            updated_at: 0,
            completed_at: None,
            as_of: 0,
            freshness: None,
            age_ms: None,
            fresh_until: None,
            stale_reason: None,
            refreshing: false,
        };
        let sent = serde_json::to_value(&view).unwrap();
        let mut sent_keys: Vec<&String> = sent.as_object().unwrap().keys().collect();
        let mut props: Vec<&String> = q["properties"].as_object().unwrap().keys().collect();
        let mut required: Vec<&str> = q["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        sent_keys.sort();
        props.sort();
        required.sort();
        assert_eq!(sent_keys, props);
        assert_eq!(
            sent_keys.iter().map(|k| k.as_str()).collect::<Vec<_>>(),
            required
        );
        let id = &q["properties"]["id"];
        let id = if id["$ref"].is_string() {
            schema(
                &doc,
                id["$ref"].as_str().unwrap().rsplit('/').next().unwrap(),
            )
        } else {
            id
        };
        assert_eq!(id["pattern"], "^[0-9a-f]{32}$", "{id:#}");
        let status = doc.to_string();
        for s in ["processing", "done", "failed"] {
            assert!(status.contains(&format!("\"{s}\"")), "status {s} missing");
        }
    }

    /// Every error code the server can send is listed, spelled as it is sent.
    #[test]
    fn every_error_code_is_documented_as_sent() {
        let doc = spec();
        let listed: Vec<&str> = schema(&doc, "ErrorCode")["enum"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        for code in ErrorCode::ALL {
            let sent = serde_json::to_value(code).unwrap();
            assert_eq!(sent, code.as_str());
            assert!(
                listed.contains(&code.as_str()),
                "{code:?} not in {listed:?}"
            );
        }
        assert_eq!(listed.len(), ErrorCode::ALL.len());
    }

    /// The document's pattern is the API's, each `\u{...}` written as its character; every
    /// other escape is kept as it was, a doubled backslash included.
    #[test]
    fn the_pattern_is_written_without_braced_escapes() {
        let rule = queue::query_pattern();
        assert!(rule.contains("\\u{E0000}"), "{rule}");
        let shown = portable_pattern(&rule);
        assert!(!shown.contains("\\u{"), "{shown}");
        assert!(shown.contains("\u{E0000}-\u{E00FF}") && shown.contains("\\uFEFF"));
        let back: String = shown
            .chars()
            .map(|c| match c as u32 {
                u if u > 0xFFFF => format!("\\u{{{u:X}}}"),
                _ => c.to_string(),
            })
            .collect();
        assert_eq!(back, rule);
        assert_eq!(
            portable_pattern(r"a\\u{41}\u{1F3F4}\S"),
            "a\\\\u{41}\u{1F3F4}\\S"
        );
    }

    #[test]
    fn the_submit_body_carries_the_query_rules() {
        let doc = spec();
        let body = schema(&doc, "SubmitBody");
        assert_eq!(
            body["properties"]["query"]["pattern"],
            portable_pattern(&queue::query_pattern())
        );
        // `query` or `input`, one of the two: neither is required alone.
        assert_eq!(body["required"], json!(null), "{body}");
        assert_eq!(
            body["properties"]["input"]["type"],
            json!(["object", "null"]),
            "{body}"
        );
        assert!(doc.to_string().contains("\"background\""));
    }
}
