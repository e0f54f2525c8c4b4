//! What an answer means: [`Answer`], the typed [`UpstreamError`], and the pure
//! [`AnswerReader`] that reads a body with the configured JSON pointers and status values.

use std::time::Duration;

use serde_json::Value;

use super::{truncate, Secret, StatusFallback, StatusFrom, UpstreamArgs, MESSAGE_MAX};

/// What the upstream said about a key.
#[derive(Clone, Debug, PartialEq)]
pub enum Answer {
    /// Not done yet; `data` is the partial data (may be `null`), `retry_after` the upstream's
    /// own hint from a `Retry-After` header.
    Processing {
        data: Value,
        retry_after: Option<Duration>,
    },
    /// Done; `data` is the final result.
    Done { data: Value },
    /// The upstream gave up on this key: no point polling again.
    Failed { message: String, data: Value },
    /// A job API took the submit: `job` is the job's reference (its id, or the URL to
    /// follow), to be stored with the task; `retry_after` the upstream's hint for the first
    /// poll. Never read from a poll's answer.
    Submitted {
        job: String,
        retry_after: Option<Duration>,
    },
}

/// Why a poll got no answer.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum UpstreamError {
    #[error("timeout after {after_ms} ms")]
    Timeout { after_ms: u64 },
    #[error("connection failed: {0}")]
    Connect(String),
    /// A non-2xx answer; `message` is the upstream's own (its error pointer, or a short text
    /// body), cut short and with configured secrets masked; `body` the start of the body as it
    /// came, secrets masked ([`AnswerReader::body_start`]), for the admin's task page.
    #[error("HTTP {code}{}", .message.as_ref().map(|m| format!(": {m}")).unwrap_or_default())]
    Status {
        code: u16,
        retry_after: Option<Duration>,
        message: Option<String>,
        body: String,
    },
    #[error("bad body: {0}")]
    BadBody(String),
    /// The query cannot be sent to this upstream at all (e.g. `..` where `{key}` is a path
    /// segment): permanent, the task goes dead with this message.
    #[error("{0}")]
    BadKey(String),
    /// A redirect the client does not follow (to another origin, with user info, or too many
    /// hops): permanent, the task goes dead with the reason, and the target is never called.
    #[error("{0}")]
    Redirect(String),
}

impl UpstreamError {
    /// The upstream's `Retry-After`, if it sent one.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            UpstreamError::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// A 4xx other than 408 (timeout), 409 (conflict: a job API still working on an earlier
    /// submit with the same idempotency key), 425 (too early) and 429 (rate limit) says the
    /// request itself is wrong: asking again the same way cannot succeed, so the task goes dead
    /// at once. A query that cannot be placed in the URL is permanent too.
    pub fn is_permanent(&self) -> bool {
        match self {
            UpstreamError::Status { code, .. } => {
                (400..500).contains(code) && !matches!(code, 408 | 409 | 425 | 429)
            }
            UpstreamError::BadKey(_) | UpstreamError::Redirect(_) => true,
            _ => false,
        }
    }

    /// A short label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            UpstreamError::Timeout { .. } => "timeout",
            UpstreamError::Connect(_) => "connect",
            UpstreamError::Status { .. } => "status",
            UpstreamError::BadBody(_) => "bad_body",
            UpstreamError::BadKey(_) => "bad_key",
            UpstreamError::Redirect(_) => "redirect",
        }
    }
}

/// A setting that cannot work, found when the client is built.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("upstream config: {0}")]
pub struct ConfigError(pub String);

/// How to read an answer body: pure, so it is unit tested without HTTP.
#[derive(Clone, Debug)]
pub struct AnswerReader {
    status_pointer: String,
    data_pointer: String,
    pub(super) error_pointer: String,
    processing: Vec<String>,
    done: Vec<String>,
    failed: Vec<String>,
    missing_status: StatusFallback,
    unknown_status: StatusFallback,
    status_from: StatusFrom,
    /// The configured header values and API key (4 chars or more), masked in messages.
    secrets: Vec<Secret>,
}

impl AnswerReader {
    pub fn new(args: &UpstreamArgs) -> AnswerReader {
        let clean = |v: &[String]| -> Vec<String> {
            v.iter()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect()
        };
        let headers = args
            .headers
            .iter()
            .filter_map(|h| Some(h.split_once(':')?.1.trim()));
        let key = args.api_key.as_ref().map(|k| k.expose().trim());
        AnswerReader {
            status_pointer: args.status_pointer.clone(),
            data_pointer: args.data_pointer.clone(),
            error_pointer: args.error_pointer.clone(),
            processing: clean(&args.processing_values),
            done: clean(&args.done_values),
            failed: clean(&args.failed_values),
            missing_status: args.missing_status,
            unknown_status: args.unknown_status,
            status_from: args.status_from,
            secrets: headers
                .chain(key)
                .filter(|s| s.len() >= 4)
                .map(Secret::from)
                .collect(),
        }
    }

    /// The start of an error answer's body as the task keeps it beside the error: read as
    /// UTF-8 (a broken sequence becomes U+FFFD), configured secrets masked, at most
    /// [`queue::FAILED_BODY_MAX`] bytes cut on a character boundary (the queue's own cut, with
    /// "…"). Only a prefix is looked at, long enough that a secret starting in the kept part
    /// is masked whole.
    pub fn body_start(&self, body: &[u8]) -> String {
        let longest = self
            .secrets
            .iter()
            .map(|s| s.expose().len())
            .max()
            .unwrap_or(0);
        let look = body.len().min(queue::FAILED_BODY_MAX + longest + 4);
        let mut text = String::from_utf8_lossy(&body[..look]).into_owned();
        for secret in &self.secrets {
            text = text.replace(secret.expose(), "***");
        }
        queue::failed_body_start(&text)
    }

    /// An upstream's own message as it is kept (an error answer's body, a "failed" answer's
    /// message): control characters as spaces, configured secrets masked (in case the upstream
    /// quotes the request), trimmed, and cut to [`MESSAGE_MAX`] chars with "…". Only a prefix
    /// of a long text is looked at, long enough that a secret starting in the kept part is
    /// masked whole. None when nothing is left.
    pub fn message(&self, text: &str) -> Option<String> {
        let longest = self
            .secrets
            .iter()
            .map(|s| s.expose().chars().count())
            .max()
            .unwrap_or(0);
        let text = text.trim_start();
        let (prefix, cut) = match text.char_indices().nth(MESSAGE_MAX + longest + 1) {
            Some((i, _)) => (&text[..i], true),
            None => (text, false),
        };
        let mut clean: String = prefix
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        for secret in &self.secrets {
            clean = clean.replace(secret.expose(), "***");
        }
        let clean = clean.trim_end();
        if clean.is_empty() {
            return None;
        }
        let mut kept = truncate(clean, MESSAGE_MAX);
        if cut && !kept.ends_with('…') {
            kept.push('…');
        }
        Some(kept)
    }

    /// Reads a parsed body. A missing or unknown status is a bad body (the API changed or the
    /// pointers are wrong: retrying may help if it was a glitch, the error policy decides),
    /// unless the settings say it means "processing". A status that is not a string (a boolean
    /// `done`, a number) is matched by its JSON text (`true`, `false`, `3`). An error present
    /// beats "done": a Google operation says `"done": true` beside its `error`.
    pub fn read(
        &self,
        body: &Value,
        retry_after: Option<Duration>,
    ) -> Result<Answer, UpstreamError> {
        let data = || {
            body.pointer(&self.data_pointer)
                .cloned()
                .unwrap_or(Value::Null)
        };
        let processing = || Answer::Processing {
            data: data(),
            retry_after,
        };
        let status = match body.pointer(&self.status_pointer) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Null) | None => {
                return match self.missing_status {
                    StatusFallback::Processing => Ok(processing()),
                    StatusFallback::Error => Err(UpstreamError::BadBody(format!(
                        "no status at {}",
                        self.status_pointer
                    ))),
                }
            }
            Some(other) => other.to_string(),
        };
        let is = |set: &[String]| set.iter().any(|v| v.eq_ignore_ascii_case(&status));
        if is(&self.done) {
            match self
                .error_message(body)
                .filter(|_| error_present(body, &self.error_pointer))
            {
                Some(message) => Ok(Answer::Failed {
                    message,
                    data: data(),
                }),
                None => Ok(Answer::Done { data: data() }),
            }
        } else if is(&self.processing) {
            Ok(processing())
        } else if is(&self.failed) {
            let message = self
                .error_message(body)
                .unwrap_or_else(|| format!("status {}", truncate(&status, 80)));
            Ok(Answer::Failed {
                message,
                data: data(),
            })
        } else if self.unknown_status == StatusFallback::Processing {
            Ok(processing())
        } else {
            Err(UpstreamError::BadBody(format!(
                "unknown status {}",
                truncate(&status, 80)
            )))
        }
    }

    /// Reads a 2xx answer: its body by [`AnswerReader::read`], or, when the status comes from
    /// the HTTP code (`REPOLL_UPSTREAM_STATUS_FROM=http`), by that code: 202 still processing
    /// (its body, if any, the partial data), 200 / 201 / 204 done (an empty body is `null`),
    /// an error beside done failed as for a body's status, any other 2xx a bad body.
    pub fn read_answer(
        &self,
        code: u16,
        body: &[u8],
        retry_after: Option<Duration>,
    ) -> Result<Answer, UpstreamError> {
        let parse = |body: &[u8]| -> Result<Value, UpstreamError> {
            serde_json::from_slice(body)
                .map_err(|e| UpstreamError::BadBody(format!("not JSON: {e}")))
        };
        if self.status_from == StatusFrom::Body {
            return self.read(&parse(body)?, retry_after);
        }
        let value = if body.iter().all(u8::is_ascii_whitespace) {
            Value::Null
        } else {
            parse(body)?
        };
        let data = value
            .pointer(&self.data_pointer)
            .cloned()
            .unwrap_or(Value::Null);
        match code {
            202 => Ok(Answer::Processing { data, retry_after }),
            200 | 201 | 204 => match self
                .error_message(&value)
                .filter(|_| error_present(&value, &self.error_pointer))
            {
                Some(message) => Ok(Answer::Failed { message, data }),
                None => Ok(Answer::Done { data }),
            },
            other => Err(UpstreamError::BadBody(format!(
                "HTTP {other} says nothing of the status"
            ))),
        }
    }

    /// The message at the error pointer, bounded here whatever its size (it is stored); None
    /// when there is none (absent, null, or nothing left once cleaned).
    fn error_message(&self, body: &Value) -> Option<String> {
        match body.pointer(&self.error_pointer) {
            Some(Value::String(s)) => self.message(s),
            Some(Value::Null) | None => None,
            Some(other) => self.message(&other.to_string()),
        }
    }
}

/// Whether `body` carries an error beside a "done": anything at the error pointer but null,
/// false, an empty string, object or array (the empty shapes an API sends for "no error").
fn error_present(body: &Value, pointer: &str) -> bool {
    match body.pointer(pointer) {
        None | Some(Value::Null) | Some(Value::Bool(false)) => false,
        Some(Value::String(s)) => !s.trim().is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::args::list;
    use crate::upstream::{parse_retry_after, parse_retry_after_at};
    use serde_json::json;

    fn reader() -> AnswerReader {
        AnswerReader::new(&UpstreamArgs::default())
    }

    #[test]
    fn reads_the_three_answers() {
        let r = reader();
        let ra = Some(Duration::from_secs(2));
        assert_eq!(
            r.read(&json!({"status": "processing", "data": {"k": 1}}), ra),
            Ok(Answer::Processing {
                data: json!({"k": 1}),
                retry_after: ra
            })
        );
        assert_eq!(
            r.read(&json!({"status": "DONE", "data": [1]}), None),
            Ok(Answer::Done { data: json!([1]) })
        );
        assert_eq!(
            r.read(&json!({"status": "failed", "error": "nope"}), None),
            Ok(Answer::Failed {
                message: "nope".into(),
                data: Value::Null
            })
        );
    }

    #[test]
    fn a_failed_answer_message_is_cut_cleaned_and_masked() {
        let args = UpstreamArgs {
            api_key: Some("k3y-s3cret".into()),
            headers: vec!["Authorization: Bearer t0ken".into()],
            ..UpstreamArgs::default()
        };
        let r = AnswerReader::new(&args);
        let failed = |error: Value| match r.read(&json!({"status": "failed", "error": error}), None)
        {
            Ok(Answer::Failed { message, .. }) => message,
            other => panic!("{other:?}"),
        };
        // 3.9 MB of message: 200 chars and "…" (multi-byte chars cut on a boundary).
        let huge = format!("é{}", "x".repeat(3_900_000));
        let m = failed(json!(huge));
        let head: String = m.chars().take(50).collect();
        assert_eq!(m.chars().count(), 201, "{head}…");
        assert!(m.starts_with("éxx") && m.ends_with('…'), "{m}");
        // Secrets masked, also where the cut falls inside one; control characters as spaces.
        let m = failed(json!(format!(
            "{}k3y-s3cret{}",
            "y".repeat(195),
            "z".repeat(99)
        )));
        assert!(!m.contains("k3y"), "{m}");
        assert!(m.ends_with("y***zz…"), "{m}");
        assert_eq!(failed(json!("a\nBearer t0ken\tb")), "a *** b");
        // Not a string: its JSON, bounded the same way; none at all: the status.
        assert_eq!(failed(json!({"code": 7})), r#"{"code":7}"#);
        assert_eq!(failed(json!(null)), "status failed");
        assert_eq!(failed(json!(" \n ")), "status failed");
        assert!(!format!("{r:?}").contains("s3cret"), "{r:?}");
    }

    /// Issue 41's shapes: a boolean status matched by its text, an error beside "done" (a
    /// Google operation), a missing or unknown status read as "processing" when set so, and
    /// `canceled` failed by default (Replicate, Azure).
    #[test]
    fn boolean_missing_unknown_and_errors_beside_done() {
        let google = AnswerReader::new(&UpstreamArgs {
            status_pointer: "/done".into(),
            data_pointer: "/response".into(),
            processing_values: list("false"),
            done_values: list("true"),
            missing_status: StatusFallback::Processing,
            ..UpstreamArgs::default()
        });
        let op = json!({"name": "operations/1", "done": true, "response": {"k": 1}});
        assert_eq!(
            google.read(&op, None),
            Ok(Answer::Done {
                data: json!({"k": 1})
            })
        );
        let running = json!({"name": "operations/1", "metadata": {}});
        assert!(matches!(
            google.read(&running, None),
            Ok(Answer::Processing { .. })
        ));
        assert!(matches!(
            google.read(&json!({"done": false}), None),
            Ok(Answer::Processing { .. })
        ));
        let failed = json!({"done": true, "error": {"code": 3, "message": "bad input"}});
        assert_eq!(
            google.read(&failed, None),
            Ok(Answer::Failed {
                message: r#"{"code":3,"message":"bad input"}"#.into(),
                data: Value::Null
            })
        );
        // "No error" shapes beside done stay done.
        for none in [json!(null), json!(false), json!(""), json!({}), json!([])] {
            let body = json!({"done": true, "error": none, "response": 1});
            assert_eq!(
                google.read(&body, None),
                Ok(Answer::Done { data: json!(1) }),
                "{body}"
            );
        }

        let defaults = reader();
        assert!(matches!(
            defaults.read(&json!({"data": 1}), None),
            Err(UpstreamError::BadBody(_))
        ));
        assert!(matches!(
            defaults.read(&json!({"status": "Accepted"}), None),
            Err(UpstreamError::BadBody(_))
        ));
        assert!(matches!(
            defaults.read(&json!({"status": "canceled"}), None),
            Ok(Answer::Failed { .. })
        ));
        let azure = AnswerReader::new(&UpstreamArgs {
            unknown_status: StatusFallback::Processing,
            ..UpstreamArgs::default()
        });
        assert!(matches!(
            azure.read(&json!({"status": "Accepted"}), None),
            Ok(Answer::Processing { .. })
        ));
        assert!(matches!(
            azure.read(&json!({"status": "Canceled"}), None),
            Ok(Answer::Failed { .. })
        ));
    }

    /// `REPOLL_UPSTREAM_STATUS_FROM=http`: 202 processing, 200/201/204 done, an error beside
    /// done failed, other 2xx a bad body; the body's status is not read at all.
    #[test]
    fn the_status_can_come_from_the_http_code() {
        let r = AnswerReader::new(&UpstreamArgs {
            status_from: StatusFrom::Http,
            ..UpstreamArgs::default()
        });
        assert_eq!(
            r.read_answer(202, b"", None),
            Ok(Answer::Processing {
                data: Value::Null,
                retry_after: None
            })
        );
        assert_eq!(
            r.read_answer(202, br#"{"status": "done", "data": {"p": 1}}"#, None),
            Ok(Answer::Processing {
                data: json!({"p": 1}),
                retry_after: None
            })
        );
        assert_eq!(
            r.read_answer(200, br#"{"data": [1, 2]}"#, None),
            Ok(Answer::Done {
                data: json!([1, 2])
            })
        );
        assert_eq!(
            r.read_answer(204, b"", None),
            Ok(Answer::Done { data: Value::Null })
        );
        assert!(matches!(
            r.read_answer(200, br#"{"error": "quota"}"#, None),
            Ok(Answer::Failed { .. })
        ));
        assert!(matches!(
            r.read_answer(206, b"{}", None),
            Err(UpstreamError::BadBody(_))
        ));
        assert!(matches!(
            r.read_answer(200, b"<html>", None),
            Err(UpstreamError::BadBody(_))
        ));
        // By default the body's status decides, whatever the code.
        assert_eq!(
            reader().read_answer(202, br#"{"status": "done", "data": 3}"#, None),
            Ok(Answer::Done { data: json!(3) })
        );
    }

    #[test]
    fn wrong_shapes_are_bad_bodies() {
        let r = reader();
        for body in [
            json!({"result": 1}),
            json!({"status": "weird"}),
            json!([1, 2]),
        ] {
            assert!(
                matches!(r.read(&body, None), Err(UpstreamError::BadBody(_))),
                "{body}"
            );
        }
    }

    #[test]
    fn custom_pointers_and_values() {
        let args = UpstreamArgs {
            status_pointer: "/job/state".into(),
            data_pointer: "".into(),
            processing_values: list("RUNNING"),
            done_values: list("SUCCEEDED"),
            ..UpstreamArgs::default()
        };
        let r = AnswerReader::new(&args);
        let body = json!({"job": {"state": "SUCCEEDED"}, "rows": 3});
        assert_eq!(r.read(&body, None), Ok(Answer::Done { data: body.clone() }));
    }

    #[test]
    fn permanent_errors() {
        let s = |code| UpstreamError::Status {
            code,
            retry_after: None,
            message: None,
            body: String::new(),
        };
        assert!(s(404).is_permanent());
        assert!(!s(429).is_permanent());
        assert!(!s(503).is_permanent());
        assert_eq!(parse_retry_after(" 3 "), Some(Duration::from_secs(3)));
        // HTTP dates: the delay until then; a past date is "now"; garbage is ignored.
        let now = httpdate::parse_http_date("Wed, 21 Oct 2015 07:28:00 GMT").unwrap();
        assert_eq!(
            parse_retry_after_at("Wed, 21 Oct 2015 07:28:30 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            parse_retry_after_at("Wed, 21 Oct 2015 07:27:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after_at("soon", now), None);
        assert_eq!(parse_retry_after_at("-5", now), None);
    }
}
