//! The process state every handler shares, and the extractors that read it. Below the routes
//! in the module layers: it holds the API's and the dashboard's state (`api::state`,
//! `admin::state`) but imports none of their handlers, so both can take `State<WebState>`.

use app::context::AppContext;
use axum::extract::FromRef;
use leptos::prelude::LeptosOptions;

/// Everything a request handler may need, behind one `Arc`: axum clones the state for every
/// request (each `State` extractor, each `from_fn_with_state` layer), and a clone of the
/// parts themselves (Leptos options, queues, settings) cost allocations on every answer,
/// hits included (issue 42's profile: ≈ 5 % of a hit's CPU in those clones and drops).
#[derive(Clone)]
pub struct WebState(std::sync::Arc<WebParts>);

impl WebState {
    pub fn new(parts: WebParts) -> Self {
        Self(std::sync::Arc::new(parts))
    }
}

impl std::ops::Deref for WebState {
    type Target = WebParts;
    fn deref(&self) -> &WebParts {
        &self.0
    }
}

/// The Leptos routes read their options from the state (`leptos_routes_with_context`).
impl FromRef<WebState> for LeptosOptions {
    fn from_ref(state: &WebState) -> Self {
        state.leptos_options.clone()
    }
}

/// What [`WebState`] shares.
pub struct WebParts {
    pub leptos_options: LeptosOptions,
    pub app: AppContext,
    /// Fan-out of the queue's Pub/Sub notifications to live streams.
    pub live: crate::live_hub::Live,
    /// Public API settings and state (rate limiter, ...).
    pub api: crate::api::state::ApiState,
    /// Admin settings and state (credentials, sessions, ...).
    pub admin: crate::admin::state::AdminState,
}

/// The client address of a request, by the one rule every per-client limit shares
/// (`app::client`): the TCP peer, or the entry a trusted proxy appended.
pub struct ClientIp(pub Option<std::net::IpAddr>);

impl axum::extract::FromRequestParts<WebState> for ClientIp {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &WebState,
    ) -> Result<Self, Self::Rejection> {
        Ok(ClientIp(app::client::client_ip_of(
            parts,
            state.api.trust_forwarded,
        )))
    }
}
