//! Which characters of upstream text a page shows as a marker (`⟨U+202E⟩`) instead of raw.
//!
//! Upstream text (answer data and partials, error messages, a failed call's body) is shown as
//! text, never HTML; yet a U+202E RIGHT-TO-LEFT OVERRIDE in it still turns the rest of the
//! line around, and a U+200B ZERO WIDTH SPACE makes two texts that look the same differ. A
//! query refuses exactly these characters where they stand ([`crate::query_chars`]); the pages
//! mark the same ones, with the same table and the same context rules
//! ([`scan_misplaced`]), so an emoji's joiner or a Persian non-joiner still renders as
//! writing while an override or a zero-width space is seen.
//!
//! One difference, on purpose: tab, line feed and carriage return are layout in upstream text
//! (pretty JSON, a body's lines) and stay as they are; a query never meets them, its
//! whitespace being collapsed to spaces before the check.

use std::ops::ControlFlow;

use crate::query_chars::scan_misplaced;

/// The whitespace a page keeps as layout.
fn is_layout(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r')
}

/// The byte offsets and characters of `text` a page shows as markers, in order.
pub fn marked_chars(text: &str) -> Vec<(usize, char)> {
    let mut out = Vec::new();
    scan_misplaced(text, |m| {
        if !is_layout(m.c) {
            out.push((m.at, m.c));
        }
        ControlFlow::Continue(())
    });
    // A malformed flag names its worst tag first: back into text order.
    out.sort_unstable_by_key(|&(at, _)| at);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::normalise_query;

    fn marked(text: &str) -> Vec<char> {
        marked_chars(text).into_iter().map(|(_, c)| c).collect()
    }

    /// The characters of issue 39 row 6 and their kin are marked; real writing and layout
    /// whitespace are not.
    #[test]
    fn overrides_and_zero_width_characters_are_marked_writing_is_not() {
        assert_eq!(marked("evil\u{202E}txt.exe"), ['\u{202E}']);
        assert_eq!(marked("a\u{200B}b"), ['\u{200B}']);
        assert_eq!(
            marked("\u{FEFF}x\u{2066}y\u{AD}"),
            ['\u{FEFF}', '\u{2066}', '\u{AD}']
        );
        assert_eq!(marked("bell\u{7} esc\u{1B}"), ['\u{7}', '\u{1B}']);
        assert_eq!(marked("report\u{E0041}"), ['\u{E0041}']);
        assert!(marked("{\n\t\"a\": 1\r\n}").is_empty());
        for writing in [
            "👩\u{200D}👩\u{200D}👧",
            "می\u{200C}خواهم",
            "\u{2764}\u{FE0F}",
            "\u{1F3F4}\u{E0067}\u{E0062}\u{E0073}\u{E0063}\u{E0074}\u{E007F}",
            "plain text",
        ] {
            assert!(marked(writing).is_empty(), "{writing:?}");
        }
        // A malformed flag: every tag, in text order.
        assert_eq!(
            marked_chars("\u{1F3F4}\u{E0067}\u{E0047}"),
            [(4, '\u{E0067}'), (8, '\u{E0047}')]
        );
    }

    /// One table: a one-line text (no layout whitespace) is refused as a query exactly when a
    /// page would mark something in it, and the query names a marked character.
    #[test]
    fn a_page_marks_what_a_query_refuses() {
        for text in [
            "a\u{200B}b",
            "x\u{202E}txt",
            "\u{200D}👩",
            "re\u{200C}port",
            "a \u{FE0F}",
            "👩\u{200D}👩",
            "۱\u{0600}",
            "plain",
            "\u{1F3F4}\u{E0067}\u{E007F}",
            "bell\u{7}",
        ] {
            let marks = marked_chars(text);
            match normalise_query(text) {
                Ok(_) => assert!(marks.is_empty(), "{text:?} accepted, marked {marks:?}"),
                Err(e) => {
                    assert!(
                        marks
                            .iter()
                            .any(|&(_, c)| e.0.contains(&format!("U+{:04X}", c as u32))),
                        "{text:?}: {e} names none of {marks:?}"
                    );
                }
            }
        }
    }
}
