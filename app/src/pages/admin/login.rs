//! Signing in and out, and "who am I" for the page frame.
//!
//! Sign-in is a plain form posting to a server function, so it works without JavaScript. Any
//! failure says only "wrong password" (no hint whether a viewer or admin password exists);
//! attempts are limited per client address (counted before the check), and the password is
//! checked by argon2 off the async threads, a bounded number at once. Success stores a session in
//! Redis (with the fingerprint of the credential it was made with: see `crate::auth`), sets the
//! cookie and redirects to /admin.

use leptos::prelude::*;

use crate::auth::Me;

/// The signed-in user, or None. Never refuses: pages decide what to do without a session.
#[server(prefix = "/admin/fn")]
pub async fn whoami() -> Result<Option<Me>, ServerFnError> {
    Ok(crate::auth::current().await?.map(|s| Me {
        user: s.user,
        role: s.role,
    }))
}

/// Checks the password and, if it is right, starts a session.
#[server(prefix = "/admin/fn")]
pub async fn sign_in(password: String) -> Result<(), ServerFnError> {
    use crate::auth::refuse;
    use http::StatusCode;

    let ctx = crate::context::app_context()?;
    let settings = ctx.admin.settings();
    let parts = use_context::<http::request::Parts>()
        .ok_or_else(|| ServerFnError::new("server misconfigured"))?;
    let unavailable = |e: queue::QueueError| crate::auth::unreachable("sign-in", e);
    let client = crate::client::client_label(crate::client::client_ip_of(
        &parts,
        settings.trust_forwarded,
    ));
    let limiter = ctx.queue.sign_in_attempts(&client, settings.max_failures);
    // Counted before the check, atomically: parallel guesses cannot all pass a "not blocked
    // yet" test while the first ones are still being verified.
    if !limiter.take().await.map_err(unavailable)? {
        tracing::warn!(client, "sign-in refused: too many attempts");
        return Err(refuse(
            StatusCode::TOO_MANY_REQUESTS,
            "too many attempts; wait a minute",
        ));
    }
    // Bounded input: argon2 over megabytes would be a cheap way to burn our CPU.
    let role = if password.is_empty() || password.len() > 1024 {
        None
    } else {
        // Each argon2 check takes ~19 MiB and a core for tens of ms: a bounded number run at
        // once, and a sign-in that cannot get a slot soon is told to come back.
        let Ok(Ok(slot)) = tokio::time::timeout(
            crate::auth::PASSWORD_CHECK_WAIT,
            ctx.admin.check_slots().acquire_owned(),
        )
        .await
        else {
            tracing::warn!(client, "sign-in refused: password checks busy");
            return Err(refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "busy; try again in a moment",
            ));
        };
        let cfg = ctx.admin.clone();
        tokio::task::spawn_blocking(move || {
            let _slot = slot;
            cfg.check(&password)
        })
        .await
        .ok()
        .flatten()
    };
    let Some(role) = role else {
        tracing::warn!(client, "sign-in failed");
        return Err(refuse(StatusCode::UNAUTHORIZED, "wrong password"));
    };
    if let Err(e) = limiter.give_back().await {
        tracing::warn!(error = %e, "sign-in: attempt not given back");
    }
    start_session(&ctx, role).await?;
    tracing::info!(client, role = role.as_str(), "signed in");
    leptos_axum::redirect("/admin");
    Ok(())
}

/// Starts a session for `role` (made with the credential configured for it now) and hands
/// its cookie to the browser with this response.
#[cfg(feature = "ssr")]
pub(super) async fn start_session(
    ctx: &crate::context::AppContext,
    role: crate::auth::Role,
) -> Result<(), ServerFnError> {
    use crate::auth::{request_is_https, set_cookie, Sessions};
    use http::{header::SET_COOKIE, HeaderValue};

    let settings = ctx.admin.settings();
    let created_ms = ctx.queue.now_ms().await.unwrap_or_default();
    let id = Sessions::of(ctx)
        .create(role, created_ms)
        .await
        .map_err(|e| crate::auth::unreachable("session store", e))?;
    let secure = settings.cookie_secure
        || use_context::<http::request::Parts>()
            .is_some_and(|p| request_is_https(&p, settings.trust_forwarded));
    let cookie = HeaderValue::from_str(&set_cookie(&id, settings.session_ttl_s, secure))
        .map_err(|_| ServerFnError::new("server misconfigured"))?;
    if let Some(res) = use_context::<leptos_axum::ResponseOptions>() {
        res.append_header(SET_COOKIE, cookie);
    }
    Ok(())
}

/// Ends the session (in Redis and in the browser) and goes to the sign-in page.
#[server(prefix = "/admin/fn")]
pub async fn sign_out() -> Result<(), ServerFnError> {
    use crate::auth::{clear_cookie, cookie_id, request_is_https, Sessions};
    use http::{header::SET_COOKIE, HeaderValue};

    let ctx = crate::context::app_context()?;
    let settings = ctx.admin.settings();
    if let Some(parts) = use_context::<http::request::Parts>() {
        if let Some(id) = cookie_id(&parts.headers) {
            if let Err(e) = Sessions::of(&ctx).delete(&id).await {
                return Err(crate::auth::unreachable("sign-out", e));
            }
        }
        let secure = settings.cookie_secure || request_is_https(&parts, settings.trust_forwarded);
        if let (Some(res), Ok(v)) = (
            use_context::<leptos_axum::ResponseOptions>(),
            HeaderValue::from_str(&clear_cookie(secure)),
        ) {
            res.append_header(SET_COOKIE, v);
        }
    }
    leptos_axum::redirect("/admin/login");
    Ok(())
}

/// The sign-in page.
#[component]
pub fn LoginPage() -> impl IntoView {
    let sign_in = ServerAction::<SignIn>::new();
    view! {
        <section class="panel login">
            <h1>"Sign in to the dashboard"</h1>
            <ActionForm action=sign_in>
                <label>
                    "Password "
                    <input
                        type="password"
                        name="password"
                        autocomplete="current-password"
                        required
                        data-testid="login-password"
                    />
                </label>
                <button type="submit" data-testid="login-submit">
                    "Sign in"
                </button>
            </ActionForm>
            <p class="err" data-testid="login-error">
                {move || crate::pages::form_error::error(sign_in)}
            </p>
        </section>
    }
}
