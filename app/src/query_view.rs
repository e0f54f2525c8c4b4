//! One query as the user sees it: the [`QueryView`] shared by the query page, its server
//! functions and the public JSON API, and (server only) the two operations behind them,
//! [`submit`] and [`read`].
//!
//! Why here and not in the server crate: the Leptos server functions and the axum handlers
//! of `/api/v1` must answer the same thing for the same state, so both call this code. The
//! view is plain data that also compiles to wasm (the page decodes it from the live stream);
//! its id is the shared model's [`TaskId`], checked where it enters.

pub use crate::freshness::{Freshness, StaleReason};
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

    /// The query's own run is over (done or failed). Whether anything more will come for a
    /// reader is [`QueryView::is_final`]: a stored result may still be refreshed.
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
    /// `fresh` or `stale` when the answer comes from the store (a result, or a failure
    /// cached for the failed window); null when it is a task's progress.
    #[cfg_attr(feature = "ssr", schema(required = true))]
    pub freshness: Option<Freshness>,
    /// How old the stored answer is (ms since the result was stored, or the task failed).
    #[cfg_attr(feature = "ssr", schema(required = true))]
    pub age_ms: Option<u64>,
    /// Until when (ms since the epoch) the stored answer is fresh.
    #[cfg_attr(feature = "ssr", schema(required = true))]
    pub fresh_until: Option<i64>,
    /// Why a stale result is served (null when fresh, or when no refresh was asked for yet:
    /// a read starts none, a submit does).
    #[cfg_attr(feature = "ssr", schema(required = true))]
    pub stale_reason: Option<StaleReason>,
    /// A refresh of the stored result runs or waits its turn; the new result replaces this
    /// one (the live stream sends it).
    pub refreshing: bool,
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
        // A stored answer's age grows by itself: the page counts it from `as_of`.
        QueryView {
            as_of: 0,
            updated_at: 0,
            age_ms: None,
            next_poll_at,
            ..self.clone()
        } == QueryView {
            as_of: 0,
            updated_at: 0,
            age_ms: None,
            ..shown.clone()
        }
    }

    /// No further change will come: the live stream closes after such a state, and the page
    /// stops following. Done or failed, and no refresh of the stored answer runs or waits (a
    /// stale or refreshed-ahead result whose refresh is live is followed until the refreshed
    /// result lands, or the refresh fails). The one rule the stream and the page share.
    pub fn is_final(&self) -> bool {
        self.status.is_final() && !self.refreshing
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

    use super::{Freshness, QueryStatus, QueryView, StaleReason, TaskId};
    use crate::context::AppContext;
    use crate::freshness::{servable, CacheRequest, Windows};

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
        /// `only-if-cached`, and nothing is stored (or running) for the query.
        #[error("nothing is stored for this query, and only a stored answer was asked for")]
        NotCached,
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

    /// One ask of a query: its text and who asks, how, and what they accept of a stored result.
    #[derive(Clone, Debug, Default)]
    pub struct Ask<'a> {
        pub text: &'a str,
        pub priority: queue::Priority,
        /// `None`: the default upstream.
        pub upstream: Option<&'a str>,
        /// "" = no tenant.
        pub tenant: &'a str,
        pub cache: CacheRequest,
    }

    /// How a submit was answered, for the caller's headers and counters.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Answered {
        /// A new task was made (nothing stored).
        Created,
        /// The task already running for the query was joined.
        Joined,
        /// From the store: a result or a cached failure, fresh or stale. `collapsed`: a
        /// refresh was already running (this ask joined it).
        Stored {
            refresh_started: bool,
            collapsed: bool,
        },
        /// `only-if-cached`, and nothing is stored or running.
        NotCached,
    }

    /// Enqueues `text` (or joins its task, or finds its fresh result) and answers with what is
    /// known, waiting up to `ctx.first_answer` for the workers' first poll so the first answer
    /// usually carries partial data. No upstream call is made here: the workers' chain of
    /// polls is the only one, however many users ask. Returns the view and whether a new task
    /// was created.
    pub async fn submit(ctx: &AppContext, text: &str) -> Result<(QueryView, bool), QueryError> {
        let (view, answered) = submit_with(
            ctx,
            &Ask {
                text,
                ..Ask::default()
            },
        )
        .await?;
        Ok((view, answered == Answered::Created))
    }

    /// [`submit`] with a priority, an upstream, a tenant and cache directives. Background work
    /// is claimed after interactive work (with a share, so it never starves) and answers at
    /// once: nobody waits for its first poll. A stored result is answered at once, fresh or
    /// (while its refresh runs) stale; one older than the caller accepts is not shown: the
    /// refresh's progress is, as for a first ask.
    pub async fn submit_with(
        ctx: &AppContext,
        ask: &Ask<'_>,
    ) -> Result<(QueryView, Answered), QueryError> {
        let tenant = ask.tenant;
        if !tenant.is_empty() && !queue::is_valid_tenant(tenant) {
            return Err(QueryError::InvalidTenant);
        }
        let normalised = queue::normalise_query(ask.text)?;
        let (q, policy) = ctx.upstream(ask.upstream)?;
        let up = upstream_name(q);
        let policy = queue::EnqueuePolicy {
            priority: ask.priority,
            tenant: tenant.to_string(),
            max_age_ms: ask.cache.max_age_for_queue(),
            only_if_cached: ask.cache.only_if_cached,
            ..policy.clone()
        };
        let enqueued = q.enqueue(&normalised, "", &policy).await?;
        let (task, answered) = match enqueued {
            Enqueued::Stored(r) => {
                let v = served(q, up, &r, None, &ask.cache).await?;
                let answered = Answered::Stored {
                    refresh_started: false,
                    collapsed: false,
                };
                return Ok((v.unwrap_or_else(|| from_result(up, &r)), answered));
            }
            Enqueued::Negative(t) => {
                let answered = Answered::Stored {
                    refresh_started: false,
                    collapsed: false,
                };
                return Ok((negative(q, up, &t), answered));
            }
            Enqueued::NotCached => {
                return Err(QueryError::NotCached);
            }
            Enqueued::Stale {
                result,
                refresh,
                created,
            } => {
                let answered = Answered::Stored {
                    refresh_started: created,
                    collapsed: !created && refresh.as_ref().is_some_and(Task::is_live),
                };
                if let Some(v) = served(q, up, &result, refresh.as_ref(), &ask.cache).await? {
                    return Ok((v, answered));
                }
                // Not to be shown to this caller: the refresh's progress, as for a first ask.
                match refresh {
                    Some(t) => (t, answered),
                    None => return Err(QueryError::NotCached),
                }
            }
            Enqueued::Created(t) => (t, Answered::Created),
            Enqueued::Joined(t) => (t, Answered::Joined),
        };
        if task.partial.is_some()
            || ctx.first_answer.is_zero()
            || ask.priority == queue::Priority::Background
            || !task.is_live()
        {
            return Ok((from_task(up, &task), answered));
        }
        let deadline = Instant::now() + ctx.first_answer;
        let mut latest = from_task(up, &task);
        while Instant::now() < deadline {
            tokio::time::sleep(FIRST_ANSWER_STEP.min(deadline - Instant::now())).await;
            match read_in(q, up, &task.id, &ask.cache).await? {
                Some(v) => {
                    let settled = v.partial.is_some() || v.status.is_final() || v.result.is_some();
                    latest = v;
                    if settled {
                        break;
                    }
                }
                // Purged or cancelled in the meantime: answer with what we had.
                None => break,
            }
        }
        Ok((latest, answered))
    }

    /// The upstream's name as the API says it.
    fn upstream_name(q: &queue::Queue) -> &str {
        match q.config().upstream.as_str() {
            "" => queue::DEFAULT_UPSTREAM,
            name => name,
        }
    }

    /// The view of a stored result `r` for a caller who accepts `cache`, with `refresh` the
    /// task refreshing it (if any): fresh; stale with why; or None when neither the service's
    /// windows nor the caller let it be shown. Reads the upstream's switches only for a stale
    /// result whose refresh waits (to say whether the breaker or a pause holds it).
    async fn served(
        q: &queue::Queue,
        upstream: &str,
        r: &StoredResult,
        refresh: Option<&Task>,
        cache: &CacheRequest,
    ) -> Result<Option<QueryView>, QueryError> {
        let w = windows(q);
        let mut v = stored_view(q, upstream, r);
        let age = v.age_ms.unwrap_or(0);
        v.refreshing = refresh.is_some_and(Task::is_live);
        if age < w.fresh_ms {
            if !cache.accepts(age, 0) {
                return Ok(None);
            }
            v.freshness = Some(Freshness::Fresh);
            return Ok(Some(v));
        }
        let staleness = age - w.fresh_ms;
        let reason = match refresh {
            None => None,
            Some(t) if t.state == TaskState::Dead => Some(StaleReason::UpstreamFailed),
            Some(t) if t.state == TaskState::Leased => Some(StaleReason::Refreshing),
            Some(_) => Some(waiting_reason(q).await?),
        };
        if !servable(&w, staleness, reason) || !cache.accepts(age, staleness) {
            return Ok(None);
        }
        v.freshness = Some(Freshness::Stale);
        v.stale_reason = reason;
        Ok(Some(v))
    }

    /// A stored result with its age and end of freshness, not yet marked fresh or stale.
    fn stored_view(q: &queue::Queue, upstream: &str, r: &StoredResult) -> QueryView {
        let mut v = from_result(upstream, r);
        v.age_ms = Some(u64::try_from(v.as_of - r.completed_ms).unwrap_or(0));
        v.fresh_until = Some(
            r.completed_ms
                .saturating_add(q.config().result_ttl_ms as i64),
        );
        v
    }

    /// Why a refresh that waits its turn is not running: the breaker, a pause, or nothing
    /// (it is next).
    async fn waiting_reason(q: &queue::Queue) -> Result<StaleReason, QueryError> {
        if q.breaker().await?.is_some() {
            return Ok(StaleReason::BreakerOpen);
        }
        if q.is_paused().await? {
            return Ok(StaleReason::Paused);
        }
        Ok(StaleReason::Refreshing)
    }

    fn windows(q: &queue::Queue) -> Windows {
        let c = q.config();
        Windows {
            fresh_ms: c.result_ttl_ms,
            stale_ms: c.freshness.stale_ms,
            stale_if_error_ms: c.freshness.stale_if_error_ms,
        }
    }

    /// A task that died for good, answered from the store for the failed window.
    fn negative(q: &queue::Queue, upstream: &str, t: &Task) -> QueryView {
        let mut v = from_task(upstream, t);
        v.freshness = Some(Freshness::Fresh);
        v.age_ms = Some(u64::try_from(now_ms() - t.updated_ms).unwrap_or(0));
        v.fresh_until = Some(
            t.updated_ms
                .saturating_add(q.config().freshness.failed_ms as i64),
        );
        v
    }

    /// The current view of `id`, or `None` when the id is unknown. (A malformed id cannot
    /// get here: [`TaskId`] is checked where it is parsed, so it is a 404 without asking Redis.)
    ///
    /// An id names one upstream's task (ids cover the upstream), so the upstreams are asked in
    /// turn until one knows it: one read with a single upstream, at most one per upstream.
    pub async fn read(ctx: &AppContext, id: &TaskId) -> Result<Option<QueryView>, QueryError> {
        for (name, q) in ctx.queues() {
            if let Some(v) = read_in(q, name, id, &CacheRequest::default()).await? {
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
        cache: &CacheRequest,
    ) -> Result<Option<QueryView>, QueryError> {
        let Some(d) = q.get(id).await? else {
            return Ok(None);
        };
        // A stored result wins over a task record while it may be shown: it is the answer
        // users are waiting for, and the task beside it is its refresh.
        if let Some(r) = &d.result {
            if let Some(v) = served(q, upstream, r, d.task.as_ref(), cache).await? {
                return Ok(Some(v));
            }
            if d.task.is_none() {
                // Not what the caller would take, yet nothing else is there: past the windows
                // with nobody having asked since (a read starts no refresh), or the result of
                // a refresh this caller waits for, which is newer than its max age asked.
                let mut v = stored_view(q, upstream, r);
                let fresh = v.age_ms.unwrap_or(u64::MAX) < q.config().result_ttl_ms;
                v.freshness = Some(if fresh {
                    Freshness::Fresh
                } else {
                    Freshness::Stale
                });
                return Ok(Some(v));
            }
        }
        if let Some(t) = d.task.as_ref().filter(|t| t.state == TaskState::Dead) {
            let failed = q.config().freshness.failed_ms as i64;
            if d.result.is_none()
                && t.dead_reason == Some(queue::DeadReason::Fatal)
                && now_ms() - t.updated_ms < failed
            {
                return Ok(Some(negative(q, upstream, t)));
            }
        }
        Ok(Some(from_detail(upstream, id, &d)))
    }

    use queue::local_ms as now_ms;

    /// Upstream data is stored as text; when it is JSON the API returns it structured.
    fn data(text: &str) -> serde_json::Value {
        serde_json::from_str(text).unwrap_or_else(|_| serde_json::Value::String(text.into()))
    }

    fn from_detail(upstream: &str, id: &TaskId, d: &TaskDetail) -> QueryView {
        if let Some(t) = &d.task {
            return from_task(upstream, t);
        }
        if let Some(r) = &d.result {
            return from_result(upstream, r);
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
            freshness: None,
            age_ms: None,
            fresh_until: None,
            stale_reason: None,
            refreshing: false,
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
            freshness: None,
            age_ms: None,
            fresh_until: None,
            stale_reason: None,
            refreshing: false,
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
            freshness: None,
            age_ms: None,
            fresh_until: None,
            stale_reason: None,
            refreshing: false,
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
            freshness: None,
            age_ms: None,
            fresh_until: None,
            stale_reason: None,
            refreshing: false,
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
    fn a_result_whose_refresh_is_live_is_not_final() {
        let done = QueryView {
            status: QueryStatus::Done,
            result: Some(serde_json::json!(1)),
            next_poll_at: None,
            freshness: Some(Freshness::Stale),
            age_ms: Some(60_000),
            ..processing(1, None, 2_000)
        };
        assert!(
            done.is_final(),
            "stale, nothing refreshing it: nothing more will come"
        );
        let refreshing = QueryView {
            refreshing: true,
            stale_reason: Some(StaleReason::Refreshing),
            ..done.clone()
        };
        assert!(
            !refreshing.is_final(),
            "the refreshed result is still to come"
        );
        // A refresh held by the breaker or a pause still runs later; a fresh result refreshed
        // ahead of going stale gets a new one too.
        let held = QueryView {
            stale_reason: Some(StaleReason::BreakerOpen),
            ..refreshing.clone()
        };
        assert!(!held.is_final());
        let ahead = QueryView {
            freshness: Some(Freshness::Fresh),
            stale_reason: None,
            ..refreshing.clone()
        };
        assert!(!ahead.is_final());
        // The refresh died: stale-if-error, final until someone asks again.
        let failed_refresh = QueryView {
            refreshing: false,
            stale_reason: Some(StaleReason::UpstreamFailed),
            ..refreshing
        };
        assert!(failed_refresh.is_final());
        assert!(!processing(1, Some(2_000), 1_500).is_final());
        let failed = QueryView {
            status: QueryStatus::Failed,
            ..processing(1, None, 2_000)
        };
        assert!(failed.is_final());
    }

    #[test]
    fn pretty_keeps_strings_as_text() {
        assert_eq!(pretty(&serde_json::json!("<b>")), "<b>");
        assert_eq!(pretty(&serde_json::json!({"a": 1})), "{\n  \"a\": 1\n}");
    }
}
