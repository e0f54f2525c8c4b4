//! The simulator's book of jobs ([`JobBook`]): every job its job-shaped APIs made, found by id
//! or by idempotency key, bounded, and the counters `GET /_sim/jobs` shows. Data only: the
//! HTTP side is [`crate::jobs`].

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use axum::body::Bytes;
use serde::Serialize;
use serde_json::Value;

/// Longest idempotency key remembered (longer ones are refused with 400).
pub const MAX_IDEMPOTENCY_KEY: usize = 255;

/// Which API form a job was submitted through: it decides how the job's answers look.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Form {
    Prediction,
    Operation,
    LongRunning,
    Transcript,
}

#[derive(Clone, Debug, Serialize)]
pub struct Job {
    pub id: String,
    pub form: Form,
    pub key: String,
    /// The idempotency key it was made with ("" = none).
    pub idempotency_key: String,
    pub canceled: bool,
    /// Cancel calls it received (a repeat is answered as the first).
    pub cancels: u64,
    #[serde(skip)]
    pub(crate) body: Bytes,
    /// Its webhook as first sent (what `POST /_sim/jobs/{id}/webhook` sends again).
    #[serde(skip)]
    pub(crate) webhook: Option<Delivery>,
}

#[derive(Debug, Default)]
struct Book {
    next: u64,
    submits: u64,
    created: u64,
    cancels: u64,
    webhooks: u64,
    jobs: HashMap<String, Job>,
    order: VecDeque<String>,
    by_idempotency_key: HashMap<String, String>,
}

/// Every job the simulator made, and the counters `GET /_sim/jobs` shows.
#[derive(Debug, Default)]
pub struct JobBook {
    inner: Mutex<Book>,
}

/// The body of `GET /_sim/jobs`.
#[derive(Debug, Serialize, serde::Deserialize, Clone, PartialEq, Eq)]
pub struct JobStats {
    /// Submits received (a repeat with a known idempotency key included).
    pub submits: u64,
    /// Jobs made: what a real API would bill.
    pub created: u64,
    /// Cancel calls received.
    pub cancels: u64,
    /// Webhooks that reached their URL (any HTTP answer), re-sends included.
    #[serde(default)]
    pub webhooks: u64,
    pub jobs: Vec<JobLine>,
}

#[derive(Debug, Serialize, serde::Deserialize, Clone, PartialEq, Eq)]
pub struct JobLine {
    pub id: String,
    pub key: String,
    pub idempotency_key: String,
    pub canceled: bool,
    pub cancels: u64,
}

/// A webhook to send: where, what, and the headers that prove it ([`crate::webhooks`]).
#[derive(Clone, Debug)]
pub struct Delivery {
    pub url: String,
    pub body: Vec<u8>,
    pub headers: Vec<(String, String)>,
}

/// What a submit did.
pub(crate) enum Submitted {
    New(Job),
    Again(Job),
    /// The idempotency key was used before with another body.
    Conflict,
}

impl JobBook {
    fn lock(&self) -> std::sync::MutexGuard<'_, Book> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn submit(&self, form: Form, body: Bytes, idem: &str, max_jobs: usize) -> Submitted {
        let mut b = self.lock();
        b.submits += 1;
        if !idem.is_empty() {
            if let Some(job) = b.by_idempotency_key.get(idem).and_then(|id| b.jobs.get(id)) {
                return if job.body == body {
                    Submitted::Again(job.clone())
                } else {
                    Submitted::Conflict
                };
            }
        }
        while b.jobs.len() >= max_jobs.max(1) {
            let Some(oldest) = b.order.pop_front() else {
                break;
            };
            if let Some(gone) = b.jobs.remove(&oldest) {
                b.by_idempotency_key.remove(&gone.idempotency_key);
            }
        }
        b.next += 1;
        b.created += 1;
        let id = format!("j{:x}{:04x}", b.next, rand::random::<u16>());
        let job = Job {
            id: id.clone(),
            form,
            key: key_of(&body),
            idempotency_key: idem.to_string(),
            canceled: false,
            cancels: 0,
            body,
            webhook: None,
        };
        if !idem.is_empty() {
            b.by_idempotency_key.insert(idem.to_string(), id.clone());
        }
        b.order.push_back(id.clone());
        b.jobs.insert(id, job.clone());
        Submitted::New(job)
    }

    pub(crate) fn get(&self, id: &str) -> Option<Job> {
        self.lock().jobs.get(id).cloned()
    }

    pub(crate) fn cancel(&self, id: &str) -> Option<Job> {
        let mut b = self.lock();
        b.cancels += 1;
        let job = b.jobs.get_mut(id)?;
        job.canceled = true;
        job.cancels += 1;
        Some(job.clone())
    }

    /// Keeps `id`'s webhook as first sent.
    pub(crate) fn keep_webhook(&self, id: &str, delivery: Delivery) {
        if let Some(job) = self.lock().jobs.get_mut(id) {
            job.webhook.get_or_insert(delivery);
        }
    }

    /// Counts a webhook that reached its URL.
    pub(crate) fn webhook_sent(&self) {
        self.lock().webhooks += 1;
    }

    pub fn stats(&self) -> JobStats {
        let b = self.lock();
        JobStats {
            submits: b.submits,
            created: b.created,
            cancels: b.cancels,
            webhooks: b.webhooks,
            jobs: b
                .order
                .iter()
                .filter_map(|id| b.jobs.get(id))
                .map(|j| JobLine {
                    id: j.id.clone(),
                    key: j.key.clone(),
                    idempotency_key: j.idempotency_key.clone(),
                    canceled: j.canceled,
                    cancels: j.cancels,
                })
                .collect(),
        }
    }

    pub fn reset(&self) {
        *self.lock() = Book::default();
    }
}

/// Where a submit body holds the question, in the forms the real APIs use (the first found
/// is the job's key).
const KEY_POINTERS: [&str; 6] = [
    "/input/q",
    "/input/prompt",
    "/q",
    "/audio_url",
    "/urlSource",
    "/instances/0/prompt",
];

/// The job's key: the first string at [`KEY_POINTERS`], else the body's text.
pub(crate) fn key_of(body: &[u8]) -> String {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    parsed
        .as_ref()
        .and_then(|v| KEY_POINTERS.iter().find_map(|p| v.pointer(p)?.as_str()))
        .map(str::to_string)
        .unwrap_or_else(|| String::from_utf8_lossy(body).into_owned())
}
