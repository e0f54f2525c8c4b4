//! Every page's Content-Security-Policy names a fresh nonce, and every script of the page
//! carries it — the routed pages and the not-found page alike (the 404 page was rendered
//! without the request's context once, so its scripts carried another nonce than its policy
//! and the browser refused them: it never hydrated).

use crate::common;
use common::admin::*;

#[tokio::test]
async fn pages_carry_a_nonce_policy_and_their_scripts_the_same_nonce() {
    let env = start().await;
    for (path, status) in [("/admin/login", 200), ("/", 200), ("/no/such/page", 404)] {
        let r = get_page(&env.router, path, None, [10, 0, 0, 14]).await;
        assert_eq!(r.status, status, "{path}");
        let csp = r.headers["content-security-policy"]
            .to_str()
            .unwrap()
            .to_string();
        let nonce = csp
            .split("'nonce-")
            .nth(1)
            .and_then(|rest| rest.split('\'').next())
            .unwrap_or_else(|| panic!("{path}: no nonce in {csp}"));
        assert!(csp.contains("frame-ancestors 'none'"), "{path}: {csp}");
        assert_eq!(r.headers["x-frame-options"], "DENY");
        assert_eq!(r.headers["x-content-type-options"], "nosniff");
        assert!(r.headers.contains_key("referrer-policy"));
        // Every script tag of the page carries this response's nonce (else the browser would
        // refuse to hydrate it).
        let scripts = r.body.matches("<script").count();
        assert!(scripts > 0, "{path}: {}", r.body);
        assert_eq!(
            r.body.matches(&format!("nonce=\"{nonce}\"")).count(),
            scripts,
            "{path}: scripts without this response's nonce {nonce}: {}",
            r.body
        );
        // A second response has another nonce.
        let again = get_page(&env.router, path, None, [10, 0, 0, 14]).await;
        assert!(!again.headers["content-security-policy"]
            .to_str()
            .unwrap()
            .contains(nonce));
    }
    env.redis.stop().await;
}
