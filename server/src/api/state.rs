//! The public API's settings and state, kept apart from its handlers so the process state
//! (`crate::state::WebState`) can hold them without importing any route.

use std::time::Duration;

use clap::Args;
use worker::upstream::AnswerReader;
use worker::Callbacks;

use super::rate::Limiter;

/// Settings of the public API.
#[derive(Debug, Clone, Args)]
pub struct ApiArgs {
    /// How long a submit waits for the workers' first poll, so the first answer carries the
    /// upstream's partial data, in ms (0 = answer at once).
    #[arg(long, env = "REPOLL_FIRST_ANSWER_MS", default_value_t = 300)]
    pub first_answer_ms: u64,
    /// Submits (`POST /api/v1/queries`) allowed per client per minute (0 = no limit).
    #[arg(long, env = "REPOLL_RATE_PER_MIN", default_value_t = 60)]
    pub rate_per_min: u32,
    /// Submits a client may make at once before the per-minute rate applies.
    #[arg(long, env = "REPOLL_RATE_BURST", default_value_t = 20)]
    pub rate_burst: u32,
    /// Replaced by REPOLL_TRUST_FORWARDED (one setting for every per-client limit); still
    /// accepted, with a warning, and then means the same.
    #[arg(long, env = "REPOLL_TRUST_FORWARDED_FOR", hide = true,
          value_parser = crate::settings::OnOff, action = clap::ArgAction::Set,
          num_args = 0..=1, require_equals = true, default_value = "false",
          default_missing_value = "true")]
    pub trust_forwarded_for: bool,
    /// Submits per client per minute that refuse what is stored (`Cache-Control: no-cache` or
    /// `max-age`, which make the upstream work), on top of the submit rate (0 = no limit).
    #[arg(long, env = "REPOLL_REFRESH_PER_MIN", default_value_t = 10)]
    pub refresh_per_min: u32,
    /// Interval of heartbeat comments on live streams, in ms.
    #[arg(long, env = "REPOLL_SSE_KEEPALIVE_MS", default_value_t = 15_000)]
    pub sse_keepalive_ms: u64,
    /// A live stream whose reader has not taken the states sent to it this long after a newer
    /// one was published is closed (its unsent bytes discarded), in ms.
    #[arg(long, env = "REPOLL_SSE_SLOW_READER_MS", default_value_t = 30_000)]
    pub sse_slow_reader_ms: u64,
    /// The longest a read or submit waits for the final answer when the caller asks with
    /// `Prefer: wait=N` (RFC 7240), in ms (0 = never wait); kept a second below
    /// REPOLL_REQUEST_TIMEOUT_MS, which would cut the wait into a 408.
    #[arg(long, env = "REPOLL_MAX_WAIT_MS", default_value_t = 10_000)]
    pub max_wait_ms: u64,
    /// A request header that names the caller's tenant (e.g. `X-Api-Key-Id`, set by your API
    /// gateway): when set, a submit's tenant is that header's value (none when absent) and the
    /// body's `tenant` is ignored, so callers cannot pick another's share. Unset: the body's.
    #[arg(long, env = "REPOLL_TENANT_HEADER", value_parser = parse_header_name)]
    pub tenant_header: Option<axum::http::HeaderName>,
}

fn parse_header_name(s: &str) -> Result<axum::http::HeaderName, String> {
    axum::http::HeaderName::from_bytes(s.trim().as_bytes())
        .map_err(|_| format!("{s:?} is not an HTTP header name"))
}

impl Default for ApiArgs {
    /// The flags' defaults, without reading the environment (one source: the attributes).
    fn default() -> Self {
        worker::clap_defaults()
    }
}

/// State the API handlers need beyond [`WebState`]'s shared parts.
#[derive(Clone)]
pub struct ApiState {
    /// `None` when the rate limit is off.
    pub limiter: Option<Limiter>,
    /// `REPOLL_REFRESH_PER_MIN` (`None`: off).
    pub refresh_limiter: Option<Limiter>,
    pub keep_alive: Duration,
    /// `REPOLL_SSE_SLOW_READER_MS`: how long a live stream may be behind before it is dropped.
    pub slow_reader: Duration,
    /// The live streams' shared reads of their queries (one feed per watched id).
    pub feeds: super::query_feed::QueryFeeds,
    /// `REPOLL_METRICS_TOKEN`: bearer token for `/metrics` from other hosts.
    pub metrics_token: Option<std::sync::Arc<str>>,
    /// `REPOLL_TRUST_FORWARDED` (the rule is `app::client`'s).
    pub trust_forwarded: bool,
    /// Callbacks from the upstream (`None`: off, every callback is a 404).
    pub callbacks: Option<CallbackReceiver>,
    /// The upstreams whose providers send webhooks (`/api/v1/webhooks/{upstream}`).
    pub webhooks: Vec<WebhookUpstream>,
    /// `REPOLL_TENANT_HEADER`: the header that names a submit's tenant.
    pub tenant_header: Option<axum::http::HeaderName>,
    /// `REPOLL_MAX_WAIT_MS`: the longest `Prefer: wait` honoured (zero: none).
    pub max_wait: Duration,
}

/// The `Prefer: wait` honoured at most: `max_wait_ms`, but a second short of the request
/// timeout (the timeout layer would answer 408 to a request still waiting), and none when that
/// leaves nothing.
pub fn wait_cap(max_wait_ms: u64, request_timeout: Duration) -> Duration {
    Duration::from_millis(max_wait_ms).min(request_timeout.saturating_sub(Duration::from_secs(1)))
}

impl Default for ApiState {
    fn default() -> Self {
        ApiState::new(&ApiArgs::default(), false)
    }
}

impl ApiState {
    /// `trust_forwarded`: the one trust setting (`REPOLL_TRUST_FORWARDED`, see `app::client`).
    pub fn new(args: &ApiArgs, trust_forwarded: bool) -> Self {
        ApiState {
            limiter: Limiter::new(args.rate_per_min, args.rate_burst, trust_forwarded),
            // A burst of a few, so one page's reload and a retry are not refused.
            refresh_limiter: Limiter::new(args.refresh_per_min, 3, trust_forwarded),
            keep_alive: Duration::from_millis(args.sse_keepalive_ms.max(1)),
            slow_reader: Duration::from_millis(args.sse_slow_reader_ms.max(1)),
            feeds: Default::default(),
            metrics_token: None,
            trust_forwarded,
            callbacks: None,
            webhooks: Vec::new(),
            tenant_header: args.tenant_header.clone(),
            max_wait: Duration::from_millis(args.max_wait_ms),
        }
    }
}

/// What the web process needs to take callbacks: the key that checks tokens, and per upstream
/// its queue and how its answers are read.
#[derive(Clone, Debug)]
pub struct CallbackReceiver {
    pub callbacks: Callbacks,
    pub upstreams: Vec<CallbackUpstream>,
}

/// One upstream as the callback receiver sees it. The token names its upstream (signed), so
/// the body is read with that upstream's pointers and completes a task of its queue only.
#[derive(Clone, Debug)]
pub struct CallbackUpstream {
    /// "" for the default upstream (as in the tokens).
    pub name: String,
    pub queue: queue::Queue,
    pub reader: AnswerReader,
    /// Largest answer body, as for polls (`REPOLL_UPSTREAM_MAX_BODY`; `REPOLL_BODY_LIMIT`
    /// applies to every request too).
    pub max_body: usize,
    /// Largest final result kept (`REPOLL_UPSTREAM_MAX_RESULT`): a larger one ends the task
    /// dead, as it does from a poll.
    pub max_result: usize,
}

/// One upstream whose provider sends webhooks (a webhook secret is set).
#[derive(Clone, Debug)]
pub struct WebhookUpstream {
    /// Its name, as in the webhook URL (`default` for the top-level upstream).
    pub name: String,
    pub queue: queue::Queue,
    pub reader: AnswerReader,
    pub webhooks: worker::Webhooks,
    /// Largest body read, as for polls (`REPOLL_UPSTREAM_MAX_BODY`).
    pub max_body: usize,
    /// Largest final result kept (`REPOLL_UPSTREAM_MAX_RESULT`).
    pub max_result: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_stays_a_second_short_of_the_request_timeout() {
        let s = Duration::from_secs;
        assert_eq!(wait_cap(10_000, s(15)), s(10));
        assert_eq!(wait_cap(30_000, s(15)), s(14));
        assert_eq!(wait_cap(10_000, s(3)), s(2));
        assert_eq!(wait_cap(10_000, Duration::from_millis(800)), Duration::ZERO);
        assert_eq!(wait_cap(0, s(15)), Duration::ZERO);
    }
}
