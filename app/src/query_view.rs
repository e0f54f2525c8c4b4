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
mod ssr;

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
