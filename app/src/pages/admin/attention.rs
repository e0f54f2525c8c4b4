//! The attention strip under every admin page's navigation: what is wrong right now, in words,
//! each with the link that shows it — no live worker, every worker quiet, a breaker open, an
//! upstream paused, the oldest ready task waiting too long, stuck leases, Redis unreachable.
//! Red while nothing is polling; amber otherwise; absent when all is well.
//!
//! Why on every page: an operator who opens the dead list after an outage must not have to
//! scroll the overview to learn that the only worker stopped. Which states count and in what
//! order is `model::attention` (one rule, unit-tested there); this module reads every
//! upstream's state and words it. It re-reads on every live tick, the quiet refresh included,
//! so a worker that dies silently shows within the quiet refresh plus its heartbeat's grace.

use leptos::prelude::*;

use crate::pages::format::{ago, duration, plural};
use model::attention::{Attention, Concern};
use model::BreakerState;

/// Every upstream's concerns, most urgent first; `RedisUnreachable` alone when a read failed
/// (the strip says so instead of an error).
#[server(prefix = "/admin/fn")]
pub async fn read_attention() -> Result<Attention, ServerFnError> {
    use super::call::{admin_call, AdminCall};
    use crate::auth::Role;
    use model::attention::{concerns, UpstreamState};
    let AdminCall { ctx, .. } = admin_call(Role::Viewer).await?;
    let settings = ctx.admin.settings();
    let (gone_after, ready_age) = (settings.gone_after_ms, settings.attention_ready_age_ms);
    let mut out = Attention {
        upstreams: ctx.upstream_names().len(),
        ..Attention::default()
    };
    for (name, q) in ctx.queues() {
        // Learnt by this process's heartbeat: its counts would be the old layout's, and its
        // reads by id refuse, so this is all it can say of the queue.
        if let Some(queue::QueueError::LayoutChanged { have, now, .. }) = q.layout_changed() {
            out.concerns.push(Concern::Repartition {
                upstream: name.to_string(),
                have,
                now,
            });
            continue;
        }
        let (counts, workers, breaker, pause) =
            tokio::join!(q.counts(), q.workers(), q.breaker(), q.pause_info());
        let (counts, workers, breaker, pause) = match (counts, workers, breaker, pause) {
            (Ok(c), Ok(w), Ok(b), Ok(p)) => (c, w, b, p),
            (c, w, b, p) => {
                let error = [c.err(), w.err(), b.err(), p.err()]
                    .into_iter()
                    .flatten()
                    .next()
                    .map(|e| e.to_string())
                    .unwrap_or_default();
                tracing::warn!(error = %error, upstream = name, "the attention strip could not read Redis");
                out.concerns = vec![Concern::RedisUnreachable];
                return Ok(out);
            }
        };
        out.now_ms = out.now_ms.max(counts.now_ms);
        out.concerns.extend(concerns(
            &UpstreamState {
                upstream: name,
                counts: &counts,
                workers: &workers,
                breaker: breaker.as_ref(),
                pause: pause.as_ref(),
            },
            gone_after,
            ready_age,
        ));
    }
    // Stable: within one urgency, upstreams keep their configured order.
    out.concerns.sort_by_key(Concern::rank);
    Ok(out)
}

/// The link for an upstream's own view: the overview for the default one (its workers and
/// queue actions are there), the Upstreams page for a named one.
fn upstream_href(upstream: &str, anchor: &str) -> String {
    if upstream == model::DEFAULT_UPSTREAM {
        format!("/admin#{anchor}")
    } else {
        format!(
            "/admin?upstream={}#{anchor}",
            crate::pages::format::encode_component(upstream)
        )
    }
}

/// One concern in words, with where to look: (text, link text, href).
pub fn words(c: &Concern, upstreams: usize, now: i64) -> (String, &'static str, String) {
    // With one upstream its name says nothing; with several, each sentence names its own.
    let of = |upstream: &str| {
        if upstreams > 1 {
            format!(" of {upstream}")
        } else {
            String::new()
        }
    };
    let waiting = |ready: u64| match ready {
        0 => String::new(),
        n => format!(
            " {} waiting.",
            plural(n, "ready task is", "ready tasks are")
        ),
    };
    match c {
        Concern::RedisUnreachable => (
            "Redis is unreachable: the queue cannot be read or changed, and nothing is polling.".into(),
            "see the overview",
            "/admin".into(),
        ),
        Concern::Repartition {
            upstream,
            have,
            now: to,
        } => (
            format!(
                "The queue{} is moving to {} (repoll admin repartition) while this server runs \
                 its old layout of {have}: it accepts and claims nothing until it is restarted \
                 with REPOLL_PARTITIONS={to}.",
                of(upstream),
                plural(u64::from(*to), "partition", "partitions"),
            ),
            "see the workers",
            upstream_href(upstream, "workers"),
        ),
        Concern::NoWorker { upstream, ready } => (
            format!(
                "No worker{} has reported in: nothing is polling the upstream.{}",
                of(upstream),
                waiting(*ready)
            ),
            "see the workers",
            upstream_href(upstream, "workers"),
        ),
        Concern::AllQuiet {
            upstream,
            workers,
            ready,
        } => (
            format!(
                "Every worker{} is quiet or stopping ({}): nothing claims new work.{}",
                of(upstream),
                workers,
                waiting(*ready)
            ),
            "see the workers",
            upstream_href(upstream, "workers"),
        ),
        Concern::BreakerOpen { upstream, breaker } => {
            let state = match breaker.state {
                BreakerState::Open => "claims wait for its cool-down",
                BreakerState::HalfOpen => "one probe is out",
            };
            (
                format!(
                    "The circuit breaker{} opened {} ({state}): {}",
                    of(upstream),
                    ago(now, breaker.since_ms),
                    breaker.reason
                ),
                "see the upstreams",
                "/admin/upstreams".into(),
            )
        }
        Concern::Paused { upstream, pause } => {
            let by = if pause.who.is_empty() {
                String::new()
            } else {
                format!(" by {}", pause.who)
            };
            let since = if pause.at_ms > 0 {
                format!(" {}", ago(now, pause.at_ms))
            } else {
                String::new()
            };
            (
                format!(
                    "The queue{} is paused{by}{since}: workers claim nothing until it is resumed.",
                    of(upstream)
                ),
                "resume it",
                upstream_href(upstream, "queue-actions"),
            )
        }
        Concern::ReadyWaiting {
            upstream,
            age_ms,
            ready,
        } => (
            format!(
                "The oldest ready task{} has waited {} ({} ready): the workers are not keeping up.",
                of(upstream),
                duration(*age_ms),
                ready
            ),
            "see the ready tasks",
            format!(
                "/admin/tasks?state=ready{}",
                if upstreams > 1 {
                    format!("&upstream={}", crate::pages::format::encode_component(upstream))
                } else {
                    String::new()
                }
            ),
        ),
        Concern::StuckLeases { upstream, stuck } => (
            format!(
                "{}{} past their deadline: their workers are probably gone (the leases are recovered on expiry).",
                plural(*stuck, "lease", "leases"),
                of(upstream)
            ),
            "see the leases",
            "/admin/leases".into(),
        ),
    }
}

/// The strip itself: nothing when all is well.
#[component]
pub fn AttentionStrip(read: Resource<Result<Attention, ServerFnError>>) -> impl IntoView {
    view! {
        <Transition fallback=|| ()>
            {move || read.get().map(|answer| {
                let a = answer.unwrap_or_else(|_| Attention {
                    concerns: vec![Concern::RedisUnreachable],
                    ..Attention::default()
                });
                strip(a)
            })}
        </Transition>
    }
}

fn strip(a: Attention) -> impl IntoView {
    let red = a.concerns.iter().any(Concern::nothing_polls);
    let class = if red {
        "attention red"
    } else {
        "attention amber"
    };
    let empty = a.concerns.is_empty();
    let items = a
        .concerns
        .iter()
        .map(|c| {
            let (text, link, href) = words(c, a.upstreams, a.now_ms);
            let testid = format!("attention-{}", c.key());
            view! {
                <li data-testid=testid>{text} " " <a href=href>{link}</a></li>
            }
        })
        .collect_view();
    view! {
        <div class=class class:hidden=empty role="status" aria-live="polite" data-testid="attention">
            <ul>{items}</ul>
        </div>
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::{BreakerInfo, PauseInfo};

    #[test]
    fn words_name_the_upstream_only_when_there_are_several() {
        let c = Concern::NoWorker {
            upstream: "reports".into(),
            ready: 3,
        };
        let (one, _, href) = words(&c, 1, 0);
        assert_eq!(
            one,
            "No worker has reported in: nothing is polling the upstream. 3 ready tasks are waiting."
        );
        assert_eq!(href, "/admin?upstream=reports#workers");
        let (two, _, _) = words(&c, 2, 0);
        assert!(
            two.starts_with("No worker of reports has reported in"),
            "{two}"
        );
    }

    #[test]
    fn each_concern_links_where_it_can_be_seen_and_fixed() {
        let now = 10_000_000;
        let breaker = Concern::BreakerOpen {
            upstream: "default".into(),
            breaker: BreakerInfo {
                state: BreakerState::Open,
                since_ms: now - 30_000,
                until_ms: now + 5_000,
                reason: "HTTP 503: simulated outage".into(),
                by: "auto".into(),
                probe: None,
            },
        };
        let (text, link, href) = words(&breaker, 1, now);
        assert_eq!(
            text,
            "The circuit breaker opened 30 s ago (claims wait for its cool-down): HTTP 503: simulated outage"
        );
        assert_eq!(
            (link, href.as_str()),
            ("see the upstreams", "/admin/upstreams")
        );
        let paused = Concern::Paused {
            upstream: "default".into(),
            pause: PauseInfo {
                at_ms: now - 120_000,
                who: "alice".into(),
            },
        };
        let (text, _, href) = words(&paused, 1, now);
        assert_eq!(
            text,
            "The queue is paused by alice 2 min ago: workers claim nothing until it is resumed."
        );
        assert_eq!(href, "/admin#queue-actions");
        let old = Concern::ReadyWaiting {
            upstream: "b".into(),
            age_ms: 95_000,
            ready: 7,
        };
        let (text, _, href) = words(&old, 2, now);
        assert!(
            text.contains("of b has waited 1 min 35 s (7 ready)"),
            "{text}"
        );
        assert_eq!(href, "/admin/tasks?state=ready&upstream=b");
    }
}
