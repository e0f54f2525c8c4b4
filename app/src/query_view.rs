//! One query as the user sees it: the [`QueryView`] shared by the query page, its server
//! functions and the public JSON API, and (server only) the two operations behind them,
//! [`submit`] and [`read`].
//!
//! Why here and not in the server crate: the Leptos server functions and the axum handlers
//! of `/api/v1` must answer the same thing for the same state, so both call this code. The
//! view is plain data that also compiles to wasm (the page decodes it from the live stream);
//! its id is the shared model's [`TaskId`], checked where it enters.

pub use model::TaskId;
use serde::{Deserialize, Serialize};

/// Where a query stands, as the user sees it (the queue's four task states folded into three).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum QueryStatus {
    /// A task is waiting for its next poll or being polled right now.
    Processing,
    /// A final result is stored.
    Done,
    /// The task gave up; `error` says why.
    Failed,
}

impl QueryStatus {
    /// The word shown to users and sent in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            QueryStatus::Processing => "processing",
            QueryStatus::Done => "done",
            QueryStatus::Failed => "failed",
        }
    }

    /// No further change will come (the live stream closes after such a state).
    pub fn is_final(self) -> bool {
        !matches!(self, QueryStatus::Processing)
    }
}

/// Everything known about one query right now. Every field is always present in the JSON
/// (null when unknown) so API clients can rely on one shape.
///
/// The public API's OpenAPI document takes its `Query` schema from this type (server side).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema), schema(as = Query))]
pub struct QueryView {
    /// 32 lowercase hex chars, derived from the normalised query.
    pub id: TaskId,
    /// The normalised query text.
    pub query: String,
    /// The upstream API the query is sent to (`default` unless the deployment names several).
    pub upstream: String,
    pub status: QueryStatus,
    /// The upstream's latest partial data while processing (JSON when it is JSON, else text).
    #[cfg_attr(feature = "ssr", schema(required = true))]
    pub partial: Option<serde_json::Value>,
    /// The final data once done (JSON when it is JSON, else text).
    #[cfg_attr(feature = "ssr", schema(required = true))]
    pub result: Option<serde_json::Value>,
    /// A plain reason when failed.
    #[cfg_attr(feature = "ssr", schema(required = true))]
    pub error: Option<String>,
    /// "Still processing" answers so far.
    pub polls: u32,
    /// When the next poll is due (ms since the epoch); null while a poll is running or when
    /// there is no next poll. The live stream does not send a poll's start (this turning
    /// null) by itself: its result follows with the next due time.
    #[cfg_attr(feature = "ssr", schema(required = true))]
    pub next_poll_at: Option<i64>,
    /// When the task was created (ms since the epoch).
    pub created_at: i64,
    /// When the state last changed (ms); grows with every change, so it serves as the live
    /// stream's event id.
    pub updated_at: i64,
    /// When the result was stored (done only).
    #[cfg_attr(feature = "ssr", schema(required = true))]
    pub completed_at: Option<i64>,
    /// The server's clock when this view was read, so a page rendered without JavaScript can
    /// still show the elapsed time.
    pub as_of: i64,
}

impl QueryView {
    /// Whether a reader of the query's page would see nothing new in `self` after `shown`, the
    /// last state sent to it, so the live stream sends one event per visible change. Ignored:
    /// when the view was read (`as_of`), when the record last changed (`updated_at`: shown
    /// nowhere while processing, and a final state is news anyway), and the start of a poll
    /// (a claim: `next_poll_at` turns null and nothing else moves). The poll's result is the
    /// news: its partial data, one more poll, the next due time. A due time that moves (a
    /// retry now, a retry after an error, a lost lease given back) is news too.
    pub fn nothing_new_since(&self, shown: &QueryView) -> bool {
        let next_poll_at = self.next_poll_at.or(shown.next_poll_at);
        QueryView {
            as_of: 0,
            updated_at: 0,
            next_poll_at,
            ..self.clone()
        } == QueryView {
            as_of: 0,
            updated_at: 0,
            ..shown.clone()
        }
    }

    /// The data to show: the result when done, otherwise the latest partial.
    pub fn data(&self) -> Option<&serde_json::Value> {
        self.result.as_ref().or(self.partial.as_ref())
    }
}

/// Upstream data as pretty JSON text (strings as they are). Always text: the page renders it
/// escaped, never as HTML.
pub fn pretty(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        v => serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string()),
    }
}

#[cfg(feature = "ssr")]
pub use ssr::*;

#[cfg(feature = "ssr")]
mod ssr {
    use std::time::{Duration, Instant};

    use queue::{Enqueued, QueueError, StoredResult, Task, TaskDetail, TaskState};

    use super::{QueryStatus, QueryView, TaskId};
    use crate::context::AppContext;

    /// How often [`submit`] re-reads the task while it waits for the first partial.
    const FIRST_ANSWER_STEP: Duration = Duration::from_millis(25);

    /// Why a submit or read did not produce a view.
    #[derive(Debug, thiserror::Error)]
    pub enum QueryError {
        /// The user's text breaks the input rules (message is safe to show).
        #[error("{0}")]
        Invalid(String),
        /// No upstream of that name (message lists the known ones, safe to show).
        #[error("{0}")]
        UnknownUpstream(#[from] crate::context::UnknownUpstream),
        /// The tenant is not 1 to 64 of letters, digits and `._:@-`.
        #[error("tenant: 1 to {} of letters, digits and ._:@-", queue::MAX_TENANT_LEN)]
        InvalidTenant,
        /// Redis is unreachable: try again later.
        #[error("the queue is unavailable")]
        Unavailable,
        /// The queue was repartitioned while this process ran: it accepts nothing until it
        /// is restarted (safe to show: the queue's name and counts are in the log only).
        #[error(
            "this process's queue layout changed (repartitioned): it accepts nothing until it \
             is restarted"
        )]
        LayoutChanged,
        /// Something on our side is wrong (details are in the log only).
        #[error("internal error")]
        Internal,
    }

    impl From<queue::InvalidQuery> for QueryError {
        fn from(e: queue::InvalidQuery) -> Self {
            QueryError::Invalid(e.0)
        }
    }

    impl From<QueueError> for QueryError {
        fn from(e: QueueError) -> Self {
            match e {
                QueueError::InvalidQuery(msg) => QueryError::Invalid(msg),
                QueueError::Redis(e) => {
                    tracing::warn!(error = %e, "query: redis unavailable");
                    QueryError::Unavailable
                }
                QueueError::LayoutChanged { .. } => QueryError::LayoutChanged,
                e => {
                    tracing::error!(error = %e, "query: queue error");
                    QueryError::Internal
                }
            }
        }
    }

    /// Enqueues `text` (or joins its task, or finds its fresh result) and answers with what is
    /// known, waiting up to `ctx.first_answer` for the workers' first poll so the first answer
    /// usually carries partial data. No upstream call is made here: the workers' chain of
    /// polls is the only one, however many users ask. Returns the view and whether a new task
    /// was created.
    pub async fn submit(ctx: &AppContext, text: &str) -> Result<(QueryView, bool), QueryError> {
        submit_with(ctx, text, queue::Priority::Interactive, None, "").await
    }

    /// [`submit`] with a priority and an upstream (`None`: the default one). Background work
    /// is claimed after interactive work (with a share, so it never starves) and answers at
    /// once: nobody waits for its first poll.
    pub async fn submit_with(
        ctx: &AppContext,
        text: &str,
        priority: queue::Priority,
        upstream: Option<&str>,
        tenant: &str,
    ) -> Result<(QueryView, bool), QueryError> {
        if !tenant.is_empty() && !queue::is_valid_tenant(tenant) {
            return Err(QueryError::InvalidTenant);
        }
        let normalised = queue::normalise_query(text)?;
        let (q, policy) = ctx.upstream(upstream)?;
        let up = q.config().upstream.as_str();
        let up = if up.is_empty() {
            queue::DEFAULT_UPSTREAM
        } else {
            up
        };
        let policy = queue::EnqueuePolicy {
            priority,
            tenant: tenant.to_string(),
            ..policy.clone()
        };
        let enqueued = q.enqueue(&normalised, "", &policy).await?;
        let (task, created) = match enqueued {
            Enqueued::Stored(r) => return Ok((from_result(up, &r), false)),
            Enqueued::Created(t) => (t, true),
            Enqueued::Joined(t) => (t, false),
        };
        if task.partial.is_some()
            || ctx.first_answer.is_zero()
            || priority == queue::Priority::Background
        {
            return Ok((from_task(up, &task), created));
        }
        let deadline = Instant::now() + ctx.first_answer;
        let mut latest = from_task(up, &task);
        while Instant::now() < deadline {
            tokio::time::sleep(FIRST_ANSWER_STEP.min(deadline - Instant::now())).await;
            match read_in(q, up, &task.id).await? {
                Some(v) => {
                    let settled = v.partial.is_some() || v.status.is_final();
                    latest = v;
                    if settled {
                        break;
                    }
                }
                // Purged or cancelled in the meantime: answer with what we had.
                None => break,
            }
        }
        Ok((latest, created))
    }

    /// The current view of `id`, or `None` when the id is unknown. (A malformed id cannot
    /// get here: [`TaskId`] is checked where it is parsed, so it is a 404 without asking Redis.)
    ///
    /// An id names one upstream's task (ids cover the upstream), so the upstreams are asked in
    /// turn until one knows it: one read with a single upstream, at most one per upstream.
    pub async fn read(ctx: &AppContext, id: &TaskId) -> Result<Option<QueryView>, QueryError> {
        for (name, q) in ctx.queues() {
            if let Some(v) = read_in(q, name, id).await? {
                return Ok(Some(v));
            }
        }
        Ok(None)
    }

    /// The view of `id` in one upstream's queue.
    async fn read_in(
        q: &queue::Queue,
        upstream: &str,
        id: &TaskId,
    ) -> Result<Option<QueryView>, QueryError> {
        Ok(q.get(id).await?.map(|d| from_detail(upstream, id, &d)))
    }

    use queue::local_ms as now_ms;

    /// Upstream data is stored as text; when it is JSON the API returns it structured.
    fn data(text: &str) -> serde_json::Value {
        serde_json::from_str(text).unwrap_or_else(|_| serde_json::Value::String(text.into()))
    }

    fn from_detail(upstream: &str, id: &TaskId, d: &TaskDetail) -> QueryView {
        // A fresh result wins over a task record: it is the answer users are waiting for.
        if let Some(r) = &d.result {
            return from_result(upstream, r);
        }
        if let Some(t) = &d.task {
            return from_task(upstream, t);
        }
        // Only history is left: the task was cancelled or purged and its result expired.
        let at = d.history.first().map_or(0, |h| h.at_ms);
        QueryView {
            id: id.clone(),
            query: String::new(),
            upstream: upstream.to_string(),
            status: QueryStatus::Failed,
            partial: None,
            result: None,
            error: Some(
                "This query is no longer tracked (cancelled or expired). Submit it again.".into(),
            ),
            polls: 0,
            next_poll_at: None,
            created_at: at,
            updated_at: at,
            completed_at: None,
            as_of: now_ms(),
        }
    }

    fn from_result(upstream: &str, r: &StoredResult) -> QueryView {
        QueryView {
            id: r.id.clone(),
            query: r.query.clone(),
            upstream: upstream.to_string(),
            status: QueryStatus::Done,
            partial: None,
            result: Some(data(&r.data)),
            error: None,
            polls: r.polls,
            next_poll_at: None,
            created_at: r.created_ms,
            updated_at: r.completed_ms,
            completed_at: Some(r.completed_ms),
            as_of: now_ms(),
        }
    }

    fn from_task(upstream: &str, t: &Task) -> QueryView {
        let (status, error) = match t.state {
            TaskState::Due | TaskState::Leased => (QueryStatus::Processing, None),
            TaskState::Dead | TaskState::Done => (QueryStatus::Failed, Some(failure_reason(t))),
        };
        QueryView {
            id: t.id.clone(),
            query: t.query.clone(),
            upstream: upstream.to_string(),
            status,
            partial: t.partial.as_deref().map(data),
            result: None,
            error,
            polls: t.polls,
            next_poll_at: if t.state == TaskState::Due {
                t.due_ms
            } else {
                None
            },
            created_at: t.created_ms,
            updated_at: t.updated_ms,
            completed_at: None,
            as_of: now_ms(),
        }
    }

    /// Why the task failed, for the public (the query page and the API): the dead reason in
    /// plain words and what of its last error a user can act on — never the call's URL nor
    /// the upstream's body, which the dashboard shows ([`model::failure::public_reason`]).
    fn failure_reason(t: &Task) -> String {
        model::failure::public_reason(t.dead_reason, t.attempts, t.last_error.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn processing(polls: u32, next_poll_at: Option<i64>, updated_at: i64) -> QueryView {
        QueryView {
            id: "0123456789abcdef0123456789abcdef".parse().unwrap(),
            query: "q".into(),
            upstream: "default".into(),
            status: QueryStatus::Processing,
            partial: (polls > 0).then(|| serde_json::json!({ "polls": polls })),
            result: None,
            error: None,
            polls,
            next_poll_at,
            created_at: 1_000,
            updated_at,
            completed_at: None,
            as_of: updated_at + 7,
        }
    }

    #[test]
    fn the_start_of_a_poll_is_not_news_and_its_result_is() {
        let due = processing(1, Some(2_000), 1_500);
        let claimed = processing(1, None, 2_001);
        assert!(claimed.nothing_new_since(&due), "a claim alone");
        let answered = processing(2, Some(3_000), 2_300);
        assert!(!answered.nothing_new_since(&due), "the poll's result");
        assert!(!answered.nothing_new_since(&claimed));
        // Read again later, or written again with nothing visible: nothing new.
        let reread = QueryView {
            as_of: 9_999,
            updated_at: 2_400,
            ..answered.clone()
        };
        assert!(reread.nothing_new_since(&answered));
        // The due time moved (a retry now, a retry after an error, a lease given back).
        assert!(!processing(1, Some(2_500), 2_100).nothing_new_since(&due));
        assert!(!processing(1, Some(2_500), 2_100).nothing_new_since(&claimed));
        // The end is news, whatever came before.
        let done = QueryView {
            status: QueryStatus::Done,
            result: Some(serde_json::json!(1)),
            next_poll_at: None,
            ..claimed.clone()
        };
        assert!(!done.nothing_new_since(&due));
    }

    #[test]
    fn pretty_keeps_strings_as_text() {
        assert_eq!(pretty(&serde_json::json!("<b>")), "<b>");
        assert_eq!(pretty(&serde_json::json!({"a": 1})), "{\n  \"a\": 1\n}");
    }
}
