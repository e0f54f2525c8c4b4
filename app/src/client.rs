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
//!   address with every request). "Last" spans repeated headers: the last entry of the last
//!   `X-Forwarded-For` line, whether the proxy appended to the client's line or added its own,
//!   read as bytes (a client's line that is not text must not make an earlier, client-written
//!   entry the last one). When that entry is no address, or there is no header, the peer is
//!   used.

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
            .next_back()
            .and_then(|line| line.as_bytes().rsplit(|b| *b == b',').next())
            .and_then(|entry| std::str::from_utf8(entry).ok())
            .and_then(|entry| entry.trim().parse::<IpAddr>().ok());
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
        // An empty last entry is no address either: never the client's entry before it.
        assert_eq!(client_ip(&headers(&["6.6.6.6", ""]), peer, true), peer);
        assert_eq!(client_ip(&headers(&["6.6.6.6,"]), peer, true), peer);
    }

    /// The proxy appended to the client's own line, which the client made non-text: the
    /// proxy's entry is still the last one (skipping the line made the client's entry on an
    /// earlier line the key).
    #[test]
    fn a_line_that_is_not_text_does_not_hand_the_key_to_an_earlier_line() {
        let peer = Some(IpAddr::from([10, 0, 0, 9]));
        let mut h = HeaderMap::new();
        h.append("x-forwarded-for", "6.6.6.6".parse().unwrap());
        h.append(
            "x-forwarded-for",
            http::HeaderValue::from_bytes(b"\xff\xfe, 2.2.2.2").unwrap(),
        );
        assert_eq!(client_ip(&h, peer, true), Some(IpAddr::from([2, 2, 2, 2])));
    }
}
