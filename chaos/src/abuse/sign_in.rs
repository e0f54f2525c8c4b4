//! The sign-in form: its server function's URL as the page renders it, a burst of wrong
//! passwords, and a right one for a session (the hostile phase reads the dashboard with it).

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use futures::{stream, StreamExt};

/// The sign-in form's target: the server function's URL, as the page renders it (it carries
/// a hash suffix, so it is read rather than guessed).
pub(super) async fn sign_in_action(http: &reqwest::Client, base: &str) -> Result<String, String> {
    let html = http
        .get(format!("{base}/admin/login"))
        .send()
        .await
        .map_err(|e| format!("/admin/login: {e}"))?
        .text()
        .await
        .map_err(|e| format!("/admin/login: {e}"))?;
    // The page has other forms before it (the theme toggle in the top bar): the sign-in form
    // is the one with the password field.
    let form = html
        .match_indices("<form")
        .map(|(i, _)| &html[i..])
        .find(|f| f[..f.find("</form>").unwrap_or(f.len())].contains("name=\"password\""))
        .ok_or("/admin/login has no form with a password field")?;
    let end = form.find('>').unwrap_or(form.len());
    let tag = &form[..end];
    let start = tag
        .find("action=\"")
        .ok_or("the sign-in form has no action")?
        + "action=\"".len();
    let rest = &tag[start..];
    let action = &rest[..rest.find('"').unwrap_or(rest.len())];
    Ok(action.replace("&amp;", "&"))
}

/// `n` parallel form posts with wrong passwords; statuses counted, slowest answer timed.
pub(super) async fn wrong_sign_ins(
    base: &str,
    action: &str,
    n: usize,
) -> (BTreeMap<String, usize>, Duration) {
    let client = match reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .redirect(reqwest::redirect::Policy::none())
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            return (
                BTreeMap::from([(format!("client: {e}"), n)]),
                Duration::ZERO,
            )
        }
    };
    let url = format!("{base}{action}");
    let answers: Vec<(String, Duration)> = stream::iter(0..n)
        .map(|i| {
            let client = client.clone();
            let url = url.clone();
            async move {
                let t = Instant::now();
                let r = client
                    .post(&url)
                    .header("content-type", "application/x-www-form-urlencoded")
                    .body(format!("password=wrong-guess-{i}"))
                    .send()
                    .await;
                let s = match r {
                    Ok(r) => r.status().as_u16().to_string(),
                    Err(e) if e.is_timeout() => "timeout".into(),
                    Err(_) => "error".into(),
                };
                (s, t.elapsed())
            }
        })
        .buffer_unordered(n.max(1))
        .collect()
        .await;
    let mut counts = BTreeMap::new();
    let mut slowest = Duration::ZERO;
    for (s, d) in answers {
        *counts.entry(s).or_default() += 1;
        slowest = slowest.max(d);
    }
    (counts, slowest)
}

/// Signs in with the right `password` (the form post a browser without JavaScript makes) and
/// returns the `Cookie` header that carries the session: every cookie the answer set, as
/// `name=value` pairs.
pub(super) async fn session(
    http: &reqwest::Client,
    base: &str,
    action: &str,
    password: &str,
) -> Result<String, String> {
    let r = http
        .post(format!("{base}{action}"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("password={password}"))
        .send()
        .await
        .map_err(|e| format!("sign-in: {e}"))?;
    let status = r.status();
    let cookies: Vec<String> = r
        .headers()
        .get_all(reqwest::header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| v.split(';').next())
        .map(|pair| pair.trim().to_string())
        .filter(|pair| pair.split_once('=').is_some_and(|(_, v)| !v.is_empty()))
        .collect();
    if status.as_u16() >= 400 || cookies.is_empty() {
        return Err(format!(
            "sign-in answered HTTP {} without a session",
            status.as_u16()
        ));
    }
    Ok(cookies.join("; "))
}
