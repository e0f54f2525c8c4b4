//! `GET /api/v1/queries/{id}/events`: one query's state as Server-Sent Events.
//!
//! Every event is the full state (event name `state`, data = the same JSON as
//! `GET /api/v1/queries/{id}`, id = the state's `updated_at`), so a client never has to merge
//! anything and a reconnect needs no replay: the stream always starts with the current state
//! (a `Last-Event-ID` header is accepted and simply not needed). The stream wakes on the
//! process's [`Live`](crate::live_hub::Live) hub for this task only, re-reads the state from Redis,
//! sends it only if a reader would see something new ([`QueryView::nothing_new_since`]: the
//! start of a poll is not sent, its result is), and closes after the final (`done`/`failed`)
//! state. The id stays the state's `updated_at`: skipping a state skips an id, and each state
//! sent was written after the one sent before it, so a stream's ids still grow. Heartbeat
//! comments keep proxies from timing the connection out. Each stream holds a place under the
//! per-client and total stream caps; over them the answer is a JSON 429 / 503 that closes the
//! connection.

use std::convert::Infallible;

use app::{
    context::AppContext,
    query_view::{QueryView, TaskId},
};
use axum::{
    extract::{Path, State},
    response::sse::{Event, KeepAlive, Sse},
};
use futures::{stream, Stream};

use super::error::ApiError;
use crate::{
    live_hub::{StreamPermit, TaskWatch},
    state::{ClientIp, WebState},
};

/// Opens the stream; 404 (JSON, before any streaming) for an unknown id, 429 / 503 over the
/// stream caps.
#[utoipa::path(
    get,
    path = "/api/v1/queries/{id}/events",
    operation_id = "queryEvents",
    summary = "Live state of a query as Server-Sent Events",
    description = "Sends the current state at once, then one event per change a reader can see (a poll's result with its partial data, poll count and next due time; a moved due time; the final state), not the start of a poll; each is an event named `state` whose data is a complete Query object (as JSON) and whose id is its `updated_at`. Heartbeat comment lines keep the connection open. The stream closes after the final state (done or failed). Every event is a full state, so on reconnect (with or without Last-Event-ID) the client simply receives the current state first.",
    params(("id" = TaskId, Path, description = "Query id (from the submit answer).")),
    responses(
        (status = 200, content_type = "text/event-stream", body = String, description = "`event: state`, `id: <updated_at>`, `data: <Query as JSON>` records, and `:` heartbeat comments."),
        (status = 404, body = super::error::ErrorBody, description = "Unknown or malformed id (code not_found)."),
        (status = 429, body = super::error::ErrorBody, description = "This client holds its maximum of live streams (code too_many_streams); the connection is closed."),
        (status = 503, body = super::error::ErrorBody, description = "The queue (Redis) is unavailable (code unavailable), or the server holds its maximum of live streams (code streams_full)."),
    )
)]
pub async fn events(
    State(state): State<WebState>,
    ClientIp(client): ClientIp,
    Path(id): Path<String>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let id: TaskId = id.parse().map_err(|_| ApiError::not_found())?;
    let permit = state.live.admit(client)?;
    // Watch before the first read, so a change between the two is not missed.
    let rx = state.live.watch_task(&id);
    let first = app::query_view::read(&state.app, &id)
        .await?
        .ok_or_else(ApiError::not_found)?;
    let watch = Watch {
        ctx: state.app.clone(),
        id,
        rx,
        _permit: permit,
        pending: Some(first),
        last: None,
        finished: false,
    };
    let keep_alive = KeepAlive::new().interval(state.api.keep_alive);
    Ok(Sse::new(watch.into_stream()).keep_alive(keep_alive))
}

/// One open stream's position.
struct Watch {
    ctx: AppContext,
    id: TaskId,
    rx: TaskWatch,
    /// The stream's place under the caps, freed when the stream is dropped.
    _permit: StreamPermit,
    /// A state to send next without waiting (the first one).
    pending: Option<QueryView>,
    /// The last state sent, to skip wake-ups that changed nothing a reader would see.
    last: Option<QueryView>,
    /// The final state went out: end the stream.
    finished: bool,
}

impl Watch {
    fn into_stream(self) -> impl Stream<Item = Result<Event, Infallible>> {
        stream::unfold(self, |mut w| async move {
            if w.finished {
                return None;
            }
            let view = match w.pending.take() {
                Some(v) => v,
                None => w.next_change().await?,
            };
            w.finished = view.status.is_final();
            let event = state_event(&view);
            w.last = Some(view);
            Some((Ok(event), w))
        })
    }

    /// Waits for a wake-up about this id (or a resync) that changed its state. Wake-ups that
    /// came while we read are folded into one, and the re-read below catches up.
    async fn next_change(&mut self) -> Option<QueryView> {
        loop {
            if !self.rx.changed().await {
                return None;
            }
            match app::query_view::read(&self.ctx, &self.id).await {
                Ok(Some(v)) if self.last.as_ref().is_some_and(|l| v.nothing_new_since(l)) => {}
                Ok(Some(v)) => return Some(v),
                // Gone without a trace (purged): nothing more will come.
                Ok(None) => return None,
                // Redis hiccup: the next wake-up, or the resync after the hub reconnects,
                // reads again.
                Err(_) => {}
            }
        }
    }
}

fn state_event(view: &QueryView) -> Event {
    let data = serde_json::to_string(view).unwrap_or_else(|_| "{}".into());
    Event::default()
        .event("state")
        .id(view.updated_at.to_string())
        .data(data)
}
