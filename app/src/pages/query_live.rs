//! Browser-only part of the query page (`/q/<id>`): follows the query's live stream until a
//! final state ([`QueryView::is_final`]: a stale result whose refresh runs is followed until
//! the refreshed result lands), and ticks the page's clock.

use std::time::Duration;

use leptos::prelude::*;
use wasm_bindgen::{closure::Closure, JsCast};
use web_sys::{EventSource, MessageEvent};

use crate::query_view::QueryView;

type Source = StoredValue<Option<(EventSource, Closure<dyn FnMut(MessageEvent)>)>, LocalStorage>;

fn browser_now() -> i64 {
    js_sys::Date::now() as i64
}

/// Opens an `EventSource` while the query is not final (processing, or a stored result whose
/// refresh runs) and closes it on the final state
/// (the server closes its side too; closing ours stops the browser from reconnecting) or
/// when the page goes away. Every event is a full [`QueryView`], so a reconnect simply
/// starts again from the current state.
pub fn follow(
    state: RwSignal<QueryView>,
    now: RwSignal<Option<i64>>,
    hold: RwSignal<super::service_hold::ServiceState>,
) {
    let source: Source = StoredValue::new_local(None);
    let tick = set_interval_with_handle(
        move || now.set(Some(browser_now())),
        Duration::from_millis(250),
    )
    .ok();
    // A pause, the breaker or a stopped worker publishes nothing on the query's stream: ask
    // every few seconds while the query (or the refresh of its result) runs.
    let pause_check = set_interval_with_handle(
        move || {
            if state.with_untracked(|v| v.is_final()) {
                return;
            }
            let id = state.with_untracked(|v| v.id.to_string());
            leptos::task::spawn_local(async move {
                if let Ok(h) = super::service_hold::service_hold(id).await {
                    hold.set(h);
                }
            });
        },
        Duration::from_secs(3),
    )
    .ok();
    Effect::new(move |_| {
        now.set(Some(browser_now()));
        let (id, is_final) = state.with(|v| (v.id.clone(), v.is_final()));
        if is_final {
            close(source);
            return;
        }
        if source.with_value(|s| s.is_some()) {
            return;
        }
        let Ok(es) = EventSource::new(&format!("/api/v1/queries/{id}/events")) else {
            return;
        };
        let on_state = Closure::<dyn FnMut(MessageEvent)>::new(move |ev: MessageEvent| {
            if let Some(text) = ev.data().as_string() {
                if let Ok(v) = serde_json::from_str::<QueryView>(&text) {
                    state.set(v);
                }
            }
        });
        let _ = es.add_event_listener_with_callback("state", on_state.as_ref().unchecked_ref());
        source.set_value(Some((es, on_state)));
    });
    on_cleanup(move || {
        close(source);
        for t in [tick, pause_check].into_iter().flatten() {
            t.clear();
        }
    });
}

fn close(source: Source) {
    if let Some(Some((es, _callback))) = source.try_update_value(Option::take) {
        es.close();
    }
}
