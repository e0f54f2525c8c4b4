//! `GET /api/v1/queries/{id}/events`: one query's state as Server-Sent Events.
//!
//! Every event is the full state (event name `state`, data = the same JSON as
//! `GET /api/v1/queries/{id}`, id = the state's `updated_at`), so a client never has to merge
//! anything and a reconnect needs no replay: the stream always starts with the current state
//! (a `Last-Event-ID` header is accepted and simply not needed). The stream wakes on the
//! process's [`Live`](crate::live::Live) hub, re-reads the state from Redis, sends it only if
//! it changed, and closes after the final (`done`/`failed`) state. Heartbeat comments keep
//! proxies from timing the connection out.

use std::{convert::Infallible, sync::Arc};

use app::{
    context::AppContext,
    query::{is_task_id, QueryView},
};
use axum::{
    extract::{Path, State},
    response::sse::{Event, KeepAlive, Sse},
};
use futures::{stream, Stream};
use tokio::sync::broadcast::{self, error::RecvError};

use super::error::ApiError;
use crate::{live::LiveEvent, web::WebState};

/// Opens the stream; 404 (JSON, before any streaming) for an unknown id.
pub async fn events(
    State(state): State<WebState>,
    Path(id): Path<String>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    if !is_task_id(&id) {
        return Err(ApiError::not_found());
    }
    // Subscribe before the first read, so a change between the two is not missed.
    let rx = state.live.subscribe();
    let first = app::query::read(&state.app, &id)
        .await?
        .ok_or_else(ApiError::not_found)?;
    let watch = Watch {
        ctx: state.app.clone(),
        id,
        rx,
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
    id: String,
    rx: broadcast::Receiver<Arc<LiveEvent>>,
    /// A state to send next without waiting (the first one).
    pending: Option<QueryView>,
    /// The last state sent, to skip wake-ups that changed nothing visible.
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

    /// Waits for a wake-up about this id (or a resync) that changed its state.
    async fn next_change(&mut self) -> Option<QueryView> {
        loop {
            match self.rx.recv().await {
                Ok(ev) => match &*ev {
                    LiveEvent::Task { id, .. } if *id == self.id => {}
                    LiveEvent::Resync => {}
                    _ => continue,
                },
                // Missed wake-ups: the re-read below catches up.
                Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => return None,
            }
            match app::query::read(&self.ctx, &self.id).await {
                Ok(Some(v)) if self.last.as_ref().is_some_and(|l| l.same_state(&v)) => {}
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
