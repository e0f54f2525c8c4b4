//! The query check's unit tests (their own file: query_chars.rs stays readable in one sitting).
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
