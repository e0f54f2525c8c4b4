//! The Upstreams page: every upstream API this deployment talks to (the default one and the
//! config file's named ones), each a queue of its own — its circuit breaker and since when,
//! its calls, error rate, latency and hit ratio over the last 15 minutes (its answers charts
//! are the overview's, per upstream), its rate limit (configured and
//! used), its work by state, its busiest tenants (ready and in flight, each a link to its
//! tasks) with the per-tenant limits — and, per upstream, its breaker's actions and pause /
//! resume (one API paused while the others flow).
//!
//! Why a page of its own: with several APIs the first question in an incident is "which one
//! is failing", and the overview shows one queue.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

use super::actions::{Act, ActButton, ActionResult};
use super::admin_op::AdminOp;
use super::chart::hit_ratio_words;
use super::frame::{session, signed_in, signed_out, AdminFrame};
use super::live::provide_live;
use super::ui::{can_act, error_text, or_dash};
use crate::pages::widgets::TimeAt;
use model::{BreakerInfo, BreakerState, PauseInfo, TenantCount, ThroughputBucket};

/// Tenants listed per upstream (the busiest first).
pub const TOP_TENANTS: usize = 5;

/// Minutes the recent figures (calls, errors, latency) cover.
pub const RECENT_MINUTES: usize = 15;

/// One upstream's row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpstreamRow {
    /// `default` or the config file's name.
    pub name: String,
    /// Its queue (the hash tag of its keys).
    pub queue: String,
    /// Its partitions (hash tags its tasks spread over; 1 = one slot).
    #[serde(default)]
    pub partitions: usize,
    pub ready: u64,
    pub waiting: u64,
    pub retrying: u64,
    /// Tasks leased now: the upstream calls in flight (or about to be).
    pub leased: u64,
    pub dead: u64,
    pub results: u64,
    pub paused: bool,
    /// Since when and by whom, while paused (shown in the page's banner).
    #[serde(default)]
    pub pause: Option<PauseInfo>,
    pub breaker: Option<BreakerInfo>,
    /// The last [`RECENT_MINUTES`] merged: completions, polls, errors and call latency.
    pub recent: Option<ThroughputBucket>,
    /// Configured calls per second (0 = no limit) and burst.
    pub rate_per_sec: u32,
    pub rate_burst: u32,
    /// The busiest [`TOP_TENANTS`] tenants: ready and in flight.
    pub tenants: Vec<TenantCount>,
    /// The per-tenant limits in words ("" = none).
    pub tenant_limits: String,
}

impl UpstreamRow {
    /// Calls to the upstream in the recent window (each completion, poll and error is one).
    pub fn calls(&self) -> u64 {
        self.recent
            .as_ref()
            .map_or(0, |b| b.completed + b.polled + b.failed)
    }
}

/// What the page shows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpstreamsData {
    pub rows: Vec<UpstreamRow>,
    pub now_ms: i64,
}

/// Every upstream's state.
#[server(prefix = "/admin/fn")]
pub async fn upstreams() -> Result<UpstreamsData, ServerFnError> {
    use super::call::{admin_call, AdminCall};
    let AdminCall { ctx, .. } = admin_call(crate::auth::Role::Viewer).await?;
    let failed = |e: queue::QueueError| crate::auth::unreachable("upstreams read", e);
    // One upstream after another (at most 17), each with its three reads together.
    let mut rows = Vec::new();
    for (name, q, rate) in ctx.upstreams_with_rates() {
        let (stats, breaker, recent, tenants, pause) = tokio::join!(
            q.stats(),
            q.breaker(),
            q.throughput(RECENT_MINUTES, RECENT_MINUTES),
            q.tenants(TOP_TENANTS),
            q.pause_info()
        );
        let stats = stats.map_err(failed)?;
        // The flag may go between the two reads; the counts' own flag decides (as on the
        // overview).
        let pause = pause
            .map_err(failed)?
            .filter(|_| stats.paused)
            .or_else(|| stats.paused.then(PauseInfo::default));
        rows.push(UpstreamRow {
            name: name.to_string(),
            queue: q.config().name.clone(),
            partitions: q.partitions(),
            tenants: tenants.map_err(failed)?,
            tenant_limits: limits_text(&q.config().tenants),
            breaker: breaker.map_err(failed)?,
            recent: recent.map_err(failed)?.into_iter().last(),
            rate_per_sec: rate.per_sec,
            rate_burst: rate.burst,
            pause,
            ..from_stats(stats)
        });
    }
    let now_ms = ctx.queue.now_ms().await.map_err(failed)?;
    Ok(UpstreamsData { rows, now_ms })
}

/// "at most 4 in flight, 2/s (burst 5) per tenant", or "" without limits.
#[cfg(feature = "ssr")]
fn limits_text(l: &queue::TenantLimits) -> String {
    let mut parts = Vec::new();
    if l.concurrency > 0 {
        parts.push(format!("at most {} in flight", l.concurrency));
    }
    if l.rate_per_sec > 0.0 {
        parts.push(format!("{}/s (burst {})", l.rate_per_sec, l.burst.max(1)));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("{} per tenant", parts.join(", "))
    }
}

#[cfg(feature = "ssr")]
fn from_stats(s: model::Stats) -> UpstreamRow {
    UpstreamRow {
        name: String::new(),
        queue: String::new(),
        partitions: 1,
        ready: s.ready,
        waiting: s.waiting,
        retrying: s.retrying,
        leased: s.leased,
        dead: s.dead,
        results: s.results,
        paused: s.paused,
        pause: None,
        breaker: None,
        recent: None,
        rate_per_sec: 0,
        rate_burst: 0,
        tenants: Vec::new(),
        tenant_limits: String::new(),
    }
}

/// `/admin/upstreams`.
#[component]
pub fn UpstreamsPage() -> impl IntoView {
    // Resources are created here, before the frame, so their order (which hydration
    // matches by) never depends on when the session check resolves.
    let live = provide_live();
    let me = session();
    let action = ServerAction::<Act>::new();
    let data = Resource::new(
        move || (live.tick.get(), action.version().get()),
        move |_| async move {
            if !signed_in(me).await {
                return signed_out();
            }
            upstreams().await
        },
    );
    view! {
        <AdminFrame me>
            <section class="panel">
                <h1>"Upstreams"</h1>
                <p class="muted">
                    {format!(
                        "Each upstream API has a queue of its own: its circuit breaker, rate limit and workers. \
                         Calls, errors, latency and the hit ratio (answers from the store, fresh, stale or \
                         negative, of all answers) cover the last {RECENT_MINUTES} minutes."
                    )}
                </p>
                <ActionResult action />
                <div class="data">
                    <Transition fallback=|| view! { <p>"Reading…"</p> }>
                        {move || data.get().map(|r| match r {
                            Ok(d) => view! { <UpstreamTable data=d action /> }.into_any(),
                            Err(e) => view! { <p class="err" data-testid="upstreams-error">{error_text(&e)}</p> }.into_any(),
                        })}
                    </Transition>
                </div>
            </section>
        </AdminFrame>
    }
}

#[component]
fn UpstreamTable(data: UpstreamsData, action: ServerAction<Act>) -> impl IntoView {
    let now = data.now_ms;
    let banners = data
        .rows
        .iter()
        .filter_map(|r| {
            r.pause
                .clone()
                .map(|p| view! { <PausedUpstream name=r.name.clone() pause=p now /> })
        })
        .collect_view();
    // A viewer gets the table without its column of actions.
    let may_act = can_act();
    let rows = data
        .rows
        .into_iter()
        .map(|r| {
            let calls = r.calls();
            let errors = r.recent.as_ref().map_or(0, |b| b.failed);
            let error_rate = if calls > 0 {
                format!("{:.1} %", errors as f64 * 100.0 / calls as f64)
            } else {
                "—".into()
            };
            let latency = r
                .recent
                .as_ref()
                .and_then(|b| b.latency)
                .map(|p| format!("{} / {} ms", p.p50, p.p95));
            let per_min = calls as f64 / RECENT_MINUTES as f64;
            let rate = if r.rate_per_sec == 0 {
                format!("no limit · {per_min:.1} calls/min")
            } else {
                format!(
                    "{}/s (burst {}) · used {:.1} %",
                    r.rate_per_sec,
                    r.rate_burst,
                    per_min / 60.0 * 100.0 / f64::from(r.rate_per_sec)
                )
            };
            let breaker = match &r.breaker {
                None => view! { <span class="badge ok">"closed"</span> }.into_any(),
                Some(b) => {
                    let word = match b.state {
                        BreakerState::Open => "open",
                        BreakerState::HalfOpen => "half-open",
                    };
                    view! {
                        <span class="badge err">{word}</span>
                        " since " <TimeAt now at=b.since_ms past=true />
                        <br />
                        <small class="muted">{b.reason.clone()}</small>
                    }
                    .into_any()
                }
            };
            let action_button = if r.breaker.is_some() {
                view! { <ActButton action op=AdminOp::CloseBreaker id=r.name.clone() label="Close breaker" testid="close-breaker" /> }.into_any()
            } else {
                view! { <ActButton action op=AdminOp::OpenBreaker id=r.name.clone() label="Open breaker (15 min)" testid="open-breaker" /> }.into_any()
            };
            let pause_button = if r.paused {
                view! { <ActButton action op=AdminOp::Resume id=r.name.clone() label="Resume" testid="resume-upstream" /> }.into_any()
            } else {
                view! { <ActButton action op=AdminOp::Pause id=r.name.clone() label="Pause" testid="pause-upstream" /> }.into_any()
            };
            let paused_badge = r.paused.then(|| view! { " " <span class="badge warn" data-testid="upstream-paused">"paused"</span> });
            let tenants = tenant_cell(&r);
            let answers = answers_cell(&r);
            let testid = format!("upstream-{}", r.name);
            view! {
                <tr data-testid=testid>
                    // The actions sit under the name, in the first column: a row wider than
                    // the page scrolls, and its actions must not be what scrolls out of view.
                    <td>
                        <strong>{r.name.clone()}</strong>{paused_badge}<br /><small class="muted">{r.queue.clone()}{(r.partitions > 1).then(|| format!(" · {} partitions", r.partitions))}</small>
                        {may_act.then(|| view! { <div class="row-actions">{action_button} {pause_button}</div> })}
                    </td>
                    <td data-testid="upstream-breaker">{breaker}</td>
                    <td class="num">{calls}</td>
                    <td class="num" data-testid="upstream-error-rate">{error_rate}</td>
                    <td class="num">{or_dash(latency.unwrap_or_default())}</td>
                    <td>{rate}</td>
                    <td data-testid="upstream-answers">{answers}</td>
                    <td class="num">{r.leased}</td>
                    <td class="num">{format!("{} / {} / {}", r.ready, r.waiting, r.retrying)}</td>
                    <td class="num">{r.dead}</td>
                    <td class="num">{r.results}</td>
                    <td data-testid="upstream-tenants">{tenants}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        {banners}
        <div class="table-scroll" tabindex="0" role="region" aria-label="Upstreams">
            <table data-testid="upstreams-table">
                <thead>
                    <tr>
                        <th>"Upstream"</th>
                        <th>"Breaker"</th>
                        <th>"Calls"</th>
                        <th>"Errors"</th>
                        <th>"Latency p50 / p95"</th>
                        <th>"Rate limit"</th>
                        <th>"Hit ratio (answers)"</th>
                        <th>"In flight"</th>
                        <th>"Ready / waiting / retrying"</th>
                        <th>"Dead"</th>
                        <th>"Results"</th>
                        <th>"Busiest tenants (ready · in flight)"</th>
                    </tr>
                </thead>
                <tbody>{rows}</tbody>
            </table>
        </div>
    }
}

/// The banner of a paused upstream, as the overview's for its queue: since when, by whom,
/// and what it means (its Resume button is under its name in the table).
#[component]
fn PausedUpstream(name: String, pause: PauseInfo, now: i64) -> impl IntoView {
    let by = if pause.who.is_empty() {
        String::new()
    } else {
        format!(" by {}", pause.who)
    };
    let since = if pause.at_ms > 0 {
        view! { <TimeAt now at=pause.at_ms past=true /> }.into_any()
    } else {
        view! { <span>"a while ago"</span> }.into_any()
    };
    let testid = format!("paused-banner-{name}");
    view! {
        <div class="banner paused" role="status" data-testid=testid>
            <strong>{format!("Upstream {name} paused")}</strong>
            <span>
                {since}
                {format!("{by}. Workers claim none of its tasks until it is resumed; its queries wait.")}
            </span>
        </div>
    }
}

/// The upstream's hit ratio over the recent minutes, its answers from the store of all its
/// answers, and a link to its answers charts (the overview of that upstream, any window).
fn answers_cell(r: &UpstreamRow) -> impl IntoView {
    let recent = r.recent.clone().unwrap_or_default();
    let mut href = "/admin?window=1h".to_string();
    if r.name != "default" {
        href.push_str("&upstream=");
        href.push_str(&r.name);
    }
    view! {
        <span class="num" data-testid="upstream-hit-ratio">{hit_ratio_words(&recent)}</span>
        <br />
        <small class="muted">
            <span class="num" data-testid="upstream-hits">{format!("{} of {}", recent.hits(), recent.answers())}</span>
            {format!(" · {} fresh, {} stale, {} negative · ", recent.fresh, recent.stale, recent.negative)}
            <a href=href aria-label=format!("answers charts of {}", r.name)>"charts"</a>
        </small>
    }
}

/// The busiest tenants of one upstream, each a link to its tasks (a `tenant:` search in that
/// upstream's list), and the per-tenant limits under them.
fn tenant_cell(r: &UpstreamRow) -> impl IntoView {
    let upstream = r.name.clone();
    let items = r
        .tenants
        .iter()
        .map(|t| {
            let mut href = format!("/admin/tasks?q=tenant%3A{}", t.tenant);
            if upstream != "default" {
                href.push_str("&upstream=");
                href.push_str(&upstream);
            }
            let testid = format!("tenant-{}", t.tenant);
            view! {
                <li data-testid=testid>
                    <a href=href>{t.tenant.clone()}</a>
                    {format!(" {} · {}", t.ready, t.leased)}
                </li>
            }
        })
        .collect_view();
    let empty = r
        .tenants
        .is_empty()
        .then(|| view! { <span class="muted">"—"</span> });
    let limits = (!r.tenant_limits.is_empty())
        .then(|| view! { <br /><small class="muted">{r.tenant_limits.clone()}</small> });
    view! { <ul class="plain">{items}</ul> {empty} {limits} }
}
