//! Which characters a query may hold, and where.
//!
//! The rule is "refuse what no real text needs, accept what real text does, and show the
//! rest" (issue 28). Every table comes from Unicode's own data as ICU4X ships it
//! (`icu_properties`, compiled data; already in the tree through `url`, on the server and in
//! the browser), never from a hand-picked list that misses the next character:
//!
//! - Invisible (shows nothing by itself): control characters (Cc), Default_Ignorable_Code_Point,
//!   General_Category=Format (Cf) and Bidi_Control. These make two queries that look
//!   identical differ ("report" + tag characters) or make one read as another (a
//!   right-to-left override), so they are refused, except these few where writing uses them:
//! - U+200D ZERO WIDTH JOINER inside an emoji sequence (UTS #51: 👩‍👩‍👧, 🏳️‍🌈) or between
//!   letters of a script where a joiner shapes the text (Indic conjuncts, next to a virama;
//!   joining scripts such as Arabic and Syriac, by their Joining_Type).
//! - U+200C ZERO WIDTH NON-JOINER between letters of such a script (Persian "می‌خواهم").
//! - Variation selectors after the character they select a form of: U+FE0E/U+FE0F after an
//!   emoji character, U+E0100–E01EF after an ideograph, the others after a visible character.
//! - Tag characters only as UTS #51 uses them: the tag letters and digits of a subdivision
//!   flag after U+1F3F4, closed by U+E007F (🏴󠁧󠁢󠁳󠁣󠁴󠁿).
//!
//! Anywhere else (at the start or the end, doubled, next to a space or punctuation) they are
//! refused with the code point named. What is accepted is still invisible, so the admin pages
//! reveal it ([`is_invisible_char`], `app::pages::reveal`).

use icu_properties::props::{
    BidiControl, DefaultIgnorableCodePoint, Emoji, ExtendedPictographic, GeneralCategory,
    GeneralCategoryGroup, Ideographic, JoiningType, VariationSelector,
};
use icu_properties::{CodePointMapData, CodePointSetData};
use std::ops::ControlFlow;

/// The user's text breaks the query rules; the message is safe to show to them. Here, beside the
/// rules that raise it, so `id` (which uses them) and this module do not name each other.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidQuery(pub String);

const ZWNJ: char = '\u{200C}';
const ZWJ: char = '\u{200D}';
const TEXT_STYLE: char = '\u{FE0E}';
const EMOJI_STYLE: char = '\u{FE0F}';
/// The only tag base UTS #51 defines (WAVING BLACK FLAG).
const BLACK_FLAG: char = '\u{1F3F4}';
const CANCEL_TAG: char = '\u{E007F}';
/// A subdivision id in a flag (UTS #51 annex C, CLDR `unicode_subdivision_id`): a region of 2
/// letters or 3 digits and a suffix of 1 to 4 letters or digits.
const FLAG_TAGS: std::ops::RangeInclusive<usize> = 3..=7;
/// Canonical_Combining_Class=Virama: the sign that makes an Indic consonant cluster, which a
/// joiner next to it shapes (half forms, conjuncts, chillus).
const VIRAMA: u8 = 9;

fn general_category(c: char) -> GeneralCategory {
    CodePointMapData::<GeneralCategory>::new().get(c)
}

/// Whether `c` shows nothing by itself: a control character, a default-ignorable code point,
/// a format character or a bidirectional control. The admin pages mark each one they print.
pub fn is_invisible_char(c: char) -> bool {
    c.is_control()
        || CodePointSetData::new::<DefaultIgnorableCodePoint>().contains(c)
        || general_category(c) == GeneralCategory::Format
        || CodePointSetData::new::<BidiControl>().contains(c)
}

/// The invisible characters a query may hold in the right place (the context rules above).
fn has_context_rule(c: char) -> bool {
    c == ZWJ || c == ZWNJ || is_variation_selector(c) || is_flag_tag(c) || c == CANCEL_TAG
}

fn is_variation_selector(c: char) -> bool {
    CodePointSetData::new::<VariationSelector>().contains(c)
}

/// A tag letter or digit, as a subdivision flag spells its id.
fn is_flag_tag(c: char) -> bool {
    matches!(c, '\u{E0030}'..='\u{E0039}' | '\u{E0061}'..='\u{E007A}')
}

fn is_tag(c: char) -> bool {
    ('\u{E0020}'..=CANCEL_TAG).contains(&c)
}

/// Whether `c` is refused in a normalised query wherever it stands: invisible and without a
/// context rule. (The OpenAPI `pattern` lists exactly these, see [`refused_ranges`].)
pub fn is_refused_char(c: char) -> bool {
    is_invisible_char(c) && !has_context_rule(c)
}

/// What kind of invisible character `c` is, in a few words (error messages, marker titles).
pub fn invisible_kind(c: char) -> &'static str {
    match c {
        ZWJ => "zero width joiner",
        ZWNJ => "zero width non-joiner",
        _ if c.is_control() => "control character",
        _ if is_variation_selector(c) => "variation selector",
        _ if is_tag(c) || c == '\u{E0001}' => "tag character",
        _ if CodePointSetData::new::<BidiControl>().contains(c) => "bidirectional control",
        _ if general_category(c) == GeneralCategory::Format => "format character",
        _ if is_invisible_char(c) => "default-ignorable character",
        _ => "visible character",
    }
}

/// An emoji character (not the ASCII digits, `#` and `*`, which are emoji only as keycaps).
fn is_emoji(c: char) -> bool {
    !c.is_ascii()
        && (CodePointSetData::new::<Emoji>().contains(c)
            || CodePointSetData::new::<ExtendedPictographic>().contains(c))
}

fn is_letter_or_mark(c: char) -> bool {
    let gc = general_category(c);
    GeneralCategoryGroup::Letter.contains(gc) || GeneralCategoryGroup::Mark.contains(gc)
}

fn is_mark(c: char) -> bool {
    GeneralCategoryGroup::Mark.contains(general_category(c))
}

/// A letter of a script whose letters join (Arabic, Syriac, N'Ko, Mongolian, ...).
fn is_joining_letter(c: char) -> bool {
    matches!(
        CodePointMapData::<JoiningType>::new().get(c),
        JoiningType::DualJoining
            | JoiningType::LeftJoining
            | JoiningType::RightJoining
            | JoiningType::JoinCausing
    )
}

fn is_virama(c: char) -> bool {
    unicode_normalization::char::canonical_combining_class(c) == VIRAMA
}

/// A ZWJ or ZWNJ at `i` stands between two letters (or marks) of a script it can shape: a
/// virama on either side (Indic), or a joining letter on either side once marks are skipped.
fn joins_letters(chars: &[char], i: usize) -> bool {
    let (Some(&before), Some(&after)) = (i.checked_sub(1).map(|j| &chars[j]), chars.get(i + 1))
    else {
        return false;
    };
    if !is_letter_or_mark(before) || !is_letter_or_mark(after) {
        return false;
    }
    let base_before = chars[..i].iter().rev().find(|&&c| !is_mark(c));
    let base_after = chars[i + 1..].iter().find(|&&c| !is_mark(c));
    is_virama(before)
        || is_virama(after)
        || base_before.is_some_and(|&c| is_joining_letter(c))
        || base_after.is_some_and(|&c| is_joining_letter(c))
}

/// A ZWJ between two parts of an emoji ZWJ sequence: after an emoji (or its emoji-style
/// selector), before an emoji.
fn joins_emoji(before: Option<char>, after: Option<char>) -> bool {
    before.is_some_and(|c| is_emoji(c) || c == EMOJI_STYLE) && after.is_some_and(is_emoji)
}

/// A variation selector right after a character it can select a form of.
fn selects_a_form(vs: char, before: Option<char>) -> bool {
    let Some(base) = before else { return false };
    if base.is_whitespace() || is_invisible_char(base) {
        return false;
    }
    match vs {
        TEXT_STYLE | EMOJI_STYLE => CodePointSetData::new::<Emoji>().contains(base),
        '\u{E0100}'..='\u{E01EF}' => CodePointSetData::new::<Ideographic>().contains(base),
        _ => true,
    }
}

fn refusal(c: char, why: &str) -> InvalidQuery {
    InvalidQuery(format!(
        "query contains an invisible character (U+{:04X}, {}){why}",
        c as u32,
        invisible_kind(c)
    ))
}

/// An invisible character standing where no writing uses it: what a query refuses
/// ([`check_query_chars`]) and what a page marks in upstream text (`crate::shown_chars`), so
/// the two cannot disagree about a character.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Misplaced {
    /// Byte offset of the character in the text.
    pub at: usize,
    pub c: char,
    /// How the query check's message ends ("" for a control character, named on its own).
    pub why: &'static str,
}

impl Misplaced {
    fn refusal(&self) -> InvalidQuery {
        if self.c.is_control() {
            return InvalidQuery(format!(
                "query contains a control character (U+{:04X})",
                self.c as u32
            ));
        }
        refusal(self.c, self.why)
    }
}

/// Calls `each` with every invisible character of `text` that no context rule admits where it
/// stands, in order, until `each` breaks. In a malformed subdivision flag the tag the check
/// names comes first, then the flag's other tags (none of them spells a flag).
pub fn scan_misplaced(text: &str, mut each: impl FnMut(Misplaced) -> ControlFlow<()>) {
    // Most text holds no invisible character: no per-character table walk then.
    if !text.chars().any(is_invisible_char) {
        return;
    }
    let at: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let before = i.checked_sub(1).map(|j| chars[j]);
        let mut put = |j: usize, why: &'static str| {
            each(Misplaced {
                at: at[j],
                c: chars[j],
                why,
            })
        };
        if c == BLACK_FLAG && chars.get(i + 1).copied().is_some_and(is_tag) {
            // A subdivision flag: its tag letters, then CANCEL TAG.
            let end = (i + 1..chars.len())
                .find(|&j| !is_tag(chars[j]))
                .unwrap_or(chars.len());
            if let Some((named, why)) = malformed_flag(&chars[i + 1..end]) {
                let named = i + 1 + named;
                if put(named, why).is_break() {
                    return;
                }
                for j in (i + 1..end).filter(|&j| j != named) {
                    if put(j, " outside a subdivision flag").is_break() {
                        return;
                    }
                }
            }
            i = end;
            continue;
        }
        if !is_invisible_char(c) {
            i += 1;
            continue;
        }
        let after = chars.get(i + 1).copied();
        let placed = !c.is_control()
            && match c {
                ZWJ => joins_emoji(before, after) || joins_letters(&chars, i),
                ZWNJ => joins_letters(&chars, i),
                _ if is_variation_selector(c) => selects_a_form(c, before),
                _ => false,
            };
        if !placed {
            let why = match c {
                _ if c.is_control() => "",
                ZWJ => " where no emoji sequence or joining script uses it",
                ZWNJ => " outside the letters of a script it separates",
                _ if is_variation_selector(c) => " after no character it selects a form of",
                _ if is_tag(c) => " outside a subdivision flag",
                _ => ": characters that show nothing are refused",
            };
            if put(i, why).is_break() {
                return;
            }
        }
        i += 1;
    }
}

/// What is wrong with the tags `run` after U+1F3F4 (never empty), if anything: the index in
/// `run` of the tag to name and why.
fn malformed_flag(run: &[char]) -> Option<(usize, &'static str)> {
    let (&last, spec) = run.split_last()?;
    let bad = spec.iter().position(|&t| !is_flag_tag(t));
    let bad = bad.or((last != CANCEL_TAG).then_some(run.len() - 1));
    if let Some(j) = bad {
        return Some((
            j,
            ": tag characters only spell a subdivision flag (U+1F3F4, tag letters, U+E007F)",
        ));
    }
    if !FLAG_TAGS.contains(&spec.len()) {
        return Some((
            0,
            ": a subdivision flag names its region in 3 to 7 tag letters",
        ));
    }
    None
}

/// Checks the characters of a normalised query (whitespace already collapsed to spaces): no
/// control or invisible character, except the joiners, variation selectors and flag tags where
/// writing uses them ([`scan_misplaced`]). The error names the first offending code point.
pub fn check_query_chars(text: &str) -> Result<(), InvalidQuery> {
    let mut first = None;
    scan_misplaced(text, |m| {
        first = Some(m);
        ControlFlow::Break(())
    });
    first.map_or(Ok(()), |m| Err(m.refusal()))
}

/// Every code point refused wherever it stands, as sorted inclusive ranges (what the OpenAPI
/// `pattern` lists). Built from the same tables as [`is_refused_char`], by walking the ranges
/// of each table rather than all 1.1 million code points.
pub fn refused_ranges() -> Vec<(u32, u32)> {
    let gc = CodePointMapData::<GeneralCategory>::new();
    let mut candidates: Vec<(u32, u32)> = Vec::new();
    for r in gc.iter_ranges_for_value(GeneralCategory::Control) {
        candidates.push((*r.start(), *r.end()));
    }
    for r in gc.iter_ranges_for_value(GeneralCategory::Format) {
        candidates.push((*r.start(), *r.end()));
    }
    for r in CodePointSetData::new::<DefaultIgnorableCodePoint>().iter_ranges() {
        candidates.push((*r.start(), *r.end()));
    }
    for r in CodePointSetData::new::<BidiControl>().iter_ranges() {
        candidates.push((*r.start(), *r.end()));
    }
    // Keep the refused code points of each candidate range, merged into maximal runs.
    let refused = candidates
        .into_iter()
        .flat_map(|(a, b)| a..=b)
        .filter(|&u| char::from_u32(u).is_some_and(is_refused_char))
        .map(|u| (u, u))
        .collect();
    merged(refused)
}

/// One code point in an ECMA-262 pattern: `\uXXXX` in the BMP, `\u{XXXXX}` above it (the
/// form the `u` flag reads, which JSON Schema 2020-12 asks regexes to be built with).
fn pattern_escape(u: u32) -> String {
    if u <= 0xFFFF {
        format!("\\u{u:04X}")
    } else {
        format!("\\u{{{u:X}}}")
    }
}

/// The character rule as an ECMA-262 / JSON Schema `pattern` (with the `u` flag) for the raw
/// text a client sends: at least one character that is not whitespace, none refused wherever
/// it stands, and tag characters only inside a subdivision flag. Whitespace control characters
/// (tab, newlines, ...) are allowed: normalising turns them into spaces. Where ZWJ, ZWNJ and
/// variation selectors stand is a rule of their neighbours, which the server checks; the
/// pattern lets them through. (The 512-character limit is checked after normalising.)
///
/// Shape: `^[^\S\uFEFF]*(?:FLAG|[^C\s])(?:FLAG|[^C])*$`, where `C` is every refused code point
/// plus the flag's tags, and `FLAG` is U+1F3F4, 3 to 7 tag letters or digits, U+E007F. (ECMA's
/// `\s` counts U+FEFF as a space; the leading run must not let it in.)
pub fn query_pattern() -> String {
    let mut ranges = refused_ranges();
    ranges.extend([(0xE0030, 0xE0039), (0xE0061, 0xE007A), (0xE007F, 0xE007F)]);
    let mut class = String::new();
    for (a, b) in merged(ranges) {
        // Whitespace control characters become spaces, so the raw text may hold them.
        for (a, b) in split_out_whitespace(a, b) {
            class.push_str(&pattern_escape(a));
            if a != b {
                class.push('-');
                class.push_str(&pattern_escape(b));
            }
        }
    }
    let flag = format!(
        "{}[{}-{}{}-{}]{{{},{}}}{}",
        pattern_escape(BLACK_FLAG as u32),
        pattern_escape(0xE0030),
        pattern_escape(0xE0039),
        pattern_escape(0xE0061),
        pattern_escape(0xE007A),
        FLAG_TAGS.start(),
        FLAG_TAGS.end(),
        pattern_escape(CANCEL_TAG as u32),
    );
    format!("^[^\\S\\uFEFF]*(?:{flag}|[^{class}\\s])(?:{flag}|[^{class}])*$")
}

/// Sorted, overlapping or touching ranges joined.
fn merged(mut ranges: Vec<(u32, u32)>) -> Vec<(u32, u32)> {
    ranges.sort_unstable();
    let mut out: Vec<(u32, u32)> = Vec::new();
    for (a, b) in ranges {
        match out.last_mut() {
            Some((_, end)) if a <= *end + 1 => *end = (*end).max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// The parts of `a..=b` that are not whitespace.
fn split_out_whitespace(a: u32, b: u32) -> Vec<(u32, u32)> {
    let kept = (a..=b)
        .filter(|&u| !char::from_u32(u).is_some_and(char::is_whitespace))
        .map(|u| (u, u))
        .collect();
    merged(kept)
}

#[cfg(test)]
mod tests;
