//! The query pages: `/` asks (a form that works without JavaScript) and `/q/<id>` shows one
//! query — rendered complete on the server, then kept live in the browser by the query's
//! Server-Sent-Events stream (`/api/v1/queries/<id>/events`; the browser side is
//! `query_live`). A stored result says how old it is and whether it is being refreshed
//! (`query_age`), and a refreshed result replaces a stale one live.

use leptos::prelude::*;
use leptos_router::hooks::use_params_map;

use super::format::{duration, plural, progress_percent, utc};
use super::query_age::Tone;
use super::service_hold::{service_hold, ServiceState};
use super::widgets::{JsonBlock, ProgressBar};
use crate::query_view::{pretty, Freshness, QueryStatus, QueryView};

/// Pretty text longer than this is folded into a `<details>` so a large body does not push
/// the page's status out of sight.
const FOLD_CHARS: usize = 4000;

/// The tenant of every query asked on this page (the API's callers name their own): the
/// page's visitors share one fair share of each upstream, however many API tenants there are.
#[cfg(feature = "ssr")]
const PAGE_TENANT: &str = "public";

/// Submits a query and sends the browser to its shareable page. With JavaScript the router
/// follows the redirect in place; without it the form post gets a plain 302. Shares the
/// public API's per-client rate limit (429 with Retry-After when over it).
#[server]
pub async fn submit_query(
    query: String,
    upstream: Option<String>,
) -> Result<String, ServerFnError> {
    use crate::query_view::QueryError;
    let ctx = crate::context::app_context()?;
    if let Err(wait) = crate::context::SubmitGate::admit_current().await {
        let response = expect_context::<leptos_axum::ResponseOptions>();
        response.set_status(http::StatusCode::TOO_MANY_REQUESTS);
        response.insert_header(http::header::RETRY_AFTER, http::HeaderValue::from(wait));
        return Err(ServerFnError::new(format!(
            "Too many queries from your address; try again in {wait} s."
        )));
    }
    let ask = crate::query_view::Ask {
        text: &query,
        upstream: upstream.as_deref(),
        tenant: PAGE_TENANT,
        ..Default::default()
    };
    let submitted = crate::query_view::submit_with(&ctx, &ask).await;
    match submitted {
        Ok((view, _created)) => {
            leptos_axum::redirect(&format!("/q/{}", view.id));
            // A form post from a program (`curl -d query=…`: neither this page's script, which
            // asks for JSON, nor a browser, which asks for HTML and gets Leptos's 302) goes on
            // to the query's page too: 303 See Other, not 200 and a bare JSON id.
            let accepts = |what: &str| {
                use_context::<http::request::Parts>().is_some_and(|p| {
                    p.headers
                        .get(http::header::ACCEPT)
                        .and_then(|v| v.to_str().ok())
                        .is_some_and(|v| v.contains(what))
                })
            };
            if !accepts("application/json") && !accepts("text/html") {
                if let Some(response) = use_context::<leptos_axum::ResponseOptions>() {
                    response.set_status(http::StatusCode::SEE_OTHER);
                }
            }
            Ok(view.id.into())
        }
        // The user's mistake: a 4xx with the reason (a bare server-function error is a 500).
        // A plain form post (no JavaScript, `Accept: text/html`) keeps Leptos's redirect back
        // to the form, which shows the reason; a status would stop the browser there.
        Err(e @ (QueryError::Invalid(_) | QueryError::UnknownUpstream(_))) => {
            let msg = e.to_string();
            let accepts_html = use_context::<http::request::Parts>().is_some_and(|p| {
                p.headers
                    .get(http::header::ACCEPT)
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v.contains("text/html"))
            });
            if !accepts_html {
                if let Some(response) = use_context::<leptos_axum::ResponseOptions>() {
                    response.set_status(http::StatusCode::UNPROCESSABLE_ENTITY);
                }
            }
            Err(ServerFnError::new(msg))
        }
        // Generic words only; the cause is in the server log.
        Err(e) => Err(ServerFnError::new(e.to_string())),
    }
}

/// The upstreams a query can be sent to, the default one first (one name: nothing to choose).
#[server]
pub async fn upstream_names() -> Result<Vec<String>, ServerFnError> {
    Ok(crate::context::app_context()?.upstream_names())
}

/// The current view of one query; `None` for an unknown id.
#[server]
pub async fn read_query(id: String) -> Result<Option<QueryView>, ServerFnError> {
    let ctx = crate::context::app_context()?;
    // Not an id at all: unknown, like an id nobody asked for (no Redis read).
    let Ok(id) = id.parse::<crate::query_view::TaskId>() else {
        return Ok(None);
    };
    crate::query_view::read(&ctx, &id)
        .await
        .map_err(|e| ServerFnError::new(e.to_string()))
}

/// The query page: where a user asks the upstream API through repoll.
#[component]
pub fn QueryPage() -> impl IntoView {
    let submit = ServerAction::<SubmitQuery>::new();
    // Only our own words: a refused post without JavaScript comes back with its error in the
    // URL, which anyone can write (see `form_error`).
    let error = move || super::form_error::error(submit);
    // Effects run only in the browser: the flag turns true once the page is hydrated (tests
    // wait for it before clicking; without JavaScript the form works as a plain post).
    let hydrated = RwSignal::new(false);
    Effect::new(move |_| hydrated.set(true));
    let upstreams = Resource::new(|| (), |_| upstream_names());
    // The text the input starts with: a refused post without JavaScript comes back with it
    // (the server renders this page from `/?query=…`, server/src/web.rs `form_error_page`),
    // and a link may carry one.
    let kept = leptos_router::hooks::use_query_map()
        .with_untracked(|q| q.get("query"))
        .unwrap_or_default();
    // A choice only where there is one: a deployment with named upstreams.
    let choose =
        move || {
            upstreams.get().and_then(Result::ok).filter(|u| u.len() > 1).map(|names| {
            view! {
                " "
                <select name="upstream" aria-label="Upstream API" data-testid="query-upstream">
                    {names
                        .into_iter()
                        .map(|n| {
                            let label = n.clone();
                            view! { <option value=n>{label}</option> }
                        })
                        .collect_view()}
                </select>
            }
        })
        };
    view! {
        <section
            class="panel"
            data-testid="query-panel"
            data-hydrated=move || if hydrated.get() { "true" } else { "false" }
        >
            <h1>"Query"</h1>
            <p>
                "repoll answers at once with what is known and keeps polling the slow upstream API for you."
            </p>
            <ActionForm action=submit>
                <input
                    type="text"
                    name="query"
                    required
                    autocomplete="off"
                    placeholder="e.g. order-7 polls=4"
                    value=kept
                    aria-label="Query"
                    data-testid="query-input"
                />
                <Suspense fallback=|| ()>{choose}</Suspense>
                " "
                <button type="submit" class="primary" data-testid="query-submit">
                    "Ask"
                </button>
            </ActionForm>
            {move || {
                error().map(|e| view! { <p class="err" data-testid="query-submit-error">{e}</p> })
            }}
        </section>
    }
}

/// `/q/<id>`: one query's state, complete in the server's HTML (the route renders async, so
/// it works without JavaScript), then live once hydrated.
#[component]
pub fn QueryResultPage() -> impl IntoView {
    let params = use_params_map();
    let id = move || params.read().get("id").unwrap_or_default();
    let initial = Resource::new(id, read_query);
    // Not worth failing the page over: unknown counts as running.
    let hold = Resource::new(id, |id| async move {
        service_hold(id).await.unwrap_or_default()
    });
    view! {
        <Suspense fallback=|| {
            view! {
                <section class="panel">
                    <p>"Loading…"</p>
                </section>
            }
        }>
            {move || Suspend::new(async move {
                let hold = hold.await;
                match initial.await {
                    Ok(Some(v)) => view! { <QueryState initial=v hold /> }.into_any(),
                    Ok(None) => {
                        #[cfg(feature = "ssr")]
                        {
                            if let Some(resp) = use_context::<leptos_axum::ResponseOptions>() {
                                resp.set_status(http::StatusCode::NOT_FOUND);
                            }
                        }
                        view! {
                            <section class="panel">
                                <h1>"Unknown query"</h1>
                                <p data-testid="query-unknown">
                                    "Nothing is known about this query (it may have expired). "
                                    <a href="/">"Ask it again"</a>
                                </p>
                            </section>
                        }
                            .into_any()
                    }
                    Err(e) => {
                        view! {
                            <section class="panel">
                                <p class="err" data-testid="query-error">
                                    {format!("Cannot read this query right now: {}", super::form_error::from_call(&e))}
                                </p>
                            </section>
                        }
                            .into_any()
                    }
                }
            })}
        </Suspense>
    }
}

/// One query's live state. `now` is the browser's clock once hydrated (ticking), before that
/// the server's read time, so the server-rendered text and the hydrated text agree.
#[component]
fn QueryState(initial: QueryView, hold: ServiceState) -> impl IntoView {
    let state = RwSignal::new(initial);
    let now = RwSignal::new(None::<i64>);
    let hold = RwSignal::new(hold);
    #[cfg(feature = "hydrate")]
    super::query_live::follow(state, now, hold);
    let paused = move || hold.with(|h| h.paused);
    let running = move || state.with(|v| v.status == QueryStatus::Processing);
    let waiting_for_resume = move || paused() && running();
    // A pause says so first: it holds the query whatever the breaker does.
    let waiting_for_upstream = move || {
        hold.with(|h| h.breaker_until)
            .filter(|_| !paused() && running())
    };
    // Then whether anything polls at all (a stopped worker would otherwise read as "next
    // poll due now" for ever).
    let waiting_for_worker = move || hold.with(|h| h.unpolled) && !paused() && running();

    let clock = move || now.get().unwrap_or_else(|| state.with(|v| v.as_of));
    let status = move || state.with(|v| v.status);
    let badge_class = move || match status() {
        QueryStatus::Processing => "badge warn",
        QueryStatus::Done => "badge ok",
        QueryStatus::Failed => "badge err",
    };
    let elapsed = move || {
        let (s, created, updated, completed) =
            state.with(|v| (v.status, v.created_at, v.updated_at, v.completed_at));
        let span = |ms: i64| duration(ms.max(0));
        match s {
            QueryStatus::Processing => format!("running for {}", span(clock() - created)),
            QueryStatus::Done => format!("took {}", span(completed.unwrap_or(updated) - created)),
            QueryStatus::Failed => format!("ended after {}", span(updated - created)),
        }
    };
    let polls = move || polls_text(status(), state.with(|v| v.polls));
    let next_poll = move || {
        if status() != QueryStatus::Processing {
            return None;
        }
        let at = state.with(|v| v.next_poll_at);
        let text = match at {
            _ if paused() => "paused".to_string(),
            _ if waiting_for_upstream().is_some() => "waiting for the upstream".to_string(),
            _ if waiting_for_worker() => "nothing is polling right now".to_string(),
            Some(at) if at > clock() => format!("next poll in {}", duration(at - clock())),
            Some(_) => "next poll due now".to_string(),
            None => "polling the upstream now".to_string(),
        };
        let title = at.map(|at| format!("next poll at {}", utc(at)));
        Some(view! { " · " <span data-testid="query-next-poll" title=title>{text}</span> })
    };
    let paused_notice = move || {
        waiting_for_resume().then(|| {
            view! {
                <p class="banner paused" role="status" data-testid="query-paused">
                    <strong>"The service is paused."</strong>
                    " Your query is kept and will continue when the service resumes; this page updates by itself."
                </p>
            }
        })
    };
    let breaker_notice = move || {
        waiting_for_upstream().map(|until| {
            let left = until - clock();
            let when = if left > 0 {
                format!("the next try is in {} (at {})", duration(left), utc(until))
            } else {
                "it is being tried again now".to_string()
            };
            view! {
                <p class="banner paused" role="status" data-testid="query-breaker">
                    <strong>"The upstream API is unavailable right now."</strong>
                    {format!(" Your query is kept; {when}. This page updates by itself.")}
                </p>
            }
        })
    };
    let worker_notice = move || {
        waiting_for_worker().then(|| {
            view! {
                <p class="banner paused" role="status" data-testid="query-unpolled">
                    <strong>"Nothing is polling right now."</strong>
                    " No worker of this service is running. Your query is kept and continues when one starts; this page updates by itself."
                </p>
            }
        })
    };
    let progress = move || {
        state.with(|v| {
            (v.status == QueryStatus::Processing)
                .then(|| v.partial.as_ref().and_then(progress_percent))
                .flatten()
                .map(|p| view! { <ProgressBar percent=p /> })
        })
    };
    // How old a stored result is, and whether it is being refreshed: always in the page (an
    // empty line when there is nothing to say), so screen readers announce its changes.
    let freshness = move || {
        let clock = clock();
        let paused = paused();
        state.with(|v| super::query_age::freshness_line(v, clock, paused))
    };
    let freshness_class = move || match freshness() {
        Some((Tone::Warn, _)) => "freshness banner paused",
        Some((Tone::Busy, _)) => "freshness banner busy",
        _ => "freshness muted",
    };
    let freshness_state = move || {
        state.with(|v| match (v.freshness, v.stale_reason) {
            _ if v.status != QueryStatus::Done => "",
            (Some(Freshness::Fresh), _) => "fresh",
            (Some(Freshness::Stale), None) => "stale",
            (Some(Freshness::Stale), Some(r)) => r.as_str(),
            (None, _) => "",
        })
    };
    // Without JavaScript the page refreshes itself until nothing more will come (the query
    // runs, or its stored result is being refreshed). The markup is a constant (never
    // upstream data), set as inner HTML so hydration does not walk into it.
    let refresh = move || {
        (!state.with(QueryView::is_final)).then(|| {
            view! { <noscript inner_html=r#"<meta http-equiv="refresh" content="3">"# /> }
        })
    };
    let error = move || {
        state.with(|v| v.error.clone()).map(|e| {
            view! { <p class="err" data-testid="query-error"><crate::pages::reveal::UpstreamText text=e /></p> }
        })
    };
    let data = move || {
        state.with(|v| {
            v.data().map(|d| {
                let text = pretty(d);
                let label = if v.status == QueryStatus::Done {
                    "Result"
                } else {
                    "Partial data so far"
                };
                if text.len() > FOLD_CHARS {
                    let summary = format!("{label} ({} lines)", text.lines().count());
                    view! {
                        <details>
                            <summary>{summary}</summary>
                            <JsonBlock pretty=text testid="query-data" />
                        </details>
                    }
                    .into_any()
                } else {
                    view! {
                        <h2>{label}</h2>
                        <JsonBlock pretty=text testid="query-data" />
                    }
                    .into_any()
                }
            })
        })
    };
    // A failed query can be asked again from its page: the same form post as the query form
    // (a new life of the task; plain HTML, so it works without JavaScript and the page that
    // follows is the new life's, live). A failure the upstream gave for good is kept for the
    // failed window (negative caching): asking before its end answers it again, said here.
    let retry = move || {
        (status() == QueryStatus::Failed).then(|| {
            use leptos::server_fn::ServerFn;
            let (query, upstream, kept_until) = state.with(|v| {
                let kept = (v.freshness == Some(Freshness::Fresh))
                    .then_some(v.fresh_until)
                    .flatten();
                (v.query.clone(), v.upstream.clone(), kept)
            });
            let named = (upstream != "default" && !upstream.is_empty())
                .then(|| view! { <input type="hidden" name="upstream" value=upstream /> });
            let kept = kept_until.filter(|&at| at > clock()).map(|at| {
                view! {
                    " "
                    <span class="muted" data-testid="query-retry-kept">
                        {format!(
                            "The upstream refused this query; until {} asking again answers this failure.",
                            utc(at),
                        )}
                    </span>
                }
            });
            view! {
                <form method="post" action=SubmitQuery::PATH data-testid="query-retry">
                    <input type="hidden" name="query" value=query />
                    {named}
                    <button type="submit" class="primary">"Try again"</button>
                    {kept}
                </form>
            }
        })
    };
    let href = move || state.with(|v| format!("/q/{}", v.id));
    view! {
        <section class="panel query-state" data-testid="query-state">
            <h1>
                "Query " <code data-testid="query-text">{move || state.with(|v| v.query.clone())}</code>
                {move || {
                    let up = state.with(|v| v.upstream.clone());
                    (up != "default" && !up.is_empty())
                        .then(|| view! { " " <small data-testid="query-upstream-name">{format!("via {up}")}</small> })
                }}
            </h1>
            <p>
                <strong class=badge_class data-testid="query-status">
                    {move || status().as_str()}
                </strong>
                " · "
                <span data-testid="query-elapsed">{elapsed}</span>
                " · "
                <span data-testid="query-polls">{polls}</span>
                {next_poll}
            </p>
            <p
                class=freshness_class
                role="status"
                data-testid="query-freshness"
                data-freshness=freshness_state
            >
                {move || freshness().map(|(_, text)| text)}
            </p>
            {paused_notice}
            {breaker_notice}
            {worker_notice}
            {refresh}
            {error}
            {retry}
            {progress}
            {data}
            <p class="muted">
                "Shareable link: " <a href=href data-testid="query-link">{href}</a> " · "
                <a href="/">"Ask another query"</a>
            </p>
        </section>
    }
}

/// "3 polls so far" while the query runs; "3 polls" once it is over.
fn polls_text(status: QueryStatus, n: u32) -> String {
    let n = plural(u64::from(n), "poll", "polls");
    if status == QueryStatus::Processing {
        format!("{n} so far")
    } else {
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polls_are_counted_in_words() {
        assert_eq!(polls_text(QueryStatus::Processing, 1), "1 poll so far");
        assert_eq!(polls_text(QueryStatus::Processing, 0), "0 polls so far");
        assert_eq!(polls_text(QueryStatus::Done, 5), "5 polls");
        assert_eq!(polls_text(QueryStatus::Failed, 1), "1 poll");
    }
}
