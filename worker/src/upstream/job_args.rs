//! A job API's settings ([`JobArgs`], part of [`super::UpstreamArgs`]): flags, each with a
//! `REPOLL_UPSTREAM_*` variable and a key of an `[upstreams.NAME]` section. What they mean and
//! how they are checked: [`super::JobApi`].

use std::fmt;

use super::Secret;

/// Settings of a job API (part of [`super::UpstreamArgs`]). Without a submit URL the upstream
/// is of the repeating kind and none of these is read.
#[derive(clap::Args, Clone)]
pub struct JobArgs {
    /// Where a task's job is submitted: a URL template that may hold `{key}` (the query,
    /// percent-encoded), `{callback_url}` and `{idempotency_key}`. Setting it makes the
    /// upstream of the job kind (then REPOLL_UPSTREAM_URL is not set).
    #[arg(
        long = "upstream-submit-url",
        env = "REPOLL_UPSTREAM_SUBMIT_URL",
        hide_env_values = true
    )]
    pub submit_url: Option<String>,
    /// HTTP method of the submit.
    #[arg(
        long = "upstream-submit-method",
        env = "REPOLL_UPSTREAM_SUBMIT_METHOD",
        default_value = "POST"
    )]
    pub submit_method: String,
    /// The submit's JSON body, as a template: a string value `"{key}"` becomes the query,
    /// `"{input}"` its structured input (a JSON object; a plain query as a string),
    /// `"{callback_url}"` the task's callback URL, `"{idempotency_key}"` its idempotency key (a
    /// placeholder inside a longer string is inserted as text). Parsed at start. Unset: no body.
    #[arg(
        long = "upstream-submit-body",
        env = "REPOLL_UPSTREAM_SUBMIT_BODY",
        hide_env_values = true
    )]
    pub submit_body: Option<String>,
    /// Headers sent with the submit only, as "Name: value" (e.g. Replicate's `Cancel-After`,
    /// `Prefer: wait`); repeat the flag, or separate them with ';' in the variable. Beside
    /// REPOLL_UPSTREAM_HEADERS, which go to every call.
    #[arg(
        long = "upstream-submit-header",
        env = "REPOLL_UPSTREAM_SUBMIT_HEADERS",
        value_delimiter = ';',
        hide_env_values = true,
        hide_default_value = true
    )]
    pub submit_headers: Vec<String>,
    /// JSON pointer to the job's id in the submit's answer (used by a `{job}` poll URL).
    #[arg(
        long = "upstream-job-pointer",
        env = "REPOLL_UPSTREAM_JOB_POINTER",
        default_value = "/id"
    )]
    pub job_pointer: String,
    /// Where the job is followed: a URL template with `{job}` (the id, inserted as it is, `/`
    /// kept), `header:<Name>` (a header of the submit's answer, e.g.
    /// `header:Operation-Location`) or `body:<pointer>` (a URL in its body, e.g.
    /// `body:/urls/get`). Needed with a submit URL.
    #[arg(
        long = "upstream-poll-url",
        env = "REPOLL_UPSTREAM_POLL_URL",
        hide_env_values = true
    )]
    pub poll_url: Option<String>,
    /// Where a done job's result is fetched, if not in the poll's answer: `body:<pointer>` or
    /// `header:<Name>` of the final poll answer (e.g. `body:/resourceLocation`), or a URL
    /// template with `{job}`. One `GET` there gives the final data. Unset: the poll's answer
    /// holds it.
    #[arg(
        long = "upstream-result-url",
        env = "REPOLL_UPSTREAM_RESULT_URL",
        hide_env_values = true
    )]
    pub result_url: Option<String>,
    /// JSON pointer to the final data in the result URL's answer (unset: the whole body).
    #[arg(
        long = "upstream-result-data-pointer",
        env = "REPOLL_UPSTREAM_RESULT_DATA_POINTER"
    )]
    pub result_data_pointer: Option<String>,
    /// Where a job is cancelled when its task is cancelled or purged by an operator: a URL
    /// template with `{job}` (the job's id; when the job was followed at a URL taken from an
    /// answer, `{job}` is that URL, e.g. `{job}/cancel`). Unset: jobs are left to run.
    #[arg(
        long = "upstream-cancel-url",
        env = "REPOLL_UPSTREAM_CANCEL_URL",
        hide_env_values = true
    )]
    pub cancel_url: Option<String>,
    /// HTTP method of the cancel call.
    #[arg(
        long = "upstream-cancel-method",
        env = "REPOLL_UPSTREAM_CANCEL_METHOD",
        default_value = "POST"
    )]
    pub cancel_method: String,
    /// Header that carries the submit's idempotency key (e.g. `Idempotency-Key`): every submit
    /// of one task's one job carries the same key, so an upstream that honours it makes one job
    /// even when a worker dies between the submit and storing the job. Unset: none is sent.
    #[arg(
        long = "upstream-idempotency-header",
        env = "REPOLL_UPSTREAM_IDEMPOTENCY_HEADER"
    )]
    pub idempotency_header: Option<String>,
    /// Other origins (`https://host[:port]`, comma-separated) whose URLs may be followed when an
    /// answer gives one (e.g. presigned storage). They get no API key and no configured header.
    #[arg(
        long = "upstream-allowed-origins",
        env = "REPOLL_UPSTREAM_ALLOWED_ORIGINS",
        value_delimiter = ','
    )]
    pub allowed_origins: Vec<String>,
    /// Mixed into every idempotency key, from `REPOLL_UPSTREAM_IDEMPOTENCY_SECRET` only (the
    /// same on every process of a deployment); unset, keys derive from the queue, task and life
    /// alone.
    #[arg(skip = std::env::var("REPOLL_UPSTREAM_IDEMPOTENCY_SECRET").ok().filter(|k| !k.is_empty()).map(Secret::from))]
    pub idempotency_secret: Option<Secret>,
    /// Webhooks from the provider are taken with this secret, from
    /// `REPOLL_UPSTREAM_WEBHOOK_SECRET` only: `whsec_<base64>` for Standard Webhooks
    /// signatures, or any value a header must carry (with `REPOLL_UPSTREAM_WEBHOOK_HEADER`).
    /// Unset: webhooks are refused.
    #[arg(skip = std::env::var("REPOLL_UPSTREAM_WEBHOOK_SECRET").ok().filter(|k| !k.is_empty()).map(Secret::from))]
    pub webhook_secret: Option<Secret>,
    /// Header whose value must be the webhook secret (for providers that let the caller choose
    /// one, e.g. AssemblyAI's `webhook_auth_header_name`). Unset: Standard Webhooks signatures.
    #[arg(
        long = "upstream-webhook-header",
        env = "REPOLL_UPSTREAM_WEBHOOK_HEADER"
    )]
    pub webhook_header: Option<String>,
    /// JSON pointer to the job in a webhook's body. Unset: the poll URL's `body:` pointer when
    /// the job is that URL, else the job pointer.
    #[arg(
        long = "upstream-webhook-job-pointer",
        env = "REPOLL_UPSTREAM_WEBHOOK_JOB_POINTER"
    )]
    pub webhook_job_pointer: Option<String>,
    /// What a webhook does: `result` (its body is the job as a poll reads it; a final one ends
    /// the task at once) or `notify` (it only says "look now": the next poll is made due now).
    #[arg(
        long = "upstream-webhook-mode",
        env = "REPOLL_UPSTREAM_WEBHOOK_MODE",
        default_value = "result"
    )]
    pub webhook_mode: String,
    /// How long the queue's job → task index keeps a job (webhooks find their task through it),
    /// in milliseconds: at least the provider's own job life.
    #[arg(
        long = "upstream-job-index-life-ms",
        env = "REPOLL_UPSTREAM_JOB_INDEX_LIFE_MS",
        default_value_t = 86_400_000
    )]
    pub job_index_life_ms: u64,
}

impl fmt::Debug for JobArgs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let JobArgs {
            submit_url,
            submit_method,
            submit_body,
            submit_headers,
            job_pointer,
            poll_url,
            result_url,
            result_data_pointer,
            cancel_url,
            cancel_method,
            idempotency_header,
            allowed_origins,
            idempotency_secret,
            webhook_secret,
            webhook_header,
            webhook_job_pointer,
            webhook_mode,
            job_index_life_ms,
        } = self;
        f.debug_struct("JobArgs")
            .field("submit_url", submit_url)
            .field("submit_method", submit_method)
            // A body may carry a credential (some APIs take the key in it): its size only.
            .field(
                "submit_body",
                &submit_body.as_ref().map(|b| format!("{} bytes", b.len())),
            )
            .field(
                "submit_headers",
                &format_args!("{} (values redacted)", submit_headers.len()),
            )
            .field("job_pointer", job_pointer)
            .field("poll_url", poll_url)
            .field("result_url", result_url)
            .field("result_data_pointer", result_data_pointer)
            .field("cancel_url", cancel_url)
            .field("cancel_method", cancel_method)
            .field("idempotency_header", idempotency_header)
            .field("allowed_origins", allowed_origins)
            .field("idempotency_secret", idempotency_secret)
            .field("webhook_secret", webhook_secret)
            .field("webhook_header", webhook_header)
            .field("webhook_job_pointer", webhook_job_pointer)
            .field("webhook_mode", webhook_mode)
            .field("job_index_life_ms", job_index_life_ms)
            .finish()
    }
}
