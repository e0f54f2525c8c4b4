//! What the server process provides to server functions through Leptos context.
//!
//! Server functions run inside the axum process but are called by URL, so they cannot take
//! the server's state as arguments; the server installs an [`AppContext`] for every request
//! (see `server/src/web.rs`) and server functions read it with [`app_context`].

use leptos::prelude::*;

/// Shared, cheap-to-clone handles the web process owns.
#[derive(Clone)]
pub struct AppContext {
    /// The queue (holds a multiplexed Redis connection that reconnects by itself).
    pub queue: queue::Queue,
    /// Deadline and attempt limits stamped on every task this process creates.
    pub enqueue_policy: queue::EnqueuePolicy,
    /// Admin passwords, session and sign-in settings (see [`crate::auth`]).
    pub admin: crate::auth::AuthConfig,
    /// How long a submit waits for the workers' first poll so the first answer carries
    /// partial data (see `crate::query_view::submit`); zero answers at once.
    pub first_answer: std::time::Duration,
}

/// The request's [`AppContext`], or a generic error if the server forgot to provide it.
pub fn app_context() -> Result<AppContext, ServerFnError> {
    use_context::<AppContext>().ok_or_else(|| {
        tracing::error!("AppContext missing from the Leptos context");
        ServerFnError::new("server misconfigured")
    })
}

/// Admits or refuses one more query submission from the client of the current request: the
/// same per-client rate limit as `POST /api/v1/queries`, so the page's form is not a way
/// around it. `Err(seconds)` says how long the client must wait. The server provides it (see
/// `server/src/web.rs`) when a limit is configured; without one every submission is admitted.
#[derive(Clone)]
pub struct SubmitGate(pub std::sync::Arc<GateFn>);

/// The check behind a [`SubmitGate`]: the request's parts in, `Err(seconds to wait)` out.
pub type GateFn = dyn Fn(&http::request::Parts) -> Result<(), u64> + Send + Sync;

impl SubmitGate {
    /// Checks the current request (server functions only). A request whose parts cannot be
    /// read is admitted: the gate is a limit on floods, not an authentication step.
    pub async fn admit_current() -> Result<(), u64> {
        let Some(gate) = use_context::<SubmitGate>() else {
            return Ok(());
        };
        match leptos_axum::extract::<http::request::Parts>().await {
            Ok(parts) => (gate.0)(&parts),
            Err(_) => Ok(()),
        }
    }
}
