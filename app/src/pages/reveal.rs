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
            Piece::Hidden(c) => {
                let title = format!("U+{:04X}, {}: shows nothing", c as u32, invisible_kind(c));
                view! { <span class="hidden-char" title=title data-testid="hidden-char">{marker(c)}</span> }
                    .into_any()
            }
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
}
