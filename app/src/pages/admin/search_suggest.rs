//! Suggestions for the task search box as it is typed (issue 29; Oban Web completes its
//! search the same way): the token under the caret is completed — a qualifier's name
//! (`sta` → `state:`), or a qualifier's value (`state:d` → `state:dead `, `tenant:ac` →
//! `tenant:acme `) from a [`Vocabulary`] of what the queue holds. A value with spaces is
//! quoted the way `search::parse` reads it (`error:"HTTP 503"`); one with a double quote in
//! it cannot be said in the search language and is never offered.
//!
//! [`suggest`] is pure (text, caret, vocabulary → at most [`MAX_SUGGESTIONS`]); the server
//! function that gathers the vocabulary and the combobox that shows the answer are
//! `search_box`'s.

use serde::{Deserialize, Serialize};

/// Suggestions offered at once, at most.
pub const MAX_SUGGESTIONS: usize = 10;

/// What values are offered: the queue's own words, gathered (bounded) by the server.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Vocabulary {
    /// Every upstream's name.
    pub upstreams: Vec<String>,
    /// Tenants seen on tasks (not "": "none" is always offered).
    pub tenants: Vec<String>,
    /// Error classes seen: (slug, label).
    pub classes: Vec<(String, String)>,
    /// Dead-work groups, largest first: (key, class label, normalised message).
    pub groups: Vec<(String, String, String)>,
}

/// One completion.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Suggestion {
    /// What the option shows, e.g. `state:dead`.
    pub label: String,
    /// One line about it.
    pub hint: String,
    /// The box's whole text with the suggestion accepted.
    pub text: String,
    /// Where the caret goes then, in UTF-16 code units (the browser's `selectionStart`).
    pub caret: u32,
}

/// The qualifiers `search::parse` knows, with a line of help each.
pub const QUALIFIERS: [(&str, &str); 8] = [
    ("state", "dead, waiting, ready, leased or results"),
    ("error", "part of the last error's text"),
    ("query", "part of the query text"),
    ("after", "changed within a span: 90s, 15m, 2h, 7d"),
    ("tenant", "exactly this tenant (who asked), or none"),
    ("class", "the last error's class: http-503, timeout, …"),
    ("group", "a dead-work group (its key)"),
    ("upstream", "another upstream's tasks"),
];

const STATES: [(&str, &str); 5] = [
    ("dead", "failed for good"),
    ("waiting", "due later, or retrying"),
    ("ready", "waiting for a worker"),
    ("leased", "a worker holds it"),
    ("results", "finished: stored results, by their query"),
];

const SPANS: [(&str, &str); 4] = [
    ("15m", "changed in the last 15 minutes"),
    ("1h", "changed in the last hour"),
    ("24h", "changed in the last day"),
    ("7d", "changed in the last week"),
];

/// The error classes every queue may have (`model::error_class`), after the ones seen.
const CLASSES: [model::error_class::ErrorClass; 8] = {
    use model::error_class::ErrorClass as C;
    [
        C::Timeout,
        C::Unreachable,
        C::BadBody,
        C::UpstreamFailed,
        C::Deadline,
        C::MaxPolls,
        C::TooLarge,
        C::Other,
    ]
};

/// The byte index of UTF-16 position `caret` in `text` (clamped to its end; inside a
/// character: after it).
fn byte_at(text: &str, caret: u32) -> usize {
    let mut units = 0u32;
    for (i, c) in text.char_indices() {
        if units >= caret {
            return i;
        }
        units += c.len_utf16() as u32;
    }
    text.len()
}

fn utf16_len(s: &str) -> u32 {
    s.encode_utf16().count() as u32
}

/// The token the byte index `at` is in or touches, as (start, end) bytes: tokens are split on
/// whitespace outside double quotes, as the parser splits them. In whitespace: empty, at `at`.
fn token_at(text: &str, at: usize) -> (usize, usize) {
    let mut quoted = false;
    let mut start: Option<usize> = None;
    for (i, c) in text.char_indices() {
        if c == '"' {
            quoted = !quoted;
        }
        let gap = c.is_whitespace() && !quoted;
        match (start, gap) {
            (None, false) => start = Some(i),
            (Some(s), true) if i >= at => return (s, i),
            (Some(_), true) => start = None,
            _ => {}
        }
        if start.is_none() && i >= at {
            return (at, at);
        }
    }
    match start {
        Some(s) => (s, text.len()),
        None => (at, at),
    }
}

/// `key:value`, quoted when the value has a space; `None` when it cannot be said.
fn qualified(key: &str, value: &str) -> Option<String> {
    if value.is_empty() || value.contains('"') {
        None
    } else if value.contains(char::is_whitespace) {
        Some(format!("{key}:\"{value}\""))
    } else {
        Some(format!("{key}:{value}"))
    }
}

/// The part of a group's normalised message an `error:` search can match: the words before
/// the first number (`#`), without a word cut there or trailing punctuation.
fn error_words(message: &str) -> Option<String> {
    let head = match message.split_once('#') {
        Some((head, _)) => head.rsplit_once(char::is_whitespace).map_or("", |(w, _)| w),
        None => message,
    };
    let head = head.trim_end_matches(|c: char| c.is_whitespace() || ":,;-(".contains(c));
    (head.chars().count() >= 3).then(|| head.chars().take(60).collect())
}

/// The values offered for `key`: (value, hint), best first.
fn values(key: &str, vocab: &Vocabulary) -> Vec<(String, String)> {
    let fixed = |list: &[(&str, &str)]| {
        list.iter()
            .map(|(v, h)| (v.to_string(), h.to_string()))
            .collect()
    };
    match key {
        "state" => fixed(&STATES),
        "after" => fixed(&SPANS),
        "tenant" => vocab
            .tenants
            .iter()
            .filter(|t| !t.is_empty())
            .map(|t| (t.clone(), "tenant".to_string()))
            .chain([("none".to_string(), "tasks of no tenant".to_string())])
            .collect(),
        "class" => vocab
            .classes
            .iter()
            .cloned()
            .chain(CLASSES.iter().map(|c| (c.slug(), c.label())))
            .collect(),
        "group" => vocab
            .groups
            .iter()
            .map(|(key, class, message)| (key.clone(), group_words(class, message)))
            .collect(),
        "error" => vocab
            .groups
            .iter()
            .filter_map(|(_, class, message)| {
                error_words(message).map(|w| (w, group_words(class, message)))
            })
            .collect(),
        "upstream" => vocab
            .upstreams
            .iter()
            .map(|u| (u.clone(), "this upstream's tasks".to_string()))
            .collect(),
        _ => Vec::new(),
    }
}

/// A group as its hint says it: its class, then its message — the message alone when it
/// starts with the class already ("HTTP 503: simulated outage", not "HTTP 503: HTTP 503: …").
fn group_words(class: &str, message: &str) -> String {
    if message.starts_with(class) {
        message.to_string()
    } else {
        format!("{class}: {message}")
    }
}

/// Whether `value` (with its `hint`) is what `typed` starts to say: a prefix of the value,
/// ignoring case — or, for the texts one remembers a word of (an error, a group: their hint
/// is the whole message), any part of the value or of the message.
fn offered(key: &str, value: &str, hint: &str, typed: &str) -> bool {
    let (value, typed) = (value.to_lowercase(), typed.to_lowercase());
    match key {
        "error" | "group" => value.contains(&typed) || hint.to_lowercase().contains(&typed),
        _ => value.starts_with(&typed),
    }
}

/// The completions of the token at `caret` (UTF-16 units) in `text`, at most
/// [`MAX_SUGGESTIONS`], each with the whole text as it would be accepted.
pub fn suggest(text: &str, caret: u32, vocab: &Vocabulary) -> Vec<Suggestion> {
    let at = byte_at(text, caret);
    let (start, mut end) = token_at(text, at);
    // At a token's very start nothing of it is typed yet: insert before it, not over it.
    if start == at {
        end = at;
    }
    let typed = &text[start..at];
    let rest = &text[end..];
    // (what replaces the token, the label, the hint, whether a value follows at once)
    let mut picks: Vec<(String, String, String, bool)> = Vec::new();
    match typed.split_once(':') {
        None => {
            let typed = typed.to_lowercase();
            for (name, help) in QUALIFIERS {
                if name.starts_with(&typed) {
                    let s = format!("{name}:");
                    picks.push((s.clone(), s, help.to_string(), true));
                }
            }
        }
        Some((key, value)) => {
            let value = value.trim_matches('"');
            for (v, hint) in values(key, vocab) {
                if !offered(key, &v, &hint, value) {
                    continue;
                }
                if let Some(s) = qualified(key, &v) {
                    if !picks.iter().any(|p| p.0 == s) {
                        picks.push((s.clone(), s, hint, false));
                    }
                }
            }
        }
    }
    picks
        .into_iter()
        .take(MAX_SUGGESTIONS)
        .map(|(token, label, hint, more)| {
            let head = format!("{}{token}", &text[..start]);
            // A finished value is followed by a space (the next token starts after it); a
            // qualifier's name is not (its value follows), unless a token is right after it.
            let gap = if rest.starts_with(char::is_whitespace) || (more && rest.is_empty()) {
                ""
            } else {
                " "
            };
            let caret = utf16_len(&head) + u32::from(!more);
            Suggestion {
                label,
                hint: hint.chars().take(100).collect(),
                text: format!("{head}{gap}{rest}"),
                caret,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_says_its_class_once() {
        assert_eq!(
            group_words("HTTP 503", "HTTP 503: simulated outage"),
            "HTTP 503: simulated outage"
        );
        assert_eq!(group_words("timeout", "after # ms"), "timeout: after # ms");
    }

    fn vocab() -> Vocabulary {
        Vocabulary {
            upstreams: vec!["default".into(), "search".into()],
            tenants: vec!["acme".into(), "acorn-labs".into(), "globex".into()],
            classes: vec![("http-503".into(), "HTTP 503".into())],
            groups: vec![
                (
                    "00000000000000aa".into(),
                    "HTTP 503".into(),
                    "HTTP 503: db-# is down".into(),
                ),
                (
                    "00000000000000bb".into(),
                    "timeout".into(),
                    "timeout after #ms".into(),
                ),
                (
                    "00000000000000cc".into(),
                    "other".into(),
                    "said \"no\" twice".into(),
                ),
            ],
        }
    }

    fn texts(text: &str, caret: usize) -> Vec<(String, u32)> {
        suggest(text, caret as u32, &vocab())
            .into_iter()
            .map(|s| (s.text, s.caret))
            .collect()
    }

    fn at_end(text: &str) -> Vec<(String, u32)> {
        texts(text, text.encode_utf16().count())
    }

    #[test]
    fn a_qualifier_name_is_completed_and_its_values_follow() {
        assert_eq!(at_end("sta"), vec![("state:".to_string(), 6)]);
        assert_eq!(at_end("STA"), vec![("state:".to_string(), 6)]);
        assert_eq!(at_end("state:d"), vec![("state:dead ".to_string(), 11)]);
        let every = suggest("", 0, &vocab());
        assert_eq!(every.len(), QUALIFIERS.len());
        assert_eq!(every[0].hint, "dead, waiting, ready, leased or results");
        assert!(at_end("zzz").is_empty());
        assert!(at_end("query:ord").is_empty(), "no query vocabulary");
    }

    #[test]
    fn only_the_token_at_the_caret_is_replaced() {
        // The caret after `tenant:ac` in the middle: the rest is kept, with its space.
        let text = "state:dead tenant:ac error:x";
        let got = texts(text, "state:dead tenant:ac".len());
        assert_eq!(
            got,
            vec![
                ("state:dead tenant:acme error:x".to_string(), 23),
                ("state:dead tenant:acorn-labs error:x".to_string(), 29),
            ]
        );
        // Mid-token: the whole token is replaced, not just what is left of the caret.
        assert_eq!(texts("state:dxx", 7), vec![("state:dead ".to_string(), 11)]);
        assert_eq!(at_end("tenant:n"), vec![("tenant:none ".to_string(), 12)]);
        // In the gap between tokens: every qualifier, inserted there.
        let between = texts("state:dead  late", 11);
        assert_eq!(between[0], ("state:dead state: late".to_string(), 17));
        // At the start of a token: inserted before it, the token kept.
        assert_eq!(texts("late", 0)[0], ("state: late".to_string(), 6));
    }

    #[test]
    fn values_with_spaces_are_quoted_as_the_parser_reads_them() {
        let got = at_end("state:dead error:\"HTTP");
        assert_eq!(got[0].0, "state:dead error:\"HTTP 503\" ");
        #[cfg(feature = "ssr")]
        {
            let parsed = super::super::search::parse(&got[0].0).unwrap();
            assert_eq!(parsed.error.as_deref(), Some("HTTP 503"));
        }
        // A word from the middle finds the message; digits and the cut word are left out,
        // so what is inserted is a part of the error's text a search matches.
        assert_eq!(at_end("error:after")[0].0, "error:\"timeout after\" ");
        assert_eq!(at_end("error:down")[0].0, "error:\"HTTP 503\" ");
        // A message with a double quote cannot be said: never offered.
        assert!(at_end("error:said").is_empty());
        // Groups by key or by a word of their message.
        assert_eq!(at_end("group:down")[0].0, "group:00000000000000aa ");
        assert_eq!(at_end("class:http")[0].0, "class:http-503 ");
        assert!(at_end("class:t").iter().any(|(t, _)| t == "class:timeout "));
        assert_eq!(at_end("upstream:s")[0].0, "upstream:search ");
    }

    #[test]
    fn the_caret_counts_utf16_and_the_answer_is_bounded() {
        // "é" is one UTF-16 unit and two bytes; "😀" two units and four bytes.
        assert_eq!(at_end("é sta"), vec![("é state:".to_string(), 8)]);
        assert_eq!(at_end("😀 sta"), vec![("😀 state:".to_string(), 9)]);
        assert_eq!(texts("sta", 999), vec![("state:".to_string(), 6)]);
        let many = Vocabulary {
            tenants: (0..50).map(|n| format!("t{n}")).collect(),
            ..vocab()
        };
        assert_eq!(suggest("tenant:", 7, &many).len(), MAX_SUGGESTIONS);
    }
}
