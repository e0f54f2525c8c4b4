//! The theme toggle without JavaScript: `POST /theme` through the whole router (its layers
//! included) — a bad value is refused with a clear 400, a good one sets the cookie and sends
//! the browser back to the page it came from, and only ever to a path of this site. And the
//! server renders the chosen theme into the page (`<html data-theme>`), so the first paint
//! has it.

use crate::common;
use common::api::{Env, Opts};

use axum::{body::Body, http::Request};

fn form(body: &str) -> Request<Body> {
    Request::post("/theme")
        .header("content-type", "application/x-www-form-urlencoded")
        .header("accept", "text/html")
        .body(Body::from(body.to_string()))
        .unwrap()
}

fn header<'a>(r: &'a common::Reply, name: &str) -> &'a str {
    r.headers
        .get(name)
        .map(|v| v.to_str().unwrap())
        .unwrap_or("")
}

#[tokio::test]
async fn a_bad_theme_is_refused_with_a_clear_400_and_no_cookie() {
    let env = Env::start(Opts::default()).await;
    for body in ["theme=blue&back=%2F", "theme=Dark&back=%2F", "back=%2F", ""] {
        let r = env.send(form(body)).await;
        assert_eq!(r.status, 400, "{body:?}: {}", r.body);
        assert!(
            r.body.contains("theme must be one of: system, light, dark"),
            "{body:?}: {}",
            r.body
        );
        assert_eq!(header(&r, "set-cookie"), "", "{body:?}");
    }
}

#[tokio::test]
async fn a_good_theme_sets_the_cookie_and_goes_back_to_the_page() {
    let env = Env::start(Opts::default()).await;
    let r = env
        .send(form("theme=dark&back=%2Fadmin%2Ftasks%3Fstate%3Ddead"))
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!(header(&r, "location"), "/admin/tasks?state=dead");
    assert_eq!(
        header(&r, "set-cookie"),
        "repoll_theme=dark; Path=/; Max-Age=31536000; SameSite=Lax"
    );
}

#[tokio::test]
async fn back_is_only_ever_a_path_of_this_site() {
    let env = Env::start(Opts::default()).await;
    for back in [
        "https%3A%2F%2Fevil.example%2F",
        "%2F%2Fevil.example%2F",
        "%2F%5Cevil.example",
        "%2F%09%2Fevil.example",
        "evil.example",
    ] {
        let r = env.send(form(&format!("theme=light&back={back}"))).await;
        assert_eq!(r.status, 303, "{back}: {}", r.body);
        assert_eq!(header(&r, "location"), "/", "{back}");
        assert!(header(&r, "set-cookie").starts_with("repoll_theme=light;"));
    }
}

#[tokio::test]
async fn the_page_is_rendered_with_the_chosen_theme() {
    let env = Env::start(Opts::default()).await;
    let page = |cookie: Option<&'static str>| {
        let mut req = Request::get("/");
        if let Some(c) = cookie {
            req = req.header("cookie", c);
        }
        env.send(req.body(Body::empty()).unwrap())
    };
    let r = page(Some("a=1; repoll_theme=dark")).await;
    assert_eq!(r.status, 200);
    assert!(
        r.body.contains(r#"<html lang="en" data-theme="dark""#),
        "{}",
        &r.body[..300.min(r.body.len())]
    );
    assert!(r
        .body
        .contains(r#"aria-pressed="true" data-testid="theme-dark""#));
    let r = page(Some("repoll_theme=<script>")).await;
    assert!(r.body.contains(r#"data-theme="system""#));
    let r = page(None).await;
    assert!(r.body.contains(r#"data-theme="system""#));
}
