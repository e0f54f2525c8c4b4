//! The task search box's language: qualifiers and free text, e.g.
//! `state:dead error:"HTTP 500" query:order- after:2h`.
//!
//! - `state:` one of `dead`, `waiting`, `ready`, `leased` (without it: all four);
//! - `error:` part of the last error's text; `query:` part of the query text (both ignore case);
//! - `after:` changed within the last span: `90s`, `15m`, `2h`, `7d`;
//! - `tenant:` exactly this tenant (who asked), `tenant:none` the tasks of no tenant;
//! - `class:` the last error's class (`http-503`, `timeout`, `bad-body`, `upstream-failed`,
//!   `deadline`, …; `model::error_class`), `group:` its group (the dead work view's key);
//! - `upstream:` look in that upstream's tasks instead of the page's ([`chosen_upstream`]);
//! - anything else is free text: an exact query or a task id (or its start) first, and, when
//!   that finds nothing or qualifiers are given, part of the query text.
//!
//! Values with spaces are quoted (`error:"HTTP 500"`). A qualifier that does not parse is an
//! error the page shows, so a typo never silently widens the search.
//!
//! [`parse`] reads the text; [`run`] looks for it in a queue, within bounds.

use std::collections::BTreeSet;

use queue::bulk::{BulkFilter, BulkState, TimeField};

use super::listing::Listing;

/// A parsed search.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Search {
    pub state: Option<BulkState>,
    pub error: Option<String>,
    pub query: Option<String>,
    pub within_ms: Option<u64>,
    /// Exactly this tenant; `Some("")`: tasks of no tenant.
    pub tenant: Option<String>,
    /// The last error's class (its slug).
    pub class: Option<String>,
    /// The last error's group (its key).
    pub group: Option<String>,
    /// The upstream to look in (its name), instead of the page's.
    pub upstream: Option<String>,
    /// `state:results`: stored results only (finished tasks), found by their query.
    pub results: bool,
    /// The words that are not qualifiers, joined by one space.
    pub text: String,
}

impl Search {
    /// Whether any qualifier was given.
    pub fn qualified(&self) -> bool {
        self.state.is_some()
            || self.error.is_some()
            || self.query.is_some()
            || self.within_ms.is_some()
            || self.tenant.is_some()
            || self.class.is_some()
            || self.group.is_some()
            || self.upstream.is_some()
            || self.results
    }

    /// The text a task's or a result's query must hold: `query:` and the free words.
    pub fn query_text(&self) -> Option<String> {
        match (&self.query, self.text.is_empty()) {
            (Some(q), false) => Some(format!("{q} {}", self.text)),
            (Some(q), true) => Some(q.clone()),
            (None, false) => Some(self.text.clone()),
            (None, true) => None,
        }
    }

    /// Whether stored results can match: nothing but their query text, `query:` and
    /// `after:` (their completion) is asked of them; a state, error, tenant, class or group
    /// is asked of tasks only.
    pub fn looks_in_results(&self) -> bool {
        self.results
            || (self.state.is_none()
                && self.error.is_none()
                && self.tenant.is_none()
                && self.class.is_none()
                && self.group.is_none()
                && (self.query.is_some() || !self.text.is_empty()))
    }

    /// The bulk page for the tasks this search finds, its filter carried (`/admin/bulk?...`),
    /// when a bulk filter can say the same: one state, and an age in whole hours. `upstream`
    /// is the listing's ("" = the default one).
    pub fn bulk_href(&self, upstream: &str) -> Option<String> {
        use crate::pages::format::encode_component as enc;
        let state = self.state?;
        let mut href = format!("/admin/bulk?state={}", state.as_str());
        if let Some(ms) = self.within_ms {
            if ms % 3_600_000 != 0 {
                return None;
            }
            href.push_str(&format!("&hours={}", ms / 3_600_000));
        }
        if let Some(e) = &self.error {
            href.push_str(&format!("&error={}", enc(e)));
        }
        let query = match (&self.query, self.text.as_str()) {
            (Some(q), "") => Some(q.clone()),
            (Some(q), t) => Some(format!("{q} {t}")),
            (None, "") => None,
            (None, t) => Some(t.to_string()),
        };
        if let Some(q) = query {
            href.push_str(&format!("&query={}", enc(&q)));
        }
        match self.tenant.as_deref() {
            Some("") => href.push_str("&tenant=none"),
            Some(t) => href.push_str(&format!("&tenant={}", enc(t))),
            None => {}
        }
        if let Some(c) = &self.class {
            href.push_str(&format!("&class={}", enc(c)));
        }
        if let Some(g) = &self.group {
            href.push_str(&format!("&group={}", enc(g)));
        }
        if !upstream.is_empty() && upstream != queue::DEFAULT_UPSTREAM {
            href.push_str(&format!("&upstream={}", enc(upstream)));
        }
        Some(href)
    }

    /// The filter for one state; free text counts as part of the query text.
    pub fn filter(&self, state: BulkState) -> BulkFilter {
        BulkFilter {
            state,
            error: self.error.clone(),
            query: self.query_text(),
            within_ms: self.within_ms,
            time_field: TimeField::Updated,
            tenant: self.tenant.clone(),
            class: self.class.clone(),
            group: self.group.clone(),
            ..BulkFilter::default()
        }
    }

    /// The states to look in.
    pub fn states(&self) -> Vec<BulkState> {
        match self.state {
            Some(s) => vec![s],
            None => BulkState::ALL.to_vec(),
        }
    }
}

/// Splits on spaces outside double quotes; quotes are removed.
fn tokens(s: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    for c in s.chars() {
        match c {
            '"' => quoted = !quoted,
            c if c.is_whitespace() && !quoted => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if quoted {
        return Err("a quote is not closed".into());
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    Ok(out)
}

/// `90s`, `15m`, `2h`, `7d` in ms (at most 366 days).
fn span_ms(v: &str) -> Option<u64> {
    let (num, unit) = v.split_at(v.find(|c: char| !c.is_ascii_digit())?);
    let n: u64 = num.parse().ok()?;
    let per = match unit {
        "s" => 1_000,
        "m" | "min" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    let ms = n.checked_mul(per)?;
    (ms > 0 && ms <= 366 * 86_400_000).then_some(ms)
}

/// Parses the search box.
pub fn parse(s: &str) -> Result<Search, String> {
    let mut out = Search::default();
    let mut text = Vec::new();
    for t in tokens(s)? {
        let Some((key, value)) = t.split_once(':') else {
            text.push(t);
            continue;
        };
        match key {
            "state" if value == "results" => out.results = true,
            "state" => {
                out.state = Some(BulkState::parse(value).ok_or_else(|| {
                    format!("state:{value} is not one of dead, waiting, ready, leased, results")
                })?)
            }
            "error" | "query" if value.is_empty() => {
                return Err(format!("{key}: needs a value, e.g. {key}:\"HTTP 500\""))
            }
            "error" => out.error = Some(value.to_string()),
            "tenant" if value == "none" => out.tenant = Some(String::new()),
            "tenant" if model::is_valid_tenant(value) => out.tenant = Some(value.to_string()),
            "tenant" => {
                return Err(format!(
                    "tenant:{value} is not a tenant name (letters, digits and ._:@-) or none"
                ))
            }
            "query" => out.query = Some(value.to_string()),
            "class" => {
                let class = model::error_class::ErrorClass::parse(value).ok_or_else(|| {
                    format!("class:{value} is not an error class such as http-503, timeout, bad-body, upstream-failed, deadline or other")
                })?;
                out.class = Some(class.slug());
            }
            "group" if model::error_class::is_group_key(value) => {
                out.group = Some(value.to_string())
            }
            "group" => return Err(format!("group:{value} is not a group key (16 hex digits)")),
            "upstream" if value.is_empty() => {
                return Err("upstream: needs a name, e.g. upstream:default".into())
            }
            "upstream" => out.upstream = Some(value.to_string()),
            "after" => {
                out.within_ms = Some(span_ms(value).ok_or_else(|| {
                    format!("after:{value} is not a span such as 90s, 15m, 2h or 7d")
                })?)
            }
            // Not a qualifier (e.g. a query with a colon in it): free text.
            _ => text.push(t),
        }
    }
    out.text = text.join(" ");
    let of_tasks = out.state.is_some()
        || out.error.is_some()
        || out.tenant.is_some()
        || out.class.is_some()
        || out.group.is_some();
    if out.results && of_tasks {
        return Err(
            "state:results finds stored results by their query (text, query:, after:); \
             state:, error:, tenant:, class: and group: are for tasks"
                .into(),
        );
    }
    Ok(out)
}

/// The upstream a search looks in: the one its `upstream:` names, else the page's (a search
/// that does not parse keeps the page's; its error is said where it is run).
pub fn chosen_upstream(search: Option<&str>, page: Option<String>) -> Option<String> {
    search
        .and_then(|s| parse(s).ok())
        .and_then(|s| s.upstream)
        .or(page)
}

/// `SCAN` calls (of ~1000 keys each) an id-prefix search may make.
const SCAN_BUDGET: usize = 100;
/// Hits returned at most.
const MAX_HITS: usize = 50;
/// Task records a qualified (or substring) search looks at, per state: the bound that
/// keeps it within the dashboard's time budget (Oban Web states its own the same way).
pub const SCAN_PER_STATE: u64 = 20_000;
/// Stored results a search by text looks at, newest first (each one read whole: a result
/// keeps its query beside its data).
pub const RESULTS_SCAN: usize = 5_000;

/// Runs a search on `q`: `text` as typed (the listing says it), `parsed` its meaning. Free text
/// alone is an exact query or id first; qualifiers (or free text that found nothing that way)
/// look through the task records, at most [`SCAN_PER_STATE`] of each state.
pub async fn run(q: &queue::Queue, text: &str, parsed: &Search) -> queue::Result<Listing> {
    let mut out = Listing {
        state: "search".into(),
        search: Some(text.to_string()),
        ..Listing::default()
    };
    let mut seen = BTreeSet::new();
    let free = parsed.text.as_str();
    if !parsed.qualified() {
        let mut ids = Vec::new();
        exact_or_prefix(q, free, &mut ids, &mut out.note).await?;
        show(q, ids, &mut seen, &mut out).await?;
    }
    let searching = out.tasks.is_empty() && out.results.is_empty() && !free.is_empty();
    // Finished tasks by a part of their query: the stored results (issue 43, row 6).
    if parsed.looks_in_results() && (parsed.qualified() || searching) {
        find_results(q, parsed, &mut seen, &mut out).await?;
    }
    if parsed.results {
        out.total = out.results.len() as u64;
        return Ok(out);
    }
    // Qualifiers, or free text that is no exact query or id: look through the records.
    if parsed.qualified() || searching {
        let mut ids = Vec::new();
        let (mut scanned, mut matched, mut complete) = (0u64, 0u64, true);
        let states = parsed.states();
        for state in &states {
            let keep = MAX_HITS.saturating_sub(ids.len());
            let sel = q
                .select_bounded(&parsed.filter(*state), keep, SCAN_PER_STATE)
                .await?;
            scanned += sel.scanned;
            matched += sel.matched;
            complete &= sel.complete;
            ids.extend(sel.ids);
        }
        let names: Vec<&str> = states.iter().map(|s| s.as_str()).collect();
        let mut said = format!(
            "{matched} {} among {scanned} {} ({})",
            if matched == 1 { "match" } else { "matches" },
            if scanned == 1 {
                "task looked at"
            } else {
                "tasks looked at"
            },
            names.join(", ")
        );
        if !complete {
            said.push_str(&format!(
                "; stopped at {SCAN_PER_STATE} a state: narrow it with state:, error:, query: or after:"
            ));
        }
        if matched as usize > MAX_HITS {
            said.push_str(&format!("; the first {MAX_HITS} are shown"));
        }
        out.note = Some(match out.note.take() {
            Some(n) => format!("{n}; {said}"),
            None => said,
        });
        show(q, ids, &mut seen, &mut out).await?;
    }
    out.total = (out.tasks.len() + out.results.len()) as u64;
    Ok(out)
}

/// Stored results whose query holds the search's text and `query:` (any case), completed
/// within `after:`, newest first: at most [`RESULTS_SCAN`] looked at, [`MAX_HITS`] shown; the
/// listing's note says how many matched among how many.
async fn find_results(
    q: &queue::Queue,
    parsed: &Search,
    seen: &mut BTreeSet<queue::TaskId>,
    out: &mut Listing,
) -> queue::Result<()> {
    let needle = parsed
        .query_text()
        .map(|n| n.to_lowercase())
        .filter(|n| !n.is_empty());
    let cutoff = match parsed.within_ms {
        Some(ms) => Some(q.now_ms().await? - ms as i64),
        None => None,
    };
    let (mut cursor, mut scanned, mut matched, mut complete) = (None::<String>, 0usize, 0u64, true);
    'pages: loop {
        let page = q
            .list(
                queue::ListState::Results,
                queue::Order::NewestFirst,
                cursor.as_deref(),
                queue::MAX_PAGE,
            )
            .await?;
        for r in page.results {
            if cutoff.is_some_and(|c| r.completed_ms < c) {
                break 'pages; // newest first: every later one is older still
            }
            scanned += 1;
            if needle
                .as_deref()
                .is_none_or(|n| r.query.to_lowercase().contains(n))
            {
                matched += 1;
                if out.tasks.len() + out.results.len() < MAX_HITS && seen.insert(r.id.clone()) {
                    out.results.push(r);
                }
            }
        }
        match page.next_cursor {
            Some(c) if scanned < RESULTS_SCAN => cursor = Some(c),
            Some(_) => {
                complete = false;
                break;
            }
            None => break,
        }
    }
    let mut said = format!(
        "{matched} {} among {scanned} stored {}",
        if matched == 1 {
            "result matches"
        } else {
            "results match"
        },
        if scanned == 1 { "result" } else { "results" },
    );
    if !complete {
        said.push_str(&format!(
            "; stopped at the newest {RESULTS_SCAN}: narrow it with after:"
        ));
    }
    out.note = Some(match out.note.take() {
        Some(n) => format!("{n}; {said}"),
        None => said,
    });
    Ok(())
}

/// Reads each id not shown yet (up to the hit cap) and adds what exists to the listing:
/// one read per id, whether it came from an exact match or from the records.
async fn show(
    q: &queue::Queue,
    ids: Vec<queue::TaskId>,
    seen: &mut BTreeSet<queue::TaskId>,
    out: &mut Listing,
) -> queue::Result<()> {
    for id in ids {
        if out.tasks.len() + out.results.len() >= MAX_HITS || !seen.insert(id.clone()) {
            continue;
        }
        if let Some(d) = q.get(&id).await? {
            if let Some(t) = d.task {
                out.tasks.push(t);
            } else if let Some(r) = d.result {
                out.results.push(r);
            }
        }
    }
    Ok(())
}

/// An exact query (its id) or a task id, whole or its start (a bounded key scan).
async fn exact_or_prefix(
    q: &queue::Queue,
    text: &str,
    ids: &mut Vec<queue::TaskId>,
    note: &mut Option<String>,
) -> queue::Result<()> {
    if let Ok(norm) = queue::normalise_query(text) {
        ids.push(q.task_id(&norm));
    }
    let lower = text.to_ascii_lowercase();
    if !lower.is_empty() && lower.len() <= 32 && lower.bytes().all(|b| b.is_ascii_hexdigit()) {
        if let Ok(id) = lower.parse::<queue::TaskId>() {
            ids.push(id);
        } else {
            let (found, complete) = q.ids_with_prefix(&lower, MAX_HITS, SCAN_BUDGET).await?;
            if !complete {
                *note = Some(format!(
                    "id prefix search looked at about {}k keys and stopped; type more of the id",
                    SCAN_BUDGET
                ));
            }
            ids.extend(found);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_results_is_a_search_of_stored_results_by_their_query() {
        let s = parse("state:results story").unwrap();
        assert!(s.results && s.state.is_none() && s.qualified());
        assert!(s.looks_in_results());
        // Free text or query: alone may match results too; a task's qualifier may not.
        assert!(parse("story").unwrap().looks_in_results());
        assert!(parse("query:story after:2h").unwrap().looks_in_results());
        assert!(!parse("story state:dead").unwrap().looks_in_results());
        assert!(!parse("story tenant:acme").unwrap().looks_in_results());
        assert!(!parse("after:2h").unwrap().looks_in_results());
        for mixed in [
            "state:results error:x",
            "state:results state:dead",
            "tenant:a state:results",
        ] {
            let e = parse(mixed).unwrap_err();
            assert!(e.contains("are for tasks"), "{mixed}: {e}");
        }
        assert!(parse("state:done").unwrap_err().contains("leased, results"));
    }

    #[test]
    fn qualifiers_quotes_and_free_text() {
        let s = parse(r#"state:dead error:"HTTP 500" query:order- after:2h  late"#).unwrap();
        assert_eq!(s.state, Some(BulkState::Dead));
        assert_eq!(s.error.as_deref(), Some("HTTP 500"));
        assert_eq!(s.query.as_deref(), Some("order-"));
        assert_eq!(s.within_ms, Some(2 * 3_600_000));
        assert_eq!(s.text, "late");
        assert!(s.qualified());
        let f = s.filter(BulkState::Dead);
        assert_eq!(f.query.as_deref(), Some("order- late"));
        assert_eq!(s.states(), vec![BulkState::Dead]);
        let t = parse("tenant:acme state:ready").unwrap();
        assert_eq!(t.filter(BulkState::Ready).tenant.as_deref(), Some("acme"));
        assert_eq!(parse("tenant:none").unwrap().tenant.as_deref(), Some(""));
        let u = parse("upstream:search state:dead").unwrap();
        assert_eq!(u.upstream.as_deref(), Some("search"));
        assert!(parse("upstream:search").unwrap().qualified());
        assert!(parse("upstream:").is_err());
        assert_eq!(
            chosen_upstream(Some("upstream:search x"), Some("default".into())).as_deref(),
            Some("search")
        );
        assert_eq!(
            chosen_upstream(Some("x"), Some("default".into())).as_deref(),
            Some("default")
        );
    }

    #[test]
    fn plain_text_and_unknown_keys_are_free_text() {
        let s = parse("region-005123 http://x").unwrap();
        assert!(!s.qualified());
        assert_eq!(s.text, "region-005123 http://x");
        assert_eq!(s.states().len(), 4);
    }

    #[test]
    fn mistakes_are_said() {
        assert!(parse("state:gone").unwrap_err().contains("dead, waiting"));
        assert!(parse("after:2y").unwrap_err().contains("span"));
        assert!(parse("after:0h").is_err());
        assert!(parse("error:").is_err());
        assert!(parse("tenant:a|b").unwrap_err().contains("tenant"));
        assert!(parse("tenant:").is_err());
        assert!(parse(r#"error:"HTTP 500"#).unwrap_err().contains("quote"));
        assert_eq!(span_ms("90s"), Some(90_000));
        assert_eq!(span_ms("15min"), Some(900_000));
        assert_eq!(span_ms("7d"), Some(7 * 86_400_000));
        assert_eq!(span_ms("400d"), None);
    }

    /// Issue 29 row 6: search results led nowhere. A search a bulk filter can say links to the
    /// bulk page with every qualifier carried; one it cannot (no state, a span not in hours)
    /// has no link rather than one that would act on more.
    #[test]
    fn a_search_carries_its_filter_to_the_bulk_page() {
        let s = parse(r#"state:dead error:"HTTP 503" query:order- after:2h late tenant:acme"#);
        assert_eq!(
            s.unwrap().bulk_href("search").as_deref(),
            Some(
                "/admin/bulk?state=dead&hours=2&error=HTTP%20503&query=order-%20late\
                 &tenant=acme&upstream=search"
            )
        );
        let none = parse("state:waiting tenant:none").unwrap();
        assert_eq!(
            none.bulk_href("").as_deref(),
            Some("/admin/bulk?state=waiting&tenant=none")
        );
        assert_eq!(parse("error:503").unwrap().bulk_href(""), None, "no state");
        assert_eq!(parse("state:dead after:90m").unwrap().bulk_href(""), None);
    }
}
