//! Sessions end when their credential does, and on an admin's word: a session made under one
//! admin password is refused by a process configured with another; a viewer session is
//! refused once no viewer password is configured; "sign out every session" (an audited admin
//! action) ends every session there is — the acting admin's too, who is handed a new one.
//! Real Redis, the real router (`oneshot`), each "restart" a new router on the same Redis.

use crate::common;
use common::admin::*;

use app::{
    auth::Credential,
    pages::admin::{actions::Act, login::Whoami, overview::Overview},
};
use leptos::server_fn::ServerFn;

const NEW_ADMIN_PW: &str = "another password entirely";

/// Whether `cookie` is a session `router` accepts: the overview's data (any role may read it)
/// answers 200, and a refused session 401, never anything else.
async fn accepted(router: &axum::Router, cookie: &str) -> bool {
    let r = call::<Overview>(router, &[], Some(cookie), &[]).await;
    assert!(matches!(r.status, 200 | 401), "{} {}", r.status, r.body);
    r.status == 200
}

#[tokio::test]
async fn a_session_made_under_one_admin_password_is_refused_after_a_restart_with_another() {
    let env = start().await;
    let cookie = sign_in(&env.router, ADMIN_PW, [10, 0, 0, 1]).await.unwrap();
    assert!(accepted(&env.router, &cookie).await);

    let restarted = restarted(
        &env,
        false,
        |s| s.admin = Credential::from_settings(None, Some(NEW_ADMIN_PW)).unwrap(),
        |_| {},
    );
    assert!(!accepted(&restarted, &cookie).await);
    // Not a reader only: the old admin cookie changes nothing either...
    let r = act_as(&restarted, &cookie, &[("op", "pause")]).await;
    assert_eq!(r.status, 401, "{}", r.body);
    assert!(!env.queue.stats().await.unwrap().paused);
    // ...its pages send it to sign in, and it is nobody.
    let page = get_page(&restarted, "/admin", Some(&cookie), [10, 0, 0, 1]).await;
    assert_eq!(page.status, 303);
    let me = call::<Whoami>(&restarted, &[], Some(&cookie), &[]).await;
    assert_eq!((me.status, me.body.as_str()), (200, "null"));
    // The new password signs in, and its session is accepted.
    let fresh = sign_in(&restarted, NEW_ADMIN_PW, [10, 0, 0, 2])
        .await
        .unwrap();
    assert!(accepted(&restarted, &fresh).await);
    assert!(sign_in(&restarted, ADMIN_PW, [10, 0, 0, 3]).await.is_err());
    env.redis.stop().await;
}

/// The same password hashed again (another salt) is another credential: a session follows the
/// configured setting, not only what the password is.
#[tokio::test]
async fn a_rehashed_password_ends_the_sessions_of_the_old_hash() {
    let hash = app::auth::hash_password(ADMIN_PW).unwrap();
    let quiet = server::admin::events::QUIET_REFRESH;
    let env = start_custom(false, quiet, Default::default(), |s| {
        s.admin = Credential::from_settings(Some(&hash), None).unwrap();
    })
    .await;
    let cookie = sign_in(&env.router, ADMIN_PW, [10, 0, 0, 1]).await.unwrap();
    assert!(accepted(&env.router, &cookie).await);
    let same = restarted(
        &env,
        false,
        |s| s.admin = Credential::from_settings(Some(&hash), None).unwrap(),
        |_| {},
    );
    assert!(accepted(&same, &cookie).await, "the same setting keeps it");
    let rehashed = app::auth::hash_password(ADMIN_PW).unwrap();
    let other = restarted(
        &env,
        false,
        |s| s.admin = Credential::from_settings(Some(&rehashed), None).unwrap(),
        |_| {},
    );
    assert!(!accepted(&other, &cookie).await);
    env.redis.stop().await;
}

#[tokio::test]
async fn a_viewer_session_is_refused_once_no_viewer_password_is_configured() {
    let env = start().await;
    let viewer = sign_in(&env.router, VIEWER_PW, [10, 0, 0, 1])
        .await
        .unwrap();
    let admin = sign_in(&env.router, ADMIN_PW, [10, 0, 0, 2]).await.unwrap();
    assert!(accepted(&env.router, &viewer).await);

    let no_viewer = restarted(&env, false, |s| s.viewer = None, |_| {});
    assert!(!accepted(&no_viewer, &viewer).await);
    let page = get_page(&no_viewer, "/admin/tasks", Some(&viewer), [10, 0, 0, 1]).await;
    assert_eq!(page.status, 303);
    // Only the removed role's sessions end.
    assert!(accepted(&no_viewer, &admin).await);
    env.redis.stop().await;
}

#[tokio::test]
async fn signing_out_every_session_ends_them_all_and_is_in_the_audit_log() {
    let env = start().await;
    let r = &env.router;
    let actor = sign_in(r, ADMIN_PW, [10, 0, 0, 1]).await.unwrap();
    let other_admin = sign_in(r, ADMIN_PW, [10, 0, 0, 2]).await.unwrap();
    let viewer = sign_in(r, VIEWER_PW, [10, 0, 0, 3]).await.unwrap();

    // A viewer may not, and nothing ends.
    let refused = act_as(r, &viewer, &[("op", "sign_out_all")]).await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    for c in [&actor, &other_admin, &viewer] {
        assert!(accepted(r, c).await);
    }

    let done = act_as(r, &actor, &[("op", "sign_out_all")]).await;
    assert_eq!(done.status, 200, "{}", done.body);
    assert!(done.body.contains("signed out 3 sessions"), "{}", done.body);
    for c in [&actor, &other_admin, &viewer] {
        assert!(!accepted(r, c).await, "{c} still signed in");
    }
    // The acting admin goes on with the new session the answer handed out.
    let renewed = session_cookie(&done).expect("a new session cookie");
    assert_ne!(renewed, actor);
    assert!(accepted(r, &renewed).await);
    let again = act_as(r, &renewed, &[("op", "pause")]).await;
    assert_eq!(again.status, 200, "{}", again.body);

    let audit = env.queue.audit_log(5).await.unwrap();
    let entry = audit
        .iter()
        .find(|e| e.action == "sign_out_all")
        .expect("audited");
    assert_eq!(
        (entry.who.as_str(), entry.target.as_str(), entry.count),
        ("admin", "sessions", 3)
    );
    // In Redis: the renewed session only.
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("{admintest}:session:*")
        .query_async(&mut raw_redis(&env).await)
        .await
        .unwrap();
    assert_eq!(keys, vec![session_key(&renewed)]);
    env.redis.stop().await;
}

/// The dashboard offers it to an admin, behind its question, without JavaScript too: the
/// question's form posts `sign_out_all`, and the post goes back to the overview signed in
/// with the new session.
#[tokio::test]
async fn the_overview_asks_before_signing_everyone_out() {
    let env = start().await;
    let r = &env.router;
    let actor = sign_in(r, ADMIN_PW, [10, 0, 0, 1]).await.unwrap();
    let viewer = sign_in(r, VIEWER_PW, [10, 0, 0, 2]).await.unwrap();
    let page = get_page(
        r,
        "/admin?confirm=sign_out_all",
        Some(&actor),
        [10, 0, 0, 1],
    )
    .await;
    assert_eq!(page.status, 200);
    assert!(
        testid_text(&page.body, "sign-out-all-question").contains("Sign out every session?"),
        "{}",
        page.body
    );
    assert!(page.body.contains("value=\"sign_out_all\""));
    let viewer_page = get_page(
        r,
        "/admin?confirm=sign_out_all",
        Some(&viewer),
        [10, 0, 0, 2],
    )
    .await;
    assert!(
        !viewer_page.body.contains("sign-out-all"),
        "offered to a viewer"
    );

    let posted = send(
        r,
        "POST",
        Act::PATH,
        form(&[("op", "sign_out_all")]),
        Some(&actor),
        &[
            ("accept", "text/html"),
            ("referer", &format!("http://{HOST}/admin")),
        ],
        [10, 0, 0, 1],
    )
    .await;
    assert!(posted.status == 302 || posted.status == 303, "{posted:?}");
    let location = posted.headers["location"].to_str().unwrap();
    assert!(
        location.trim_end_matches('?').ends_with("/admin"),
        "{location}"
    );
    let renewed = session_cookie(&posted).expect("a new session cookie");
    assert!(accepted(r, &renewed).await);
    assert!(!accepted(r, &actor).await && !accepted(r, &viewer).await);
    env.redis.stop().await;
}
