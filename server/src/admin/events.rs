//! `GET /admin/events`: the dashboard's live stream (Server-Sent Events).
//!
//! It carries no data, only "something changed" (`changed`) or "you may have missed things"
//! (`resync`, also sent first on every (re)connection); pages answer either by re-reading
//! what they show through their server functions. So the stream never leaks more than the
//! fact of activity, and the pages' own auth and rendering stay the only path to data.
//!
//! When nothing happens for [`QUIET_REFRESH`] it sends `changed` anyway (see there).
//!
//! Bursts are coalesced: after an event the stream waits [`COALESCE`] and folds everything
//! that arrived meanwhile into one, so a busy queue costs each open page at most ~4 re-reads
//! per second. The session is re-checked before each event; a signed-out stream ends.
//!
//! Each event carries its own name as data: browsers silently drop an event without data.

use std::{convert::Infallible, time::Duration};

use axum::{
    extract::State,
    http::{HeaderMap, StatusCode},
    response::{
        sse::{Event, KeepAlive, Sse},
        IntoResponse, Response,
    },
};
use futures::stream::{self, Stream};
use tokio::sync::broadcast::{self, error::TryRecvError};

pub use super::state::QUIET_REFRESH;
use crate::{
    live_hub::{LiveEvent, StreamPermit},
    state::{ClientIp, WebState},
};

/// Quiet time after an event before the next one may be sent.
pub const COALESCE: Duration = Duration::from_millis(250);

/// The handler: 401 without a session; 429 / 503 over the stream caps (see `crate::live`).
pub async fn stream(
    State(state): State<WebState>,
    ClientIp(client): ClientIp,
    headers: HeaderMap,
) -> Response {
    let Some(id) = app::auth::cookie_id(&headers) else {
        return (StatusCode::UNAUTHORIZED, "sign in required").into_response();
    };
    let sessions = app::auth::Sessions::of(&state.app);
    match sessions.get(&id).await {
        Ok(Some(_)) => {}
        Ok(None) => return (StatusCode::UNAUTHORIZED, "sign in required").into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "session lookup failed");
            return (StatusCode::SERVICE_UNAVAILABLE, model::REDIS_UNREACHABLE).into_response();
        }
    }
    let permit = match state.live.admit(client) {
        Ok(p) => p,
        Err(refused) => return crate::api::ApiError::from(refused).into_response(),
    };
    let rx = state.live.subscribe();
    // The heartbeat interval of every live stream (REPOLL_SSE_KEEPALIVE_MS).
    Sse::new(events(rx, sessions, id, permit, state.admin.quiet_refresh))
        .keep_alive(KeepAlive::new().interval(state.api.keep_alive))
        .into_response()
}

struct Cursor {
    /// The stream's place under the caps, freed when the stream is dropped.
    _permit: StreamPermit,
    rx: broadcast::Receiver<std::sync::Arc<LiveEvent>>,
    sessions: app::auth::Sessions,
    id: String,
    first: bool,
}

fn events(
    rx: broadcast::Receiver<std::sync::Arc<LiveEvent>>,
    sessions: app::auth::Sessions,
    id: String,
    permit: StreamPermit,
    quiet: Duration,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let start = Cursor {
        _permit: permit,
        rx,
        sessions,
        id,
        first: true,
    };
    stream::unfold(start, move |mut c| async move {
        if c.first {
            c.first = false;
            return Some((Ok(Event::default().event("resync").data("resync")), c));
        }
        let mut resync = match tokio::time::timeout(quiet, c.rx.recv()).await {
            Ok(Ok(ev)) => matches!(*ev, LiveEvent::Resync),
            Ok(Err(broadcast::error::RecvError::Lagged(_))) => true,
            Ok(Err(broadcast::error::RecvError::Closed)) => return None,
            // Quiet: a plain `changed`, so what time alone changes gets re-read.
            Err(_elapsed) => false,
        };
        tokio::time::sleep(COALESCE).await;
        loop {
            match c.rx.try_recv() {
                Ok(ev) => resync |= matches!(*ev, LiveEvent::Resync),
                Err(TryRecvError::Lagged(_)) => resync = true,
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Closed) => return None,
            }
        }
        // Signed out (or expired) meanwhile: end the stream; the page's next read says why.
        if !matches!(c.sessions.get(&c.id).await, Ok(Some(_))) {
            return None;
        }
        let name = if resync { "resync" } else { "changed" };
        Some((Ok(Event::default().event(name).data(name)), c))
    })
}
