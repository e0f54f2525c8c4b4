//! Who is asking: the one place that decides a request's client address.
//!
//! Every per-client limit (the API's submit rate, the sign-in failure count, the live-stream
//! caps) keys on this address, so they must all agree on it: an attacker who can pick their
//! own key for one limiter has no limit there. The rule:
//!
//! - Without `REPOLL_TRUST_FORWARDED` the address is the TCP peer. `X-Forwarded-For` is
//!   ignored: any client can send it.
//! - With it, repoll sits behind **one** reverse proxy that appends the address it saw to
//!   `X-Forwarded-For`. The **last** entry is the one that proxy wrote; everything before it
//!   came from the client and is ignored (taking the first entry let a client rotate its
//!   address with every request). Without the header the peer is used.

use std::net::{IpAddr, SocketAddr};

use http::{request::Parts, HeaderMap};

/// The client address of a request with these `headers` from `peer` (see the module doc).
/// `None` only when there is no peer either (a request driven through the router in a test).
pub fn client_ip(
    headers: &HeaderMap,
    peer: Option<IpAddr>,
    trust_forwarded: bool,
) -> Option<IpAddr> {
    if trust_forwarded {
        let last = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .rfind(|s| !s.trim().is_empty())
            .and_then(|s| s.trim().parse::<IpAddr>().ok());
        if last.is_some() {
            return last;
        }
    }
    peer
}

/// [`client_ip`] of a request's parts; the peer comes from axum's `ConnectInfo`.
pub fn client_ip_of(parts: &Parts, trust_forwarded: bool) -> Option<IpAddr> {
    let peer = parts
        .extensions
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    client_ip(&parts.headers, peer, trust_forwarded)
}

/// The address as text for logs and Redis keys ("unknown" without one).
pub fn client_label(ip: Option<IpAddr>) -> String {
    ip.map_or_else(|| "unknown".into(), |ip| ip.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(xff: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in xff {
            h.append("x-forwarded-for", v.parse().unwrap());
        }
        h
    }

    #[test]
    fn untrusted_ignores_the_header() {
        let peer = Some(IpAddr::from([127, 0, 0, 1]));
        assert_eq!(client_ip(&headers(&["1.1.1.1"]), peer, false), peer);
        assert_eq!(client_ip(&headers(&["1.1.1.1"]), None, false), None);
    }

    #[test]
    fn trusted_takes_the_entry_the_proxy_appended() {
        let peer = Some(IpAddr::from([10, 0, 0, 9]));
        // A client-chosen first entry must not become the key.
        let h = headers(&["6.6.6.6, 7.7.7.7", "2.2.2.2"]);
        assert_eq!(client_ip(&h, peer, true), Some(IpAddr::from([2, 2, 2, 2])));
        let h = headers(&["9.9.9.9, 3.3.3.3"]);
        assert_eq!(client_ip(&h, peer, true), Some(IpAddr::from([3, 3, 3, 3])));
        // No header, or a last entry that is no address: the peer.
        assert_eq!(client_ip(&headers(&[]), peer, true), peer);
        assert_eq!(client_ip(&headers(&["1.1.1.1, junk"]), peer, true), peer);
    }
}
