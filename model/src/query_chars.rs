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

use crate::id::InvalidQuery;

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

/// Checks the characters of a normalised query (whitespace already collapsed to spaces): no
/// control or invisible character, except the joiners, variation selectors and flag tags where
/// writing uses them. The error names the first offending code point.
pub fn check_query_chars(text: &str) -> Result<(), InvalidQuery> {
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let before = i.checked_sub(1).map(|j| chars[j]);
        if c == BLACK_FLAG && chars.get(i + 1).copied().is_some_and(is_tag) {
            // A subdivision flag: its tag letters, then CANCEL TAG.
            let end = (i + 1..chars.len())
                .find(|&j| !is_tag(chars[j]))
                .unwrap_or(chars.len());
            let run = &chars[i + 1..end];
            // Never empty: the character after the flag is a tag.
            let Some((&last, spec)) = run.split_last() else {
                return Err(refusal(BLACK_FLAG, ""));
            };
            let bad = spec.iter().copied().find(|&t| !is_flag_tag(t));
            if let Some(t) = bad.or((last != CANCEL_TAG).then_some(last)) {
                return Err(refusal(
                    t,
                    ": tag characters only spell a subdivision flag (U+1F3F4, tag letters, U+E007F)",
                ));
            }
            if !FLAG_TAGS.contains(&spec.len()) {
                return Err(refusal(
                    run[0],
                    ": a subdivision flag names its region in 3 to 7 tag letters",
                ));
            }
            i = end;
            continue;
        }
        if !is_invisible_char(c) {
            i += 1;
            continue;
        }
        if c.is_control() {
            return Err(InvalidQuery(format!(
                "query contains a control character (U+{:04X})",
                c as u32
            )));
        }
        let after = chars.get(i + 1).copied();
        let placed = match c {
            ZWJ => joins_emoji(before, after) || joins_letters(&chars, i),
            ZWNJ => joins_letters(&chars, i),
            _ if is_variation_selector(c) => selects_a_form(c, before),
            _ => false,
        };
        if !placed {
            let why = match c {
                ZWJ => " where no emoji sequence or joining script uses it",
                ZWNJ => " outside the letters of a script it separates",
                _ if is_variation_selector(c) => " after no character it selects a form of",
                _ if is_tag(c) => " outside a subdivision flag",
                _ => ": characters that show nothing are refused",
            };
            return Err(refusal(c, why));
        }
        i += 1;
    }
    Ok(())
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
mod tests {
    use super::*;
    use crate::id::normalise_query;

    fn refused(q: &str) -> String {
        match normalise_query(q) {
            Ok(n) => panic!("{q:?} accepted as {n:?}"),
            Err(e) => e.0,
        }
    }

    /// Issue 28 row 9: the format characters tried, each of their ranges whole, and the
    /// "report" that looked like "report" on every page.
    #[test]
    fn the_invisible_characters_of_the_report_are_refused() {
        let ranges = [
            (0xE0001, 0xE0001),
            (0xE0020, 0xE007F),
            (0x1D173, 0x1D17A),
            (0x1BCA0, 0x1BCA3),
            (0x13430, 0x13430),
            (0x110BD, 0x110BD),
            (0x0600, 0x0600),
            (0x06DD, 0x06DD),
            (0x070F, 0x070F),
            (0x08E2, 0x08E2),
        ];
        let mut tried = 0;
        for (a, b) in ranges {
            for u in a..=b {
                let c = char::from_u32(u).unwrap();
                for q in [
                    format!("report{c}"),
                    format!("re{c}port"),
                    format!("{c}report"),
                ] {
                    let e = refused(&q);
                    assert!(e.contains(&format!("U+{u:04X}")), "{q:?}: {e}");
                    assert!(e.contains("invisible"), "{q:?}: {e}");
                }
                tried += 1;
            }
        }
        assert_eq!(tried, 1 + 96 + 8 + 4 + 6);
        let e = refused("report\u{E0041}\u{E0042}");
        assert!(e.contains("U+E0041") && e.contains("tag character"), "{e}");
        // And the old hand list's characters stay refused.
        for q in [
            "a\u{200B}b",
            "x\u{202E}txt",
            "\u{FEFF}x",
            "soft\u{AD}",
            "a\u{2066}b",
        ] {
            refused(q);
        }
    }

    /// Emoji ZWJ sequences, emoji presentation, flags, and the joiners of Persian and Indic
    /// scripts: real text, accepted unchanged.
    #[test]
    fn real_text_with_joiners_and_selectors_is_accepted() {
        for q in [
            "👩\u{200D}👩\u{200D}👧",              // family
            "🏳\u{FE0F}\u{200D}🌈 parade",          // rainbow flag
            "🏳\u{FE0F}\u{200D}\u{26A7}\u{FE0F}",   // transgender flag
            "👨🏾\u{200D}\u{2695}\u{FE0F}",          // health worker, skin tone
            "\u{2764}\u{FE0F} report",             // red heart, emoji style
            "#\u{FE0F}\u{20E3} 1\u{FE0F}\u{20E3}", // keycaps
            "\u{1F3F4}\u{E0067}\u{E0062}\u{E0073}\u{E0063}\u{E0074}\u{E007F} weather", // Scotland
            "\u{1F3F4}\u{200D}\u{2620}\u{FE0F}",   // pirate flag
            "می\u{200C}خواهم",                     // Persian, ZWNJ
            "کتاب\u{200C}ها",                      // Persian plural
            "क्\u{200D}ष",                          // Hindi, ZWJ after virama
            "क्\u{200C}ष",                          // Hindi, ZWNJ after virama
            "ශ්\u{200D}රී ලංකා",                      // Sinhala, yansaya
            "র\u{200D}্য",                          // Bengali, ZWJ before virama
            "葛\u{E0100}城市",                     // ideographic variation sequence
            "\u{2229}\u{FE00}",                    // standardized variant
        ] {
            let n = normalise_query(q).unwrap_or_else(|e| panic!("{q:?} refused: {e}"));
            assert_eq!(n, q, "normalising keeps the text");
        }
    }

    /// A joiner or selector anywhere else is refused, naming the code point.
    #[test]
    fn joiners_and_selectors_out_of_place_are_refused() {
        for (q, cp) in [
            ("\u{200D}👩", "U+200D"),
            ("👩\u{200D}", "U+200D"),
            ("👩 \u{200D}👩", "U+200D"),
            ("👩\u{200D} 👩", "U+200D"),
            ("👩\u{200D}\u{200D}👩", "U+200D"),
            ("re\u{200D}port", "U+200D"),
            ("re\u{200C}port", "U+200C"),
            ("a.\u{200D}b", "U+200D"),
            ("می \u{200C}خواهم", "U+200C"),
            ("\u{200C}می", "U+200C"),
            ("\u{FE0F}x", "U+FE0F"),
            ("report\u{FE0F}", "U+FE0F"),
            ("\u{2764}\u{FE0F}\u{FE0F}", "U+FE0F"),
            ("a \u{FE0F}", "U+FE0F"),
            ("a\u{E0100}", "U+E0100"),
            ("a\u{200D}\u{FE00}", "U+200D"),
            // Flags: tags must be lowercase letters or digits, 3 to 7 of them, then CANCEL TAG.
            ("\u{1F3F4}\u{E0067}\u{E0062}\u{E0073}", "U+E0073"),
            ("\u{1F3F4}\u{E0047}\u{E0042}\u{E0053}\u{E007F}", "U+E0047"),
            ("\u{1F3F4}\u{E0067}\u{E007F}", "U+E0067"),
            ("\u{1F3F4}\u{E0061}\u{E0061}\u{E0061}\u{E0061}\u{E0061}\u{E0061}\u{E0061}\u{E0061}\u{E007F}", "U+E0061"),
            ("x\u{E0067}\u{E0062}\u{E0073}\u{E0063}\u{E0074}\u{E007F}", "U+E0067"),
            ("x\u{E007F}", "U+E007F"),
        ] {
            let e = refused(q);
            assert!(e.contains(cp), "{q:?}: {e}");
        }
    }

    #[test]
    fn invisible_characters_are_named_for_the_pages() {
        for c in [
            '\u{200D}',
            '\u{200C}',
            '\u{FE0F}',
            '\u{E0041}',
            '\u{034F}',
            '\u{202E}',
        ] {
            assert!(is_invisible_char(c), "{c:?}");
        }
        for c in ['a', 'ی', '👩', ' ', '\u{301}', '\u{94D}'] {
            assert!(!is_invisible_char(c), "{c:?}");
        }
        assert_eq!(invisible_kind('\u{200D}'), "zero width joiner");
        assert_eq!(invisible_kind('\u{E0041}'), "tag character");
        assert_eq!(invisible_kind('\u{FE0F}'), "variation selector");
        assert_eq!(invisible_kind('\u{202E}'), "bidirectional control");
        assert_eq!(invisible_kind('\u{0600}'), "format character");
        assert_eq!(invisible_kind('\u{3164}'), "default-ignorable character");
    }

    /// The ranges the pattern lists are exactly the code points refused wherever they stand:
    /// walking the tables' ranges misses none of the 1.1 million.
    #[test]
    fn the_refused_ranges_are_every_refused_code_point() {
        let mut scanned: Vec<(u32, u32)> = Vec::new();
        for u in 0..=0x10FFFFu32 {
            if char::from_u32(u).is_some_and(is_refused_char) {
                match scanned.last_mut() {
                    Some((_, end)) if *end + 1 == u => *end = u,
                    _ => scanned.push((u, u)),
                }
            }
        }
        assert_eq!(refused_ranges(), scanned);
        // Far more than the old hand list's 14 ranges, and the tag block is in.
        assert!(scanned.len() > 20, "{scanned:x?}");
        assert!(scanned.iter().any(|&(a, b)| a <= 0xE0041 && 0xE0041 <= b));
    }

    fn pattern() -> &'static regex::Regex {
        static PATTERN: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
            regex::Regex::new(&query_pattern()).expect("the pattern compiles")
        });
        &PATTERN
    }

    /// The pattern (read as ECMA-262 with the `u` flag reads it; the regex crate takes the same
    /// `\uXXXX` and `\u{...}` escapes) refuses each refused code point and lets the rest by.
    #[test]
    fn the_pattern_refuses_each_refused_range_at_its_ends() {
        let re = pattern();
        for (a, b) in refused_ranges() {
            for u in [a, b] {
                let c = char::from_u32(u).unwrap();
                if c.is_whitespace() {
                    assert!(re.is_match(&format!("a{c}b")), "U+{u:04X}");
                    continue;
                }
                assert!(
                    !re.is_match(&format!("a{c}b")),
                    "U+{u:04X} passes the pattern"
                );
            }
            for u in [a.wrapping_sub(1), b + 1] {
                match char::from_u32(u) {
                    Some(c) if !is_invisible_char(c) => {
                        assert!(
                            re.is_match(&format!("a{c}b")),
                            "U+{u:04X} refused by the pattern"
                        )
                    }
                    _ => {}
                }
            }
        }
        assert!(re.is_match("\u{1F3F4}\u{E0067}\u{E0062}\u{E0077}\u{E006C}\u{E0073}\u{E007F}"));
        assert!(!re.is_match("report\u{E0061}\u{E0062}"));
        assert!(!re.is_match("report\u{E007F}"));
        assert!(!re.is_match("   \t"));
        assert!(!re.is_match(""));
    }

    proptest::proptest! {
        /// Whatever the server accepts, the pattern accepts; and a text holding a character
        /// refused wherever it stands is refused by both.
        #[test]
        fn the_pattern_and_the_server_agree(parts in proptest::collection::vec(
            proptest::sample::select(vec![
                "a", "z", " ", "\t", ".", "#", "1", "ی", "م", "क", "्", "ष", "👩", "🌈", "🏳",
                "\u{2764}", "葛", "\u{301}", "\u{200D}", "\u{200C}", "\u{FE0F}", "\u{FE00}",
                "\u{E0100}", "\u{1F3F4}", "\u{E0067}", "\u{E0062}", "\u{E007F}", "\u{E0041}",
                "\u{200B}", "\u{202E}", "\u{0600}", "\u{1D173}", "\u{7}", "\u{AD}",
            ]),
            0..12,
        )) {
            let q: String = parts.concat();
            let re = pattern();
            if normalise_query(&q).is_ok() {
                proptest::prop_assert!(re.is_match(&q), "{:?} accepted but fails the pattern", q);
            }
            if q.chars().any(|c| is_refused_char(c) && !c.is_whitespace()) {
                proptest::prop_assert!(!re.is_match(&q), "{:?} passes the pattern", q);
                proptest::prop_assert!(normalise_query(&q).is_err());
            }
        }
    }
}
