//! The live connection of an admin page: an `EventSource` on `/admin/events`, a tick that
//! every page's resources depend on (bumped on each `changed` / `resync`), and the visible
//! connection indicator.
//!
//! The stream carries no data, so a missed message costs nothing but a re-read: the server
//! sends `resync` first on every (re)connection, the page re-reads, and it is current again.
//! The browser reconnects an interrupted stream by itself; a refused one (signed out, server
//! restarting) is retried here every few seconds while the page is open.

use leptos::prelude::*;

/// Shared by the components of one admin page.
#[derive(Clone, Copy)]
pub struct Live {
    /// Bumped whenever the server says something changed.
    pub tick: RwSignal<u64>,
    /// Whether the stream is open right now.
    pub connected: RwSignal<bool>,
}

/// Provides the page's [`Live`] signals as context (not connected yet).
pub fn provide_live() -> Live {
    let live = Live {
        tick: RwSignal::new(0),
        connected: RwSignal::new(false),
    };
    provide_context(live);
    live
}

/// Opens the stream (in the browser only) for as long as the calling view lives. Called only
/// once signed in, so an anonymous visit never makes a refused request.
pub fn connect_live(live: Live) {
    #[cfg(feature = "hydrate")]
    browser::connect(live);
    #[cfg(not(feature = "hydrate"))]
    let _ = live;
}

/// The page's [`Live`], or a detached one outside an admin page.
pub fn use_live() -> Live {
    use_context::<Live>().unwrap_or_else(|| Live {
        tick: RwSignal::new(0),
        connected: RwSignal::new(false),
    })
}

/// "live" / "reconnecting" once the page runs its script, for `data-testid="live-indicator"`;
/// "not live" before that and for good without JavaScript (issue 43 row 12: the server's
/// render said "reconnecting" for ever to a browser that will never connect).
#[component]
pub fn LiveIndicator() -> impl IntoView {
    let live = use_live();
    // Effects run in the browser only: the server's render and the hydration both read false.
    let scripted = RwSignal::new(false);
    Effect::new(move |_| scripted.set(true));
    let (word, title) = (
        move || match (scripted.get(), live.connected.get()) {
            (false, _) => "not live",
            (true, true) => "live",
            (true, false) => "reconnecting",
        },
        move || {
            if scripted.get() {
                "updates pushed by the server"
            } else {
                "without JavaScript this page shows what it read; reload it to read again"
            }
        },
    );
    view! {
        <span
            data-testid="live-indicator"
            class=move || if live.connected.get() { "live on" } else { "live off" }
            title=title
        >
            {word}
        </span>
    }
}

#[cfg(feature = "hydrate")]
mod browser {
    use std::{
        cell::{Cell, RefCell},
        rc::Rc,
        time::Duration,
    };

    use leptos::prelude::*;
    use wasm_bindgen::{closure::Closure, JsCast, JsValue};
    use web_sys::EventSource;

    use super::Live;

    const URL: &str = "/admin/events";
    const RETRY: Duration = Duration::from_secs(3);

    #[derive(Clone)]
    struct Conn {
        live: Live,
        stopped: Rc<Cell<bool>>,
        current: Rc<RefCell<Option<EventSource>>>,
    }

    /// Opens the stream when the page mounts and closes it when the page goes away.
    pub fn connect(live: Live) {
        Effect::new(move |_| {
            let conn = Conn {
                live,
                stopped: Rc::new(Cell::new(false)),
                current: Rc::new(RefCell::new(None)),
            };
            open(conn.clone());
            let guard = send_wrapper::SendWrapper::new(conn);
            on_cleanup(move || {
                if guard.valid() {
                    let conn = guard.take();
                    conn.stopped.set(true);
                    let es = conn.current.borrow_mut().take();
                    if let Some(es) = es {
                        es.close();
                    }
                }
            });
        });
    }

    fn open(conn: Conn) {
        if conn.stopped.get() {
            return;
        }
        let Ok(es) = EventSource::new(URL) else {
            retry_later(conn);
            return;
        };
        let live = conn.live;
        let on_open = Closure::<dyn FnMut(JsValue)>::new(move |_| live.connected.set(true));
        es.set_onopen(Some(on_open.as_ref().unchecked_ref()));
        on_open.forget();

        let on_change = Closure::<dyn FnMut(JsValue)>::new(move |_| {
            live.connected.set(true);
            live.tick.update(|n| *n = n.wrapping_add(1));
        });
        for name in ["changed", "resync"] {
            let _ = es.add_event_listener_with_callback(name, on_change.as_ref().unchecked_ref());
        }
        on_change.forget();

        let again = conn.clone();
        let on_error = Closure::<dyn FnMut(JsValue)>::new(move |_| {
            live.connected.set(false);
            // CLOSED means the browser gave up (e.g. 401): reopen ourselves after a pause.
            let closed = again
                .current
                .borrow()
                .as_ref()
                .is_some_and(|es| es.ready_state() == EventSource::CLOSED);
            if closed {
                let es = again.current.borrow_mut().take();
                if let Some(es) = es {
                    es.close();
                }
                retry_later(again.clone());
            }
        });
        es.set_onerror(Some(on_error.as_ref().unchecked_ref()));
        on_error.forget();
        *conn.current.borrow_mut() = Some(es);
    }

    fn retry_later(conn: Conn) {
        set_timeout(move || open(conn), RETRY);
    }
}
