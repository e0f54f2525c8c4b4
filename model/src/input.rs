//! Structured input: a JSON object asked as a query (a job API's submit body takes it whole,
//! as `{input}`).
//!
//! An input *is* its canonical text, RFC 8785 (JSON Canonicalization Scheme: members sorted by
//! their UTF-16 code units, no insignificant whitespace, numbers in ECMAScript's shortest form,
//! strings escaped minimally), so key order and number spelling never make two tasks of one
//! question: `{"b": 1.0, "a": "x"}` and `{"a":"x","b":1}` are the query `{"a":"x","b":1}`. The
//! canonical text is what the queue keys, stores and shows (as text), and what
//! [`crate::normalise_query`] lets through unchanged; any other text is a plain query.
//!
//! Bounded like a query: at most [`MAX_INPUT_BYTES`] of canonical text (a query's 512
//! characters of at most 4 bytes each), [`MAX_INPUT_DEPTH`] levels of nesting and
//! [`MAX_INPUT_MEMBERS`] values in all; the characters inside its strings are the caller's
//! (escaped in the canonical text, so no control character reaches a log or a page raw).

use serde_json::Value;

use crate::query_chars::InvalidQuery;

/// Longest canonical input, in bytes.
pub const MAX_INPUT_BYTES: usize = 2048;
/// Deepest nesting of objects and arrays (the input object itself is level 1).
pub const MAX_INPUT_DEPTH: usize = 8;
/// Most values in an input, every member and array item counted.
pub const MAX_INPUT_MEMBERS: usize = 128;

/// The canonical text of `input` (RFC 8785), or why it is refused: not an object, or over a
/// bound (the message names it).
pub fn canonical_input(input: &Value) -> Result<String, InvalidQuery> {
    if !input.is_object() {
        return Err(InvalidQuery("input must be a JSON object".into()));
    }
    let (depth, members) = shape(input);
    if depth > MAX_INPUT_DEPTH {
        return Err(InvalidQuery(format!(
            "input is nested {depth} levels deep, at most {MAX_INPUT_DEPTH} allowed"
        )));
    }
    if members > MAX_INPUT_MEMBERS {
        return Err(InvalidQuery(format!(
            "input holds {members} values, at most {MAX_INPUT_MEMBERS} allowed"
        )));
    }
    let text = serde_json_canonicalizer::to_string(input)
        .map_err(|e| InvalidQuery(format!("input cannot be canonicalised: {e}")))?;
    if text.len() > MAX_INPUT_BYTES {
        return Err(InvalidQuery(format!(
            "input is {} bytes in canonical form, at most {MAX_INPUT_BYTES} allowed",
            text.len()
        )));
    }
    Ok(text)
}

/// The input `text` is the canonical text of, if it is one (a JSON object within the bounds,
/// written exactly as [`canonical_input`] writes it); `None` for a plain query.
pub fn parse_input(text: &str) -> Option<Value> {
    if !text.starts_with('{') || text.len() > MAX_INPUT_BYTES {
        return None;
    }
    let value: Value = serde_json::from_str(text).ok()?;
    (canonical_input(&value).ok()? == text).then_some(value)
}

/// How deep `v` nests (a scalar is 0) and how many values it holds below itself.
fn shape(v: &Value) -> (usize, usize) {
    let children: Box<dyn Iterator<Item = &Value>> = match v {
        Value::Object(m) => Box::new(m.values()),
        Value::Array(a) => Box::new(a.iter()),
        _ => return (0, 0),
    };
    let (mut depth, mut members) = (0, 0);
    for child in children {
        let (d, m) = shape(child);
        depth = depth.max(d);
        members += 1 + m;
    }
    (depth + 1, members)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_order_and_number_spelling_make_one_input() {
        let a = canonical_input(&json!({"b": 1.0, "a": "x", "c": {"z": [1e2, 0.5], "y": null}}));
        let b: Value =
            serde_json::from_str(r#"{"c":{"y":null,"z":[100,5e-1]},"a":"x","b":1}"#).expect("json");
        assert_eq!(a, canonical_input(&b));
        assert_eq!(
            a.as_deref(),
            Ok(r#"{"a":"x","b":1,"c":{"y":null,"z":[100,0.5]}}"#)
        );
    }

    #[test]
    fn the_canonical_text_is_an_input_and_nothing_else_is() {
        let text = canonical_input(&json!({"prompt": "a  cat\n", "n": 2})).expect("ok");
        assert_eq!(text, r#"{"n":2,"prompt":"a  cat\n"}"#);
        assert_eq!(
            parse_input(&text),
            Some(json!({"n": 2, "prompt": "a  cat\n"}))
        );
        for plain in [
            r#"{ "n": 2 }"#,
            r#"{"prompt":"x","n":2}"#,
            "[1]",
            "{",
            "cat",
            r#"{}x"#,
        ] {
            assert_eq!(parse_input(plain), None, "{plain}");
        }
        assert_eq!(parse_input("{}"), Some(json!({})));
    }

    #[test]
    fn every_bound_is_named_when_crossed() {
        let deep = (0..=MAX_INPUT_DEPTH).fold(json!(1), |v, _| json!({ "k": v }));
        let e = canonical_input(&deep).expect_err("too deep");
        assert!(e.0.contains("levels deep"), "{}", e.0);
        let ok = (0..MAX_INPUT_DEPTH).fold(json!(1), |v, _| json!({ "k": v }));
        assert!(canonical_input(&ok).is_ok());
        let many: serde_json::Map<String, Value> = (0..=MAX_INPUT_MEMBERS)
            .map(|i| (format!("k{i}"), json!(i)))
            .collect();
        let e = canonical_input(&Value::Object(many)).expect_err("too many");
        assert!(e.0.contains("values"), "{}", e.0);
        let big = json!({ "k": "x".repeat(MAX_INPUT_BYTES) });
        let e = canonical_input(&big).expect_err("too big");
        assert!(e.0.contains("bytes"), "{}", e.0);
        let e = canonical_input(&json!(["not", "an", "object"])).expect_err("array");
        assert!(e.0.contains("object"), "{}", e.0);
    }
}
