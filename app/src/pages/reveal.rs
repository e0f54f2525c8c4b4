//! A query as an operator must see it: every character that shows nothing by itself (a joiner,
//! a variation selector, a flag's tag letters, or whatever an older stored query still holds)
//! is printed as a visible marker such as `⟨U+200D⟩`, and a badge counts them. Two queries that
//! look alike in a browser ("report", and "report" with tag characters after it) are two tasks;
//! here they never look identical.
//!
//! Which characters are invisible is the query rule's own table
//! ([`model::query_chars::is_invisible_char`]), so the pages reveal exactly what the rule
//! treats as hidden. The admin pages show every query through [`QueryText`]; the public query
//! page shows the user's own text as typed.
//!
//! Upstream text (answer data and partials, errors, a failed call's body, on the public query
//! page and the admin pages alike) goes through [`UpstreamText`]: it marks the characters a
//! query refuses where they stand (`model::shown_chars`, the query check's own scan), so a
//! U+202E cannot turn a line around and a U+200B cannot hide, while an emoji's joiner still
//! draws the emoji and a line feed still ends a line.

use leptos::prelude::*;

use crate::pages::format::plural;
use model::query_chars::{invisible_kind, is_invisible_char};

/// A run of visible text, or one invisible character.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    Text(String),
    Hidden(char),
}

/// `text` cut into visible runs and invisible characters, in order (never an empty run).
pub fn pieces(text: &str) -> Vec<Piece> {
    let mut out = Vec::new();
    let mut run = String::new();
    for c in text.chars() {
        if is_invisible_char(c) {
            if !run.is_empty() {
                out.push(Piece::Text(std::mem::take(&mut run)));
            }
            out.push(Piece::Hidden(c));
        } else {
            run.push(c);
        }
    }
    if !run.is_empty() {
        out.push(Piece::Text(run));
    }
    out
}

/// The marker that stands for an invisible character: `⟨U+200D⟩`.
pub fn marker(c: char) -> String {
    format!("⟨U+{:04X}⟩", c as u32)
}

/// The text with each invisible character replaced by its marker (as [`QueryText`] shows it).
pub fn revealed(text: &str) -> String {
    pieces(text)
        .into_iter()
        .map(|p| match p {
            Piece::Text(s) => s,
            Piece::Hidden(c) => marker(c),
        })
        .collect()
}

/// `text` cut into visible runs and the characters a page marks in upstream text
/// ([`model::shown_chars::marked_chars`]), in order.
pub fn upstream_pieces(text: &str) -> Vec<Piece> {
    let mut out = Vec::new();
    let mut from = 0;
    for (at, c) in model::shown_chars::marked_chars(text) {
        if at > from {
            out.push(Piece::Text(text[from..at].to_string()));
        }
        out.push(Piece::Hidden(c));
        from = at + c.len_utf8();
    }
    if from < text.len() {
        out.push(Piece::Text(text[from..].to_string()));
    }
    out
}

/// The marker of an invisible character as a page shows it: the code point, titled with its
/// kind.
fn marker_view(c: char) -> AnyView {
    let title = format!("U+{:04X}, {}: shows nothing", c as u32, invisible_kind(c));
    view! { <span class="hidden-char" title=title data-testid="hidden-char">{marker(c)}</span> }
        .into_any()
}

/// Upstream text, as text, with the characters a query would refuse there shown as markers.
#[component]
pub fn UpstreamText(#[prop(into)] text: String) -> impl IntoView {
    let pieces = upstream_pieces(&text);
    // Nearly all upstream text has nothing to mark: one text node then, not a list of views
    // (no hydration marker after it, less to render on the busiest pages).
    if let [Piece::Text(_)] | [] = pieces.as_slice() {
        return text.into_any();
    }
    pieces
        .into_iter()
        .map(|p| match p {
            Piece::Text(s) => s.into_any(),
            Piece::Hidden(c) => marker_view(c),
        })
        .collect_view()
        .into_any()
}

/// A query's text with its invisible characters revealed and counted; "—" when empty.
#[component]
pub fn QueryText(#[prop(into)] text: String) -> impl IntoView {
    if text.is_empty() {
        return "—".into_any();
    }
    let pieces = pieces(&text);
    let hidden = pieces
        .iter()
        .filter(|p| matches!(p, Piece::Hidden(_)))
        .count();
    let parts = pieces
        .into_iter()
        .map(|p| match p {
            Piece::Text(s) => s.into_any(),
            Piece::Hidden(c) => marker_view(c),
        })
        .collect_view();
    let badge = (hidden > 0).then(|| {
        let words = plural(hidden as u64, "hidden character", "hidden characters");
        view! {
            " "
            <span class="badge hidden-chars" data-testid="badge-hidden-chars"
                title="This query holds characters that show nothing; each is shown as ⟨U+…⟩.">
                {words}
            </span>
        }
    });
    view! { <span class="query-text">{parts}</span>{badge} }.into_any()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invisible_characters_become_markers() {
        assert_eq!(revealed("👩\u{200D}👩\u{200D}👧"), "👩⟨U+200D⟩👩⟨U+200D⟩👧");
        assert_eq!(revealed("report\u{E0041}"), "report⟨U+E0041⟩");
        assert_eq!(revealed("plain text"), "plain text");
        assert_eq!(
            pieces("a\u{FE0F}\u{200C}b"),
            vec![
                Piece::Text("a".into()),
                Piece::Hidden('\u{FE0F}'),
                Piece::Hidden('\u{200C}'),
                Piece::Text("b".into()),
            ]
        );
        assert!(pieces("").is_empty());
    }

    /// Upstream text: an override and a zero-width space become markers, writing and layout
    /// stay (issue 39 row 6).
    #[test]
    fn upstream_text_marks_what_a_query_refuses() {
        let shown = |t: &str| -> String {
            upstream_pieces(t)
                .into_iter()
                .map(|p| match p {
                    Piece::Text(s) => s,
                    Piece::Hidden(c) => marker(c),
                })
                .collect()
        };
        assert_eq!(shown("\"evil\u{202E}txt.exe\""), "\"evil⟨U+202E⟩txt.exe\"");
        assert_eq!(shown("a\u{200B}b\u{200B}"), "a⟨U+200B⟩b⟨U+200B⟩");
        assert_eq!(shown("\u{FEFF}"), "⟨U+FEFF⟩");
        assert_eq!(
            shown("{\n  \"who\": \"👩\u{200D}👧\"\n}"),
            "{\n  \"who\": \"👩\u{200D}👧\"\n}"
        );
        assert!(upstream_pieces("").is_empty());
    }
}
