//! Small formatting helpers and widgets shared by the admin pages, and whether the user may
//! act ([`can_act`]). A leaf: it names no other admin module, so every one of them can use it.
//! Times are shown relative to the server's clock (`now_ms` of the data), so the server render
//! and the hydrated page agree; the words themselves come from [`crate::pages::format`].

use leptos::prelude::*;

pub use crate::pages::format::{duration, plural};
pub use crate::pages::widgets::TimeAt;

use model::PauseInfo;

/// The message of a server-function error, without the framework's prefix.
pub fn error_text(e: &ServerFnError) -> String {
    match e {
        ServerFnError::ServerError(m) => m.clone(),
        _ => "request failed".into(),
    }
}

/// `s`, or "—" when empty. Every text the admin pages render goes through this or is never
/// empty: an empty text node does not survive the HTML round trip, and hydration then finds
/// something else where it expects text.
pub fn or_dash(s: impl Into<String>) -> String {
    let s = s.into();
    if s.is_empty() {
        "—".into()
    } else {
        s
    }
}

/// The first 12 characters of an id, enough to tell tasks apart in a table.
pub fn short(id: &str) -> String {
    id.chars().take(12).collect()
}

// Whether the user may act lives here, not in the frame that decides it: every control that
// changes something asks it (the action buttons, the paused banner, the pages), and the frame
// only provides it, so the widgets need not name the frame.

/// Whether the signed-in user may change things: the admin role. Provided by the frame
/// (`frame::AdminFrame`) to the page inside it; the server refuses a viewer's action anyway,
/// this keeps the dashboard from offering one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CanAct(pub bool);

/// Whether this page's user may act. False outside a frame, so a control rendered anywhere
/// else is never offered by mistake.
pub fn can_act() -> bool {
    use_context::<CanAct>().is_some_and(|c| c.0)
}

/// The banner every dashboard page shows while the queue is paused.
#[component]
pub fn PausedBanner(paused: Option<PauseInfo>, now: i64) -> impl IntoView {
    paused.map(|p| {
        let by = if p.who.is_empty() {
            String::new()
        } else {
            format!(" by {}", p.who)
        };
        let rest = format!("{by}. Workers claim nothing until it is resumed; queries wait.");
        let since = if p.at_ms > 0 {
            view! { <TimeAt now at=p.at_ms past=true /> }.into_any()
        } else {
            view! { <span>"a while ago"</span> }.into_any()
        };
        view! {
            <div class="banner paused" role="status" data-testid="paused-banner">
                <strong>"Queue paused"</strong>
                <span>{since} {rest}</span>
                {can_act().then(|| view! { <a href="/admin#queue-actions">"Resume on the overview"</a> })}
            </div>
        }
    })
}
