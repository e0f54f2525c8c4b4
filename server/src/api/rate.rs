//! Per-client rate limit of `POST /api/v1/queries`, so one client cannot flood the upstream
//! with new tasks.
//!
//! A token bucket per client address (GCRA from the `governor` crate: `per_min` tokens a
//! minute, up to `burst` at once). The address is `app::client::client_ip`'s, the one rule all
//! per-client limits share (the TCP peer, or the entry a trusted proxy appended). Without one
//! (tests driving the router directly) all requests share one bucket.

use std::{net::IpAddr, num::NonZeroU32, sync::Arc};

use axum::http::request::Parts;
use governor::{
    clock::{Clock, DefaultClock},
    state::keyed::DefaultKeyedStateStore,
    Quota, RateLimiter,
};

/// Buckets kept before idle ones are dropped (a full bucket carries no information).
const MAX_TRACKED_CLIENTS: usize = 10_000;

type Keyed = RateLimiter<Option<IpAddr>, DefaultKeyedStateStore<Option<IpAddr>>, DefaultClock>;

/// The process-wide limiter. Cheap to clone.
#[derive(Clone)]
pub struct Limiter {
    inner: Arc<Keyed>,
    trust_forwarded_for: bool,
}

impl Limiter {
    /// `None` when `per_min` is 0 (limit off).
    pub fn new(per_min: u32, burst: u32, trust_forwarded_for: bool) -> Option<Limiter> {
        let per_min = NonZeroU32::new(per_min)?;
        let burst = NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN);
        Some(Limiter {
            inner: Arc::new(RateLimiter::keyed(
                Quota::per_minute(per_min).allow_burst(burst),
            )),
            trust_forwarded_for,
        })
    }

    /// Takes one token for `client`, or says how many whole seconds to wait.
    pub fn check(&self, client: Option<IpAddr>) -> Result<(), u64> {
        if self.inner.len() > MAX_TRACKED_CLIENTS {
            self.inner.retain_recent();
        }
        self.inner.check_key(&client).map_err(|not_until| {
            let wait = not_until.wait_time_from(DefaultClock::default().now());
            // Round up: "retry in 0 s" would invite an immediate retry that fails again.
            wait.as_secs() + u64::from(wait.subsec_nanos() > 0)
        })
    }
}

impl Limiter {
    /// Takes one token for the client that sent `parts` (the address rule of `app::client`).
    pub fn check_parts(&self, parts: &Parts) -> Result<(), u64> {
        self.check(app::client::client_ip_of(parts, self.trust_forwarded_for))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_limited_with_a_wait() {
        let l = Limiter::new(60, 2, false).unwrap();
        let a = Some(IpAddr::from([10, 0, 0, 1]));
        assert!(l.check(a).is_ok());
        assert!(l.check(a).is_ok());
        let wait = l.check(a).unwrap_err();
        assert!((1..=2).contains(&wait), "{wait}");
        // Another client has its own bucket.
        assert!(l.check(Some(IpAddr::from([10, 0, 0, 2]))).is_ok());
    }

    #[test]
    fn zero_rate_is_off() {
        assert!(Limiter::new(0, 5, false).is_none());
    }
}
