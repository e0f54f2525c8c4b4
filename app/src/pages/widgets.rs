//! Small pieces of markup shared by the query page and the dashboard: a time in words with
//! its exact UTC time, upstream JSON as text with a copy button, a progress bar.

use leptos::prelude::*;

use super::format::{ago, clock, iso, relative, utc};

/// `at` in words relative to `now` ("in 4 s", "3 min ago") inside `<time datetime>`, with
/// the exact UTC time as its `title`. `past` says it is a moment that has happened (never "in
/// …"); `exact` puts the time of day to the second first ("06:41:07 · 3 min ago"), where
/// entries a few seconds apart must keep their order to the eye; "—" for 0 (unset).
#[component]
pub fn TimeAt(
    now: i64,
    at: i64,
    #[prop(optional)] past: bool,
    #[prop(optional)] exact: bool,
) -> impl IntoView {
    if at == 0 {
        return view! { <span>"—"</span> }.into_any();
    }
    let words = if past {
        ago(now, at)
    } else {
        relative(now, at)
    };
    let text = if exact {
        format!("{} · {words}", clock(at))
    } else {
        words
    };
    view! { <time datetime=iso(at) title=utc(at)>{text}</time> }.into_any()
}

/// Upstream data as text (never HTML; characters a query refuses shown as markers,
/// `reveal::UpstreamText`), pretty-printed by the caller (see
/// [`pretty_json`](super::format::pretty_json)), with a copy button once the page is hydrated
/// (without JavaScript it could not work, so it is not shown).
#[component]
pub fn JsonBlock(pretty: String, testid: &'static str) -> impl IntoView {
    let copy_text = StoredValue::new(pretty.clone());
    let ready = RwSignal::new(false);
    let copied = RwSignal::new(false);
    Effect::new(move |_| ready.set(true));
    view! {
        <div class="json-block">
            <span class="json-tools">
                {move || {
                    ready
                        .get()
                        .then(|| {
                            view! {
                                <button
                                    type="button"
                                    class="copy"
                                    data-testid=format!("{testid}-copy")
                                    on:click=move |_| {
                                        copy_to_clipboard(&copy_text.get_value());
                                        copied.set(true);
                                    }
                                >
                                    {move || if copied.get() { "Copied" } else { "Copy" }}
                                </button>
                            }
                        })
                }}
            </span>
            <pre class="json" data-testid=testid><crate::pages::reveal::UpstreamText text=pretty /></pre>
        </div>
    }
}

#[cfg(feature = "hydrate")]
fn copy_to_clipboard(text: &str) {
    if let Some(w) = web_sys::window() {
        // The promise settles on its own; a refusal (no permission) leaves nothing to undo.
        let _ = w.navigator().clipboard().write_text(text);
    }
}

#[cfg(not(feature = "hydrate"))]
fn copy_to_clipboard(_text: &str) {}

/// A progress bar with its percentage in words.
#[component]
pub fn ProgressBar(percent: f64) -> impl IntoView {
    let p = percent.clamp(0.0, 100.0);
    let label = format!("{p:.0} %");
    view! {
        <div class="progress" data-testid="progress">
            <progress max="100" value=format!("{p:.1}")>{label.clone()}</progress>
            <span>{label}</span>
        </div>
    }
}
