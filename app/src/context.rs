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
    /// partial data (see `crate::query::submit`); zero answers at once.
    pub first_answer: std::time::Duration,
}

/// The request's [`AppContext`], or a generic error if the server forgot to provide it.
pub fn app_context() -> Result<AppContext, ServerFnError> {
    use_context::<AppContext>().ok_or_else(|| {
        tracing::error!("AppContext missing from the Leptos context");
        ServerFnError::new("server misconfigured")
    })
}
