//! Webhooks of the job-shaped APIs, sent the ways the real providers send them:
//!
//! - **predictions** (Replicate): a submit body with `"webhook": "<url>"` gets the finished
//!   prediction (`status` `succeeded` with its `output`, or `failed`) POSTed there when the job
//!   is done, signed the Standard Webhooks way when the simulator has a webhook secret
//!   (`--sim-webhook-secret`, `whsec_<base64>`): `webhook-id`, `webhook-timestamp`,
//!   `webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">`.
//! - **transcripts** (AssemblyAI): a submit body with `"webhook_url"` gets only
//!   `{"transcript_id", "status": "completed"}` ("look now": the result is fetched by a poll),
//!   with the header the submit chose (`webhook_auth_header_name` / `_value`), if any.
//!
//! A job is done by time here (`ms=` in its key, or `--sim-ms`): the job's clock starts at the
//! submit, the webhook goes out when it ends, one try of at most 5 s (the poll is the safety
//! net, as with a real provider), to a loopback URL only. A job done by a number of polls has no
//! time to call at: it sends none. Its first webhook's id is remembered, so
//! `POST /_sim/jobs/{id}/webhook` re-sends it byte for byte (a replay, as a provider's retry is).

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;

use crate::job_book::{Delivery, Form, Job};
use crate::state::SimState;

/// The Standard Webhooks signature of `body` under `secret` (`whsec_<base64>`), sent as
/// message `id` at `timestamp_s`: the `webhook-signature` header's value, `v1,<base64>`.
pub fn standard_signature(secret: &str, id: &str, timestamp_s: i64, body: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD;
    let key = b64
        .decode(secret.strip_prefix("whsec_").unwrap_or(secret))
        .unwrap_or_default();
    let mut mac =
        <Hmac<Sha256> as Mac>::new_from_slice(&key).expect("HMAC takes a key of any length");
    mac.update(format!("{id}.{timestamp_s}.").as_bytes());
    mac.update(body);
    format!("v1,{}", b64.encode(mac.finalize().into_bytes()))
}

/// The Standard Webhooks headers of `body` under `secret`, sent as message `id` at
/// `timestamp_s`.
fn standard_headers(
    secret: &str,
    id: &str,
    timestamp_s: i64,
    body: &[u8],
) -> Vec<(String, String)> {
    vec![
        ("webhook-id".into(), id.to_string()),
        ("webhook-timestamp".into(), timestamp_s.to_string()),
        (
            "webhook-signature".into(),
            standard_signature(secret, id, timestamp_s, body),
        ),
    ]
}

/// The webhook a submit asked for, if its form sends one and its body names a loopback URL:
/// `finished` is the job's last answer in its form's words (predictions), made by the caller.
pub fn plan(job: &Job, submit: &Value, finished: &Value) -> Option<Delivery> {
    let (url, body, headers) = match job.form {
        Form::Prediction => {
            let url = submit.get("webhook")?.as_str()?;
            (url, finished.to_string().into_bytes(), Vec::new())
        }
        Form::Transcript => {
            let url = submit.get("webhook_url")?.as_str()?;
            let body = json!({"transcript_id": job.id, "status": "completed"});
            let header = submit
                .get("webhook_auth_header_name")
                .and_then(Value::as_str)
                .zip(
                    submit
                        .get("webhook_auth_header_value")
                        .and_then(Value::as_str),
                );
            let headers = header
                .map(|(n, v)| vec![(n.to_string(), v.to_string())])
                .unwrap_or_default();
            (url, body.to_string().into_bytes(), headers)
        }
        Form::Operation | Form::LongRunning => return None,
    };
    if !crate::state::is_loopback_http(url) {
        return None;
    }
    Some(Delivery {
        url: url.to_string(),
        body,
        headers,
    })
}

/// Sends `delivery` after `after` (one try), signed as it leaves when the simulator has a
/// webhook secret, and keeps it as sent (for a re-send).
pub async fn send(sim: Arc<SimState>, job_id: String, after: Duration, mut delivery: Delivery) {
    tokio::time::sleep(after).await;
    if let Some(secret) = sim.args.webhook_secret.as_deref() {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        let id = format!("msg_{job_id}");
        let signed = standard_headers(secret, &id, now, &delivery.body);
        delivery.headers.extend(signed);
    }
    sim.jobs.keep_webhook(&job_id, delivery.clone());
    deliver(&sim, &delivery).await;
}

/// One try of `delivery` (5 s at most).
pub async fn deliver(sim: &SimState, delivery: &Delivery) -> Option<u16> {
    let mut call = sim
        .client
        .post(&delivery.url)
        .header("content-type", "application/json")
        .body(delivery.body.clone());
    for (name, value) in &delivery.headers {
        call = call.header(name.as_str(), value.as_str());
    }
    match call.send().await {
        Ok(r) => {
            sim.jobs.webhook_sent();
            Some(r.status().as_u16())
        }
        Err(e) => {
            tracing::debug!(error = %e, "webhook failed");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn signatures_are_the_specifications_own() {
        // The Standard Webhooks specification's example (repoll's verifier is checked against
        // it too: worker/src/upstream/webhook_tests.rs).
        assert_eq!(
            super::standard_signature(
                "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                "msg_p5jXN8AQM9LWM0D4loKWxJek",
                1614265330,
                br#"{"test": 2432232314}"#,
            ),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }
}
