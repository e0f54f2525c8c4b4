//! The process state every handler shares, and the extractors that read it. Below the routes
//! in the module layers: it holds the API's and the dashboard's state (`api::state`,
//! `admin::state`) but imports none of their handlers, so both can take `State<WebState>`.

use app::context::AppContext;
use axum::extract::FromRef;
use leptos::prelude::LeptosOptions;

/// Everything a request handler may need.
#[derive(Clone, FromRef)]
pub struct WebState {
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
