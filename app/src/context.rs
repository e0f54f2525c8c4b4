//! What the server process provides to server functions through Leptos context.
//!
//! Server functions run inside the axum process but are called by URL, so they cannot take
//! the server's state as arguments; the server installs an [`AppContext`] for every request
//! (see `server/src/web.rs`) and server functions read it with [`app_context`].

use leptos::prelude::*;

/// Shared, cheap-to-clone handles the web process owns.
#[derive(Clone)]
pub struct AppContext {
    /// The default upstream's queue (holds a multiplexed Redis connection that reconnects by
    /// itself); the admin dashboard shows this one.
    pub queue: queue::Queue,
    /// The named upstreams (`[upstreams.<name>]` in the config file), each with a queue of its
    /// own; empty when the deployment talks to one upstream.
    pub named: NamedUpstreams,
    /// Deadline and attempt limits stamped on every task this process creates.
    pub enqueue_policy: queue::EnqueuePolicy,
    /// Admin passwords, session and sign-in settings (see [`crate::auth`]).
    pub admin: crate::auth::AuthConfig,
    /// How long a submit waits for the workers' first poll so the first answer carries
    /// partial data (see `crate::query_view::submit`); zero answers at once.
    pub first_answer: std::time::Duration,
    /// `REPOLL_TRACE_URL`: the trace viewer's URL with `{trace_id}`, through which the task
    /// page links a task's traces; `None` shows the ids as text.
    pub trace_url: Option<std::sync::Arc<str>>,
}

/// One named upstream as the web process sees it: where its tasks go and how they are run.
#[derive(Clone)]
pub struct NamedUpstream {
    pub name: String,
    pub queue: queue::Queue,
    pub enqueue_policy: queue::EnqueuePolicy,
    pub rate: RateLimit,
}

/// An upstream's configured call rate (shown on the Upstreams page; the workers enforce it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RateLimit {
    /// Calls per second across every worker; 0 = no limit.
    pub per_sec: u32,
    pub burst: u32,
}

/// The named upstreams, by name, and the default upstream's rate. Cheap to clone.
#[derive(Clone, Default)]
pub struct NamedUpstreams {
    pub list: std::sync::Arc<Vec<NamedUpstream>>,
    pub default_rate: RateLimit,
}

/// No upstream of that name; the message lists the known ones (safe to show).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown upstream {name:?}; known: {}", known.join(", "))]
pub struct UnknownUpstream {
    pub name: String,
    pub known: Vec<String>,
}

impl AppContext {
    /// Every upstream's name, the default one first.
    pub fn upstream_names(&self) -> Vec<String> {
        std::iter::once(queue::DEFAULT_UPSTREAM.to_string())
            .chain(self.named.list.iter().map(|u| u.name.clone()))
            .collect()
    }

    /// The queue and task policy of `upstream` (`None` or "default": the default upstream).
    pub fn upstream(
        &self,
        upstream: Option<&str>,
    ) -> Result<(&queue::Queue, &queue::EnqueuePolicy), UnknownUpstream> {
        match upstream.map(str::trim) {
            None | Some("") => Ok((&self.queue, &self.enqueue_policy)),
            Some(n) if n == queue::DEFAULT_UPSTREAM => Ok((&self.queue, &self.enqueue_policy)),
            Some(n) => self
                .named
                .list
                .iter()
                .find(|u| u.name == n)
                .map(|u| (&u.queue, &u.enqueue_policy))
                .ok_or_else(|| UnknownUpstream {
                    name: n.chars().take(64).collect(),
                    known: self.upstream_names(),
                }),
        }
    }

    /// Every upstream's queue with its name, the default one first.
    pub fn queues(&self) -> impl Iterator<Item = (&str, &queue::Queue)> {
        std::iter::once((queue::DEFAULT_UPSTREAM, &self.queue))
            .chain(self.named.list.iter().map(|u| (u.name.as_str(), &u.queue)))
    }

    /// The upstream whose queue knows task `id` (its task, result or history), with what it
    /// knows; `None` when no upstream does. Ids cover their upstream, so at most one knows it;
    /// the default upstream is asked first (one read with a single upstream).
    pub async fn find_task(
        &self,
        id: &queue::TaskId,
    ) -> queue::Result<Option<(&str, &queue::Queue, queue::TaskDetail)>> {
        for (name, q) in self.queues() {
            if let Some(d) = q.get(id).await? {
                return Ok(Some((name, q, d)));
            }
        }
        Ok(None)
    }

    /// The queue an action on task `id` goes to: the upstream that knows it, else the default
    /// one (whose script then finds nothing and says so).
    pub async fn queue_of_task(&self, id: &queue::TaskId) -> queue::Result<&queue::Queue> {
        if self.named.list.is_empty() {
            return Ok(&self.queue);
        }
        Ok(self.find_task(id).await?.map_or(&self.queue, |(_, q, _)| q))
    }

    /// Every upstream's queue, name and configured rate, the default one first.
    pub fn upstreams_with_rates(&self) -> Vec<(&str, &queue::Queue, RateLimit)> {
        std::iter::once((
            queue::DEFAULT_UPSTREAM,
            &self.queue,
            self.named.default_rate,
        ))
        .chain(
            self.named
                .list
                .iter()
                .map(|u| (u.name.as_str(), &u.queue, u.rate)),
        )
        .collect()
    }
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
