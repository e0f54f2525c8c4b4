//! The task search box: a plain GET form that works without JavaScript (with a static
//! `<datalist>` of examples), enhanced once hydrated into an ARIA 1.2 combobox that suggests
//! completions as one types (issue 29: Oban Web suggests its search the same way).
//!
//! - The input becomes `role=combobox` with `aria-expanded`, `aria-controls` (the listbox of
//!   suggestions) and `aria-activedescendant` (the highlighted one). ArrowDown / ArrowUp move
//!   (ArrowDown on a closed box asks at once), Enter or Tab accept the highlighted one,
//!   Escape closes, a click accepts. With nothing highlighted Enter submits as before.
//! - Asked 150 ms after the last key press; an answer to an older text is dropped.
//! - [`search_suggestions`] answers from a [`Vocabulary`] of the upstream gathered with the
//!   triage's own bounded reads (`Queue::facets`, `Queue::dead_groups`, [`VOCAB_SCAN`] tasks
//!   a state) and kept [`VOCAB_TTL`] per upstream, so typing does not read Redis per key.
//!   What to suggest is `search_suggest`'s pure [`suggest`].

use leptos::prelude::*;
use leptos_router::params::ParamsMap;

use super::search_suggest::Suggestion;
#[cfg(feature = "ssr")]
use super::search_suggest::{suggest, Vocabulary};

/// Longest search text answered (as the search itself takes).
pub const MAX_TEXT: usize = 2048;
/// Tasks of each state the vocabulary's tenants, classes and groups are gathered from.
#[cfg(feature = "ssr")]
const VOCAB_SCAN: u64 = 500;
/// Tenants and groups kept in a vocabulary, at most.
#[cfg(feature = "ssr")]
const VOCAB_VALUES: usize = 50;
/// How long a gathered vocabulary is used before it is read again.
#[cfg(feature = "ssr")]
const VOCAB_TTL: std::time::Duration = std::time::Duration::from_secs(5);
/// Quiet time after a key press before suggestions are asked for.
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
const DEBOUNCE_MS: u64 = 150;

/// Completions of the token at `caret` (UTF-16 units, the browser's `selectionStart`) in
/// `text`, a search of `upstream` (its vocabulary), at most `search_suggest::MAX_SUGGESTIONS`.
#[server(prefix = "/admin/fn")]
pub async fn search_suggestions(
    text: String,
    caret: u32,
    upstream: Option<String>,
) -> Result<Vec<Suggestion>, ServerFnError> {
    use super::call::{admin_call, upstream_queue, AdminCall};
    use crate::auth::{refuse, Role};
    use http::StatusCode;
    let AdminCall { ctx, .. } = admin_call(Role::Viewer).await?;
    if text.len() > MAX_TEXT {
        return Err(refuse(StatusCode::BAD_REQUEST, "search text too long"));
    }
    let q = upstream_queue(&ctx, upstream.as_deref())?;
    let vocab = vocabulary(q, ctx.upstream_names())
        .await
        .map_err(|e| crate::auth::unreachable("search suggestions", e))?;
    Ok(suggest(&text, caret, &vocab))
}

/// The vocabulary of `q`, from the cache while it is younger than [`VOCAB_TTL`]. Keyed by the
/// queue's name: one per upstream of the process.
#[cfg(feature = "ssr")]
async fn vocabulary(
    q: &queue::Queue,
    upstreams: Vec<String>,
) -> queue::Result<std::sync::Arc<Vocabulary>> {
    use std::{
        collections::HashMap,
        sync::{Arc, Mutex, OnceLock},
        time::Instant,
    };
    type Cache = Mutex<HashMap<String, (Instant, Arc<Vocabulary>)>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let name = q.config().name.clone();
    let fresh = |c: &Cache| {
        c.lock()
            .ok()?
            .get(&name)
            .filter(|(at, _)| at.elapsed() < VOCAB_TTL)
            .map(|(_, v)| v.clone())
    };
    if let Some(v) = fresh(cache) {
        return Ok(v);
    }
    let v = Arc::new(gather(q, upstreams).await?);
    if let Ok(mut c) = cache.lock() {
        c.insert(name, (Instant::now(), v.clone()));
    }
    Ok(v)
}

/// Reads a vocabulary: the tenants and error classes of each state's latest [`VOCAB_SCAN`]
/// tasks (the facet counts' read) and the largest dead-work groups among as many of the latest deaths (recent errors).
#[cfg(feature = "ssr")]
async fn gather(q: &queue::Queue, upstreams: Vec<String>) -> queue::Result<Vocabulary> {
    use queue::{BulkFilter, BulkState};
    let of = |state| BulkFilter {
        state,
        ..BulkFilter::default()
    };
    let [dead, waiting, ready, leased] = [
        BulkState::Dead,
        BulkState::Waiting,
        BulkState::Ready,
        BulkState::Leased,
    ]
    .map(of);
    let (dead_f, waiting, ready, leased, groups) = tokio::join!(
        q.facets(&dead, VOCAB_SCAN),
        q.facets(&waiting, VOCAB_SCAN),
        q.facets(&ready, VOCAB_SCAN),
        q.facets(&leased, VOCAB_SCAN),
        q.dead_groups(&dead, VOCAB_SCAN),
    );
    let mut v = Vocabulary {
        upstreams,
        ..Vocabulary::default()
    };
    for f in [dead_f?, waiting?, ready?, leased?] {
        for t in f.tenants {
            if !t.key.is_empty() && !v.tenants.contains(&t.key) {
                v.tenants.push(t.key);
            }
        }
        for c in f.classes {
            if !v.classes.iter().any(|(slug, _)| *slug == c.key) {
                v.classes.push((c.key, c.label));
            }
        }
    }
    v.tenants.truncate(VOCAB_VALUES);
    v.groups = groups?
        .groups
        .into_iter()
        .take(VOCAB_VALUES)
        .map(|g| (g.key, g.class_label, g.message))
        .collect();
    Ok(v)
}

/// The listbox's id, and its options' ids.
const LIST_ID: &str = "task-search-options";
fn option_id(i: usize) -> String {
    format!("{LIST_ID}-{i}")
}

/// The search box's state once hydrated.
#[derive(Clone, Copy)]
struct Combo {
    input: NodeRef<leptos::html::Input>,
    options: RwSignal<Vec<Suggestion>>,
    open: RwSignal<bool>,
    active: RwSignal<Option<usize>>,
    /// Bumped by every key press and answer asked for: an answer to an older one is stale.
    asked: StoredValue<u64>,
    /// The page's query (its `upstream` is the vocabulary asked for).
    #[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
    query: Memo<ParamsMap>,
}

impl Combo {
    fn close(self) {
        self.open.set(false);
        self.active.set(None);
    }

    /// Closes, and drops any answer still coming (the box lost the focus, or a token ended).
    fn dismiss(self) {
        self.asked.update_value(|n| *n = n.wrapping_add(1));
        self.close();
    }

    /// Asks for the suggestions of the box as it is after `delay_ms` of quiet.
    #[cfg_attr(not(feature = "hydrate"), allow(unused_variables))]
    fn ask(self, delay_ms: u64) {
        let n = self.asked.get_value().wrapping_add(1);
        self.asked.set_value(n);
        #[cfg(feature = "hydrate")]
        set_timeout(
            move || {
                let Some(el) = self.input.get_untracked() else {
                    return;
                };
                if self.asked.get_value() != n {
                    return;
                }
                let text = el.value();
                let caret = el
                    .selection_start()
                    .ok()
                    .flatten()
                    .unwrap_or_else(|| text.encode_utf16().count() as u32);
                let upstream = self.query.with_untracked(|m| m.get("upstream"));
                leptos::task::spawn_local(async move {
                    let got = search_suggestions(text, caret, upstream).await;
                    if self.asked.get_value() != n {
                        return; // typed on since: a newer answer is coming
                    }
                    match got {
                        Ok(list) if !list.is_empty() => {
                            self.options.set(list);
                            self.active.set(None);
                            self.open.set(true);
                        }
                        _ => self.close(),
                    }
                });
            },
            std::time::Duration::from_millis(delay_ms),
        );
    }

    /// Puts suggestion `i` in the box, the caret after it; a qualifier's name asks for its
    /// values at once.
    fn accept(self, i: usize) {
        let Some(s) = self.options.with_untracked(|o| o.get(i).cloned()) else {
            return;
        };
        self.dismiss();
        if let Some(el) = self.input.get_untracked() {
            el.set_value(&s.text);
            let _ = el.set_selection_range(s.caret, s.caret);
        }
        if s.label.ends_with(':') {
            self.ask(0);
        }
    }

    fn key(self, ev: leptos::ev::KeyboardEvent) {
        let (open, n) = (
            self.open.get_untracked(),
            self.options.with_untracked(Vec::len),
        );
        let active = self.active.get_untracked();
        match ev.key().as_str() {
            "ArrowDown" if open && n > 0 => {
                ev.prevent_default();
                self.active.set(Some(active.map_or(0, |a| (a + 1) % n)));
            }
            "ArrowDown" => {
                ev.prevent_default();
                self.ask(0);
            }
            "ArrowUp" if open && n > 0 => {
                ev.prevent_default();
                self.active
                    .set(Some(active.map_or(n - 1, |a| (a + n - 1) % n)));
            }
            "Enter" | "Tab" if open && active.is_some() => {
                ev.prevent_default();
                self.accept(active.unwrap_or_default());
            }
            "Escape" if open => {
                // Also keeps the search input from clearing itself.
                ev.prevent_default();
                self.close();
            }
            _ => {}
        }
    }

    /// After typing: ask, unless the caret is after a space (a finished token) or the box is
    /// empty — then ArrowDown asks.
    fn typed(self) {
        let Some(el) = self.input.get_untracked() else {
            return;
        };
        let text = el.value();
        let caret = el.selection_start().ok().flatten().unwrap_or(u32::MAX) as usize;
        let before: Vec<u16> = text.encode_utf16().take(caret).collect();
        if before.last().is_none_or(|&c| c == u16::from(b' ')) {
            self.dismiss();
        } else {
            self.ask(DEBOUNCE_MS);
        }
    }
}

/// The search input with its suggestions (inside the task list's search form).
#[component]
pub fn SearchBox(query: Memo<ParamsMap>) -> impl IntoView {
    // False on the server and until hydrated: the plain input with the datalist.
    let enhanced = RwSignal::new(false);
    Effect::new(move |_| enhanced.set(true));
    let c = Combo {
        input: NodeRef::new(),
        options: RwSignal::new(Vec::new()),
        open: RwSignal::new(false),
        active: RwSignal::new(None),
        asked: StoredValue::new(0),
        query,
    };
    let on = move || enhanced.get();
    let options = move || {
        c.options
            .get()
            .into_iter()
            .enumerate()
            .map(|(i, s)| {
                view! {
                    <li
                        id=option_id(i)
                        role="option"
                        aria-selected=move || (c.active.get() == Some(i)).to_string()
                        data-testid="search-suggestion"
                        on:mousedown=|ev| ev.prevent_default()
                        on:click=move |_| c.accept(i)
                    >
                        <code>{s.label}</code>
                        <span class="option-hint">{s.hint}</span>
                    </li>
                }
            })
            .collect_view()
    };
    view! {
        <div class="combo">
            <input
                type="search"
                id="task-search"
                name="q"
                node_ref=c.input
                placeholder="query text, id, or state:dead error:\"HTTP 500\" after:2h"
                title="query text or id prefix (press / to come here)"
                list=move || (!on()).then_some("search-examples")
                role=move || on().then_some("combobox")
                aria-autocomplete=move || on().then_some("list")
                aria-expanded=move || on().then(|| c.open.get().to_string())
                aria-controls=move || on().then_some(LIST_ID)
                aria-activedescendant=move || {
                    c.active.get().filter(|_| c.open.get()).map(option_id)
                }
                autocomplete="off"
                aria-describedby="search-help"
                data-testid="search-input"
                prop:value=move || query.get().get("q").unwrap_or_default()
                on:input=move |_| c.typed()
                on:keydown=move |ev| c.key(ev)
                on:blur=move |_| c.dismiss()
            />
            <ul
                id=LIST_ID
                role="listbox"
                aria-label="Search suggestions"
                class="suggestions"
                data-testid="search-suggestions"
                hidden=move || !c.open.get()
            >
                {options}
            </ul>
            <datalist id="search-examples">
                <option value="state:dead"></option>
                <option value="state:waiting"></option>
                <option value="state:ready"></option>
                <option value="state:leased"></option>
                <option value="state:dead error:\"HTTP 5\""></option>
                <option value="after:1h"></option>
                <option value="after:24h"></option>
                <option value="tenant:public"></option>
            </datalist>
        </div>
    }
}
