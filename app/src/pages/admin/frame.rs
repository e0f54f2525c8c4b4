//! The frame of every signed-in admin page: session check, navigation, live indicator,
//! sign-out. A visitor without a session gets a real 302 to the sign-in page from the server
//! render; after a client-side navigation (a link clicked in the app) the sign-in form is
//! shown in place (no extra navigation); signing in opens the overview.

use leptos::prelude::*;
use leptos_meta::Style;
use leptos_router::components::{Redirect, A};

use super::live::{connect_live, use_live, LiveIndicator};
use super::login::{whoami, LoginPage, SignOut};
use crate::auth::{Me, Role};

/// The session check of a page. Created by the page before its data resources, so the
/// order of resources (which hydration matches by) is fixed.
pub fn session() -> Resource<Result<Option<Me>, ServerFnError>> {
    Resource::new(|| (), |_| whoami())
}

/// Whether `me` says signed in. Page data resources await this first, so a signed-out
/// visit (client-side navigation) makes no request that would only be refused.
pub async fn signed_in(me: Resource<Result<Option<Me>, ServerFnError>>) -> bool {
    matches!(me.await, Ok(Some(_)))
}

/// The error page data holds when nobody is signed in (the frame shows the sign-in form).
pub fn signed_out<T>() -> Result<T, ServerFnError> {
    Err(ServerFnError::new("sign in required"))
}

/// Wraps an admin page's content.
#[component]
pub fn AdminFrame(
    me: Resource<Result<Option<Me>, ServerFnError>>,
    children: ChildrenFn,
) -> impl IntoView {
    let live = use_live();
    let sign_out = ServerAction::<SignOut>::new();
    let children = StoredValue::new(children);
    view! {
        <Style id="repoll-admin">{ADMIN_CSS}</Style>
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || me.get().map(|answer| {
                match answer {
                    Ok(Some(me)) => {
                        let read_only = me.role == Role::Viewer;
                        connect_live(live);
                        // One root element per branch: multi-root views swapped by a
                        // Transition after hydration were seen to leave nodes behind.
                        view! {
                            <div class="admin-frame">
                            <nav class="admin-nav" data-testid="admin-nav">
                                <A href="/admin" exact=true>"Overview"</A>
                                <A href="/admin/tasks">"Tasks"</A>
                                <A href="/admin/leases">"Leases"</A>
                                <LiveIndicator />
                                <span class="muted" data-testid="signed-in-as">
                                    {format!("signed in as {} ({})", me.user, me.role.as_str())}
                                </span>
                                {read_only.then(|| view! { <span class="badge">"read-only"</span> })}
                                <ActionForm action=sign_out attr:class="inline">
                                    <button type="submit" data-testid="sign-out">"Sign out"</button>
                                </ActionForm>
                            </nav>
                            {children.with_value(|c| c())}
                            </div>
                        }
                            .into_any()
                    }
                    Ok(None) if cfg!(feature = "ssr") => {
                        view! { <div><Redirect path="/admin/login" /> <p>"sign in required"</p></div> }.into_any()
                    }
                    Ok(None) => view! { <LoginPage /> }.into_any(),
                    Err(e) => view! { <p class="err">{super::ui::error_text(&e)}</p> }.into_any(),
                }
            })}
        </Transition>
    }
}

/// The admin pages' own few rules, next to the markup they style (the shared stylesheet
/// covers panels, tables, buttons and inputs).
const ADMIN_CSS: &str = "
.admin-nav { display: flex; align-items: center; gap: 1rem; flex-wrap: wrap; }
.admin-nav a { text-decoration: none; color: var(--accent); }
.admin-nav a[aria-current=page] { font-weight: 700; }
.live { padding: .1rem .5rem; border-radius: 999px; font-size: .85em; }
.live.on { background: #e3f5ea; color: var(--ok); } .live.off { background: #fff3e0; color: var(--warn); }
.badge { padding: .05rem .4rem; border-radius: 4px; background: #eef1f6; font-size: .85em; }
.counts { display: grid; grid-template-columns: repeat(auto-fit, minmax(8rem, 1fr)); gap: .6rem; }
.count { border: 1px solid var(--line); border-radius: 6px; padding: .5rem .7rem; }
.count .n { display: block; font-size: 1.6em; font-weight: 700; }
.count .label { color: var(--muted); font-size: .85em; }
.charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(20rem, 1fr)); gap: 1rem; }
.chart { margin: 0; } .chart svg { width: 100%; height: auto; background: #fafbfc; border: 1px solid var(--line); }
.chart figcaption { font-size: .85em; color: var(--muted); }
form.inline { display: inline-flex; gap: .4rem; align-items: center; margin: 0; }
.row { display: flex; gap: .6rem; flex-wrap: wrap; align-items: center; }
.action-result { min-height: 1.2em; font-weight: 600; }
.tabs { display: flex; gap: .8rem; margin: .6rem 0; } .tab.active { font-weight: 700; }
tr.gone td, tr.stuck td { background: #fff4f2; }
td.query, td.error-text, .timeline .detail { word-break: break-word; }
.timeline { font-size: .92em; } .timeline li { margin: .15rem 0; } .timeline .when { color: var(--muted); }
dl.fields { display: grid; grid-template-columns: max-content 1fr; gap: .2rem 1rem; }
dl.fields dt { color: var(--muted); } dl.fields dd { margin: 0; word-break: break-word; }
pre { background: #0f1420; color: #dfe6f3; padding: .7rem; border-radius: 6px; white-space: pre-wrap; word-break: break-word; max-height: 20rem; overflow: auto; }
";
