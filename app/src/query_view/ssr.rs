//! The server side of [`super::QueryView`]: [`submit`] and [`read`], the answers built from the
//! queue's records and stored results, and (with `crate::freshness`'s rules) what a caller
//! is shown of a stored result. Shared by the query page's server functions and the public
//! API, so both answer the same thing for the same state.

use std::time::{Duration, Instant};

use queue::{Enqueued, QueueError, StoredResult, Task, TaskDetail, TaskState};

use super::{Freshness, QueryStatus, QueryView, StaleReason, TaskId};
use crate::context::AppContext;
use crate::freshness::{servable, CacheRequest, Windows};

/// How long [`submit`] waits before it first re-reads the task while it waits for the first
/// partial, doubling each time up to [`FIRST_ANSWER_MAX_STEP`]: an upstream that answers within
/// milliseconds is answered within milliseconds (a fixed 25 ms step made every such miss take
/// 25 ms), a slow one costs a read every 25 ms as before (eight reads in the first 100 ms).
const FIRST_ANSWER_STEP: Duration = Duration::from_millis(1);
const FIRST_ANSWER_MAX_STEP: Duration = Duration::from_millis(25);

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
    /// refresh was already running (this ask joined it). `refused`: the stored result was
    /// fresh, and the caller's directives (`no-cache`, `max-age`) refused it: a refresh
    /// started or joined went upstream for the request (RFC 9211 `fwd=request`), not
    /// because the result was stale — whether or not its result came within the wait.
    Stored {
        refresh_started: bool,
        collapsed: bool,
        refused: bool,
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
    let (q, policy) = ctx.upstream(ask.upstream)?;
    let up = upstream_name(q);
    let policy = queue::EnqueuePolicy {
        priority: ask.priority,
        tenant: tenant.to_string(),
        max_age_ms: ask.cache.max_age_for_queue(),
        only_if_cached: ask.cache.only_if_cached,
        ..policy.clone()
    };
    // The queue normalises the text (an invalid one is `QueryError::Invalid`): once per ask.
    let enqueued = q.enqueue(ask.text, "", &policy).await?;
    let (task, answered) = match enqueued {
        Enqueued::Stored(r) => {
            let v = served(q, up, &r, None, &ask.cache).await?;
            let answered = Answered::Stored {
                refresh_started: false,
                collapsed: false,
                refused: false,
            };
            return Ok((v.unwrap_or_else(|| from_result(up, &r)), answered));
        }
        Enqueued::Negative(t) => {
            let answered = Answered::Stored {
                refresh_started: false,
                collapsed: false,
                refused: false,
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
            // Fresh by the service's window, yet not fresh for this caller: refused.
            let age = now_ms().saturating_sub(result.completed_ms);
            let answered = Answered::Stored {
                refresh_started: created,
                collapsed: !created && refresh.as_ref().is_some_and(Task::is_live),
                refused: u64::try_from(age).is_ok_and(|a| a < windows(q).fresh_ms),
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
    let mut step = FIRST_ANSWER_STEP;
    while Instant::now() < deadline {
        tokio::time::sleep(step.min(deadline - Instant::now())).await;
        step = (step * 2).min(FIRST_ANSWER_MAX_STEP);
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
