//! The frame of every signed-in admin page: session check, navigation, live indicator,
//! sign-out. A visitor without a session gets a real 302 to the sign-in page from the server
//! render; after a client-side navigation (a link clicked in the app) the sign-in form is
//! shown in place (no extra navigation); signing in opens the overview.
//!
//! The frame also decides, once per page, whether its user may change anything
//! (`ui::CanAct`): every control that changes something asks `ui::can_act` and is not
//! rendered for a viewer, on the server render and after hydration alike (both read the same
//! session).

use leptos::context::Provider;
use leptos::prelude::*;
use leptos_router::components::{Redirect, A};

use super::attention::{read_attention, AttentionStrip};
use super::live::{connect_live, use_live, LiveIndicator};
use super::login::{whoami, LoginPage, SignOut};
use super::ui::{error_text, CanAct};
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
    // The attention strip's data, re-read on every live tick. Created here, before the view,
    // so it follows the page's own resources in the same order on the server and in the
    // browser (hydration matches resources by order); a signed-out visit asks nothing.
    let attention = Resource::new(
        move || live.tick.get(),
        move |_| async move {
            if signed_in(me).await {
                read_attention().await
            } else {
                Ok(Default::default())
            }
        },
    );
    search_shortcut();
    view! {
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || me.get().map(|answer| {
                match answer {
                    Ok(Some(me)) => {
                        let read_only = me.role == Role::Viewer;
                        let may_act = CanAct(me.role == Role::Admin);
                        connect_live(live);
                        // One root element per branch: multi-root views swapped by a
                        // Transition after hydration were seen to leave nodes behind.
                        view! {
                            <div class="admin-frame">
                            <nav class="admin-nav" data-testid="admin-nav">
                                <A href="/admin" exact=true>"Overview"</A>
                                <A href="/admin/tasks">"Tasks"</A>
                                <A href="/admin/leases">"Leases"</A>
                                <A href="/admin/upstreams">"Upstreams"</A>
                                <A href="/admin/bulk">"Bulk"</A>
                                <A href="/admin/dead">"Dead work"</A>
                                <LiveIndicator />
                                <span class="muted" data-testid="signed-in-as">
                                    {signed_in_as(&me)}
                                </span>
                                {read_only.then(|| view! { <span class="badge">"read-only"</span> })}
                                <ActionForm action=sign_out attr:class="inline">
                                    <button type="submit" data-testid="sign-out">"Sign out"</button>
                                </ActionForm>
                            </nav>
                            <AttentionStrip read=attention />
                            <Provider value=may_act>{children.with_value(|c| c())}</Provider>
                            </div>
                        }
                            .into_any()
                    }
                    Ok(None) if cfg!(feature = "ssr") => {
                        view! { <div><Redirect path="/admin/login" /> <p>"sign in required"</p></div> }.into_any()
                    }
                    Ok(None) => view! { <LoginPage /> }.into_any(),
                    Err(e) => view! { <p class="err">{error_text(&e)}</p> }.into_any(),
                }
            })}
        </Transition>
    }
}

/// "signed in as admin"; the role is named only when the user's name is not already it.
fn signed_in_as(me: &Me) -> String {
    if me.user == me.role.as_str() {
        format!("signed in as {}", me.user)
    } else {
        format!("signed in as {} ({})", me.user, me.role.as_str())
    }
}

/// `/` focuses the page's search box (as on GitHub or Sidekiq), unless a field has the
/// keyboard already. Browser only.
fn search_shortcut() {
    #[cfg(feature = "hydrate")]
    {
        use wasm_bindgen::JsCast;
        let handle = window_event_listener(leptos::ev::keydown, |ev| {
            if ev.key() != "/" || ev.ctrl_key() || ev.meta_key() || ev.alt_key() {
                return;
            }
            let typing = ev
                .target()
                .and_then(|t| t.dyn_into::<web_sys::Element>().ok())
                .is_some_and(|el| {
                    matches!(el.tag_name().as_str(), "INPUT" | "TEXTAREA" | "SELECT")
                        || el.has_attribute("contenteditable")
                });
            if typing {
                return;
            }
            if let Some(input) = document()
                .get_element_by_id("task-search")
                .and_then(|e| e.dyn_into::<web_sys::HtmlElement>().ok())
            {
                ev.prevent_default();
                let _ = input.focus();
            }
        });
        on_cleanup(move || handle.remove());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Role;

    #[test]
    fn signed_in_as_names_the_role_once() {
        let me = |user: &str, role| Me {
            user: user.into(),
            role,
        };
        assert_eq!(
            signed_in_as(&me("admin", Role::Admin)),
            "signed in as admin"
        );
        assert_eq!(
            signed_in_as(&me("alice", Role::Viewer)),
            "signed in as alice (viewer)"
        );
    }
}
