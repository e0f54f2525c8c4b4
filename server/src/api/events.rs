//! `GET /api/v1/queries/{id}/events`: one query's state as Server-Sent Events.
//!
//! Every event is the full state (event name `state`, data = the same JSON as
//! `GET /api/v1/queries/{id}`, id = the state's `updated_at`), so a client never has to merge
//! anything and a reconnect needs no replay: the stream always starts with the current state
//! (a `Last-Event-ID` header is accepted and simply not needed). The states come from the
//! query's shared feed ([`super::query_feed`]): read once per change for all its streams, sent
//! only if a reader would see something new ([`QueryView::nothing_new_since`]: the start of a
//! poll is not sent, its result is), serialised once; every stream sends the same bytes. A
//! stream closes after the final state ([`QueryView::is_final`]: `done`/`failed` with no
//! refresh live). A stale result whose refresh runs is not final: the stream stays open and
//! sends the refreshed result (the refresh's completion is published under the same id). The id stays the state's
//! `updated_at`: skipping a state skips an id, and each state sent was written after the one
//! sent before it, so a stream's ids still grow. Heartbeat comments keep proxies from timing
//! the connection out. Each stream holds a place under the per-client and total stream caps;
//! over them the answer is a JSON 429 / 503 that closes the connection.
//!
//! A reader that stops reading is dropped, not buffered for: hyper asks a stream for its next
//! record only once the socket has taken most of the last one, so what a stream holds unsent
//! is one record (shared) plus the socket's buffers. A stream that has not been asked for
//! more for [`ApiState::slow_reader`](super::ApiState) after a newer state was published is
//! a reader that is not keeping up: its connection is closed (unsent bytes discarded) and
//! counted in `repoll_live_streams_dropped_total{reason="slow"}`. A browser's `EventSource`
//! reconnects by itself and starts from the current state.
//!
//! [`QueryView::nothing_new_since`]: app::query_view::QueryView::nothing_new_since
//! [`QueryView::is_final`]: app::query_view::QueryView::is_final

use std::{
    convert::Infallible,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use app::query_view::TaskId;
use axum::{
    body::{Body, Bytes},
    extract::{Path, State},
    http::header,
    response::{IntoResponse, Response},
    Extension,
};
use futures::{stream, Stream};
use tokio::sync::watch;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::error::ApiError;
use super::query_feed::{Feed, Shared};
use crate::{
    conn::ConnCloser,
    live_hub::{Live, StreamPermit},
    state::{ClientIp, WebState},
};

/// The heartbeat: an SSE comment line.
const HEARTBEAT: &[u8] = b":\n\n";

/// Opens the stream; 404 (JSON, before any streaming) for an unknown id, 429 / 503 over the
/// stream caps.
#[utoipa::path(
    get,
    path = "/api/v1/queries/{id}/events",
    operation_id = "queryEvents",
    summary = "Live state of a query as Server-Sent Events",
    description = "Sends the current state at once, then one event per change a reader can see (a poll's result with its partial data, poll count and next due time; a moved due time; the final state), not the start of a poll; each is an event named `state` whose data is a complete Query object (as JSON) and whose id is its `updated_at`. Heartbeat comment lines keep the connection open. The stream closes after the final state: done or failed, with no refresh running (a stored result answered while its refresh runs, `refreshing` true, is followed until the refreshed result is sent, or the refresh fails). Every event is a full state, so on reconnect (with or without Last-Event-ID) the client simply receives the current state first. A client that stops reading while newer states wait (REPOLL_SSE_SLOW_READER_MS) is disconnected; reconnecting gives the current state.",
    params(("id" = TaskId, Path, description = "Query id (from the submit answer).")),
    responses(
        (status = 200, content_type = "text/event-stream", body = String, description = "`event: state`, `id: <updated_at>`, `data: <Query as JSON>` records, and `:` heartbeat comments. Each event's data is a Query: schema `#/components/schemas/Query` (also given as `x-item-schema`)."),
        (status = 404, body = super::error::ErrorBody, description = "Unknown or malformed id (code not_found)."),
        (status = 429, body = super::error::ErrorBody, description = "This client holds its maximum of live streams (code too_many_streams); the connection is closed."),
        (status = 503, body = super::error::ErrorBody, description = "The queue (Redis) is unavailable (code unavailable), or the server holds its maximum of live streams (code streams_full)."),
    )
)]
pub async fn events(
    State(state): State<WebState>,
    ClientIp(client): ClientIp,
    closer: Option<Extension<ConnCloser>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id: TaskId = id.parse().map_err(|_| ApiError::not_found())?;
    let permit = state.live.admit(client)?;
    let mut feed = state.api.feeds.follow(&state.app, &state.live, &id);
    let first = match feed.wait_for(|f| !matches!(f, Feed::Loading)).await {
        Ok(f) => f.clone(),
        // The feed task ended without a word: only when the process is going down.
        Err(_) => Feed::Failed { unavailable: true },
    };
    let first = match first {
        Feed::Known(shared) => shared,
        Feed::Loading | Feed::Unknown => return Err(ApiError::not_found()),
        Feed::Failed { unavailable: true } => {
            return Err(app::query_view::QueryError::Unavailable.into())
        }
        Feed::Failed { unavailable: false } => {
            return Err(app::query_view::QueryError::Internal.into())
        }
    };
    let progress = Arc::new(Progress::default());
    let watchdog = CancellationToken::new();
    tokio::spawn(watch_for_a_slow_reader(
        feed.clone(),
        progress.clone(),
        state.api.slow_reader,
        closer.map(|Extension(c)| c),
        state.live.clone(),
        watchdog.clone(),
    ));
    let stream = LiveStream {
        feed,
        progress,
        _watchdog: watchdog.drop_guard(),
        _permit: permit,
        pending: Some(first),
        keep_alive: state.api.keep_alive,
        finished: false,
    };
    Ok((
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(stream.into_stream()),
    )
        .into_response())
}

/// What a stream has handed to hyper, shared with its watchdog.
#[derive(Default)]
struct Progress {
    /// The `seq` of the last state handed out.
    sent: AtomicU64,
    /// Hyper is asking for the next record (it took the last one): the stream is waiting for
    /// a change, not behind.
    asking: AtomicBool,
    /// The watchdog dropped this stream: end it when next asked.
    dropped: AtomicBool,
}

/// One open stream.
struct LiveStream {
    feed: watch::Receiver<Feed>,
    progress: Arc<Progress>,
    /// Stops the stream's watchdog when the stream goes.
    _watchdog: DropGuard,
    /// The stream's place under the caps, freed when the stream is dropped.
    _permit: StreamPermit,
    /// A state to send next without waiting (the first one).
    pending: Option<Arc<Shared>>,
    keep_alive: Duration,
    /// The final state went out: end the stream.
    finished: bool,
}

impl LiveStream {
    fn into_stream(self) -> impl Stream<Item = Result<Bytes, Infallible>> {
        stream::unfold(self, |mut s| async move {
            // Being asked for more means the last record was taken.
            s.progress.asking.store(true, Ordering::Relaxed);
            if s.finished || s.progress.dropped.load(Ordering::Relaxed) {
                return None;
            }
            let next = match s.pending.take() {
                Some(shared) => Some(shared),
                None => s.next_change().await?,
            };
            s.progress.asking.store(false, Ordering::Relaxed);
            let bytes = match next {
                Some(shared) => {
                    s.progress.sent.store(shared.seq, Ordering::Relaxed);
                    s.finished = shared.is_final;
                    // The shared buffer itself: a reference, not a copy.
                    shared.record.clone()
                }
                None => Bytes::from_static(HEARTBEAT),
            };
            Some((Ok(bytes), s))
        })
    }

    /// The next state to send, or `Some(None)` for a heartbeat when none came within the
    /// keep-alive interval; `None` when the feed ended (the task is gone).
    async fn next_change(&mut self) -> Option<Option<Arc<Shared>>> {
        let heartbeat = tokio::time::sleep(self.keep_alive);
        tokio::pin!(heartbeat);
        loop {
            tokio::select! {
                changed = self.feed.changed() => changed.ok()?,
                _ = &mut heartbeat => return Some(None),
            }
            match &*self.feed.borrow_and_update() {
                Feed::Known(shared) => return Some(Some(shared.clone())),
                Feed::Loading => {}
                Feed::Unknown | Feed::Failed { .. } => return None,
            }
        }
    }
}

/// Drops the stream of a reader that is not keeping up: after each newer state, if the
/// stream has not handed it out within `slow_after` and hyper is not asking for it (the
/// socket still holds an older record), the connection is closed and counted.
async fn watch_for_a_slow_reader(
    mut feed: watch::Receiver<Feed>,
    progress: Arc<Progress>,
    slow_after: Duration,
    closer: Option<ConnCloser>,
    live: Live,
    done: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = done.cancelled() => return,
            changed = feed.changed() => if changed.is_err() { return },
        }
        let newest = match &*feed.borrow_and_update() {
            Feed::Known(shared) => shared.seq,
            _ => continue,
        };
        tokio::select! {
            _ = done.cancelled() => return,
            _ = tokio::time::sleep(slow_after) => {}
        }
        let behind = progress.sent.load(Ordering::Relaxed) < newest;
        if behind && !progress.asking.load(Ordering::Relaxed) {
            progress.dropped.store(true, Ordering::Relaxed);
            live.count_slow_drop();
            if let Some(closer) = closer {
                closer.close();
            }
            return;
        }
    }
}
