//! The Redis status panel of the dashboard: proves the whole chain (hydrated button → server
//! function → Redis) and tells an operator at a glance which Redis the app is talking to.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

/// What the panel shows about the Redis server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedisStatus {
    /// `redis_version` from `INFO server`.
    pub version: String,
    /// `DBSIZE` of the selected database.
    pub keys: u64,
    /// Redis server time (ms) when the check ran, so a refresh visibly changes something.
    pub checked_ms: i64,
    /// The queue this process serves.
    pub queue: String,
}

/// Asks Redis for its version, key count and time. Signed-in users only (viewer or admin):
/// which Redis, how many keys and which queue are facts for operators, not for anonymous
/// visitors. Internal error text stays in the server log; the browser only learns that Redis
/// is unreachable.
#[server(prefix = "/admin/fn")]
pub async fn check_redis() -> Result<RedisStatus, ServerFnError> {
    crate::auth::require(crate::auth::Role::Viewer).await?;
    let ctx = crate::context::app_context()?;
    let info = ctx
        .queue
        .server_info()
        .await
        .map_err(|e| crate::auth::unreachable("redis status check", e))?;
    Ok(RedisStatus {
        version: info.version,
        keys: info.keys,
        checked_ms: info.now_ms,
        queue: ctx.queue.config().name.clone(),
    })
}

/// Live panel with a refresh button. Rendered on the server with the first answer, then
/// refetched from the browser on each click. `me` is the page's session: signed out, the
/// panel asks nothing (the server function would only refuse) and shows nothing.
#[component]
pub fn RedisStatusPanel(
    me: Resource<Result<Option<crate::auth::Me>, ServerFnError>>,
) -> impl IntoView {
    let checks = RwSignal::new(0u32);
    let status = Resource::new(
        move || checks.get(),
        move |_| async move {
            if !matches!(me.await, Ok(Some(_))) {
                return Ok(None);
            }
            check_redis().await.map(Some)
        },
    );
    view! {
        <section class="panel redis-status" data-testid="redis-status">
            <h2>"Redis"</h2>
            <Transition fallback=|| view! { <p>"Checking Redis…"</p> }>
                {move || {
                    status
                        .get()
                        .map(|answer| match answer {
                            Ok(None) => view! { <p class="muted">"Sign in to see Redis."</p> }.into_any(),
                            Ok(Some(s)) => {
                                view! {
                                    <p class="ok" data-testid="redis-ok">
                                        {format!(
                                            "Redis: connected, version {}, {} keys",
                                            s.version,
                                            s.keys,
                                        )}
                                    </p>
                                    <p class="muted">
                                        "queue " <code>{s.queue}</code> " · checked at "
                                        <span data-testid="redis-checked" title=format!("{} ms since the Unix epoch", s.checked_ms)>{utc_clock(s.checked_ms)}</span>
                                    </p>
                                }
                                    .into_any()
                            }
                            Err(_) => {
                                view! {
                                    <p class="err" data-testid="redis-err">
                                        "Redis: unreachable"
                                    </p>
                                }
                                    .into_any()
                            }
                        })
                }}
            </Transition>
            <button data-testid="redis-refresh" on:click=move |_| checks.update(|n| *n += 1)>
                "Refresh"
            </button>
            <span class="muted" data-testid="redis-refreshes">
                {move || format!("{} refreshes", checks.get())}
            </span>
        </section>
    }
}

/// A Redis timestamp (ms) as the UTC time of day with milliseconds, e.g. "06:41:07.215 UTC"
/// (milliseconds, so two checks in a row never read the same).
fn utc_clock(ms: i64) -> String {
    let day = ms.rem_euclid(86_400_000);
    let (h, m, s, milli) = (
        day / 3_600_000,
        day / 60_000 % 60,
        day / 1000 % 60,
        day % 1000,
    );
    format!("{h:02}:{m:02}:{s:02}.{milli:03} UTC")
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_clock_formats_the_time_of_day() {
        // 2026-12-01T06:41:07.215Z
        assert_eq!(super::utc_clock(1_796_107_267_215), "06:41:07.215 UTC");
        assert_eq!(super::utc_clock(0), "00:00:00.000 UTC");
    }
}
