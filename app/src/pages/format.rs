//! Words and numbers as people read them, shared by the query page and the dashboard: plurals
//! ("1 task", "2 tasks"), durations ("850 ms", "1.2 s", "3 min"), times relative to a clock
//! ("in 4 s", "3 min ago") with the exact UTC time for a `title`, history details with their
//! epoch milliseconds turned into those words, pretty JSON and the `progress` of partial data.
//!
//! Pure functions of their arguments (never the machine's clock), so the server render and
//! the hydrating browser produce the same text.

/// "1 task" / "2 tasks" / "0 tasks".
pub fn plural(n: u64, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

/// A duration: "under 1 ms", "850 ms", "1.2 s", "45 s", "3 min 5 s", "12 min", "2 h 3 min",
/// "3 d 4 h". Negative durations are shown by their size.
pub fn duration(ms: i64) -> String {
    let a = ms.unsigned_abs();
    const S: u64 = 1000;
    const M: u64 = 60 * S;
    const H: u64 = 60 * M;
    const D: u64 = 24 * H;
    if a == 0 {
        "under 1 ms".into()
    } else if a < S {
        format!("{a} ms")
    } else if a < 10 * S {
        // One decimal, without a trailing ".0" ("1 s", "1.2 s").
        let tenths = a / 100;
        if tenths.is_multiple_of(10) {
            format!("{} s", tenths / 10)
        } else {
            format!("{}.{} s", tenths / 10, tenths % 10)
        }
    } else if a < M {
        format!("{} s", a / S)
    } else if a < H {
        let (m, s) = (a / M, (a % M) / S);
        if m < 10 && s > 0 {
            format!("{m} min {s} s")
        } else {
            format!("{m} min")
        }
    } else if a < D {
        let (h, m) = (a / H, (a % H) / M);
        if m > 0 {
            format!("{h} h {m} min")
        } else {
            format!("{h} h")
        }
    } else {
        let (d, h) = (a / D, (a % D) / H);
        if h > 0 {
            format!("{d} d {h} h")
        } else {
            format!("{d} d")
        }
    }
}

/// A coarse duration for "ago" / "in": whole seconds, minutes, hours, days.
fn coarse(a: u64) -> String {
    const S: u64 = 1000;
    const M: u64 = 60 * S;
    const H: u64 = 60 * M;
    const D: u64 = 24 * H;
    if a < M {
        format!("{} s", a / S)
    } else if a < H {
        format!("{} min", a / M)
    } else if a < D {
        let (h, m) = (a / H, (a % H) / M);
        if m > 0 {
            format!("{h} h {m} min")
        } else {
            format!("{h} h")
        }
    } else {
        plural(a / D, "day", "days")
    }
}

/// `at` relative to `now`: "just now", "4 s ago", "in 3 min"; "—" for 0 (unset).
pub fn relative(now: i64, at: i64) -> String {
    if at == 0 {
        return "—".into();
    }
    let d = now.saturating_sub(at);
    if d.unsigned_abs() < 1000 {
        "just now".into()
    } else if d > 0 {
        format!("{} ago", coarse(d.unsigned_abs()))
    } else {
        format!("in {}", coarse(d.unsigned_abs()))
    }
}

/// `at` as a moment that has passed (or is passing) by `now`: "4 s ago", "just now" — never
/// "in …" for a small clock difference between two reads.
pub fn ago(now: i64, at: i64) -> String {
    if at == 0 {
        "—".into()
    } else {
        relative(now.max(at), at)
    }
}

/// (year, month, day) of a day count since 1970-01-01 (proleptic Gregorian).
fn civil(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

fn parts(ms: i64) -> (i64, i64, i64, i64, i64, i64, i64) {
    let (days, rest) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let (y, mo, d) = civil(days);
    (
        y,
        mo,
        d,
        rest / 3_600_000,
        rest / 60_000 % 60,
        rest / 1000 % 60,
        rest % 1000,
    )
}

/// The exact time for a `title`: "2026-12-01 06:41:07 UTC".
pub fn utc(ms: i64) -> String {
    let (y, mo, d, h, mi, s, _) = parts(ms);
    format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02} UTC")
}

/// The time of day to the second, for entries that follow each other within a minute (a
/// task's story): "06:41:07" (UTC, which the `title` says).
pub fn clock(ms: i64) -> String {
    let (_, _, _, h, mi, s, _) = parts(ms);
    format!("{h:02}:{mi:02}:{s:02}")
}

/// The machine-readable time for `<time datetime>`: "2026-12-01T06:41:07.215Z".
pub fn iso(ms: i64) -> String {
    let (y, mo, d, h, mi, s, milli) = parts(ms);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{milli:03}Z")
}

/// A piece of a history detail: text, or a time with its words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    Text(String),
    /// An epoch-ms time and how to say it.
    Time(i64, String),
}

/// Epoch milliseconds between 2001 and 2286: 13 digits.
fn is_epoch_ms(digits: &str) -> bool {
    digits.len() == 13 && !digits.starts_with('0')
}

/// A history detail as the queue wrote it, in words: "next poll at 1796135038958" becomes
/// "next poll in 250 ms" (relative to the entry's own time `at`), "(12 ms)" stays, "in 0 ms"
/// becomes "in under 1 ms", and the doubled "by admin admin" (the role and the user, who are
/// one) reads "by admin".
pub fn detail_pieces(detail: &str, at: i64) -> Vec<Piece> {
    let detail = detail.replace("by admin admin", "by admin");
    let mut out = Vec::new();
    let mut text = String::new();
    let mut rest = detail.as_str();
    while let Some(start) = rest.find(|c: char| c.is_ascii_digit()) {
        // A number glued to a word ("w1", "0x1f") is part of that word.
        let glued = rest[..start]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '-' || c == '.');
        let len = rest[start..]
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len() - start);
        let digits = &rest[start..start + len];
        let after = &rest[start + len..];
        text.push_str(&rest[..start]);
        if !glued && is_epoch_ms(digits) {
            let ts: i64 = digits.parse().unwrap_or(0);
            let words = if text.ends_with("at ") {
                text.truncate(text.len() - 3);
                if ts >= at {
                    format!("in {}", duration(ts - at))
                } else {
                    format!("{} earlier", duration(at - ts))
                }
            } else {
                utc(ts)
            };
            out.push(Piece::Text(std::mem::take(&mut text)));
            out.push(Piece::Time(ts, words));
            rest = after;
        } else if !glued && after.starts_with(" ms") && len <= 12 {
            let n: i64 = digits.parse().unwrap_or(0);
            text.push_str(&duration(n));
            rest = &after[3..];
        } else {
            text.push_str(digits);
            rest = after;
        }
    }
    text.push_str(rest);
    out.push(Piece::Text(text));
    out.retain(|p| !matches!(p, Piece::Text(t) if t.is_empty()));
    out
}

/// Upstream text as pretty JSON when it is JSON (strings as they are), otherwise as it came.
/// Always rendered as text, never as HTML.
pub fn pretty_json(text: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(v) => serde_json::to_string_pretty(&v).unwrap_or_else(|_| text.to_string()),
        Err(_) => text.to_string(),
    }
}

/// The percentage (0..=100) that partial data says in a numeric `progress` field: a
/// fraction 0..1, or a percentage 0..100 (a value above 1). None when absent or out of range.
pub fn progress_percent(value: &serde_json::Value) -> Option<f64> {
    let p = value.get("progress")?.as_f64()?;
    if !p.is_finite() || p < 0.0 {
        None
    } else if p <= 1.0 {
        Some(p * 100.0)
    } else if p <= 100.0 {
        Some(p)
    } else {
        None
    }
}

/// [`progress_percent`] of JSON text.
pub fn progress_of_text(text: &str) -> Option<f64> {
    serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .as_ref()
        .and_then(progress_percent)
}

/// Characters of a long text (a query, a last error) that one row of a dashboard list shows;
/// the task page, which the row links to, shows the whole text. 160 keeps a page of 50 rows
/// small however long the texts are (a query is at most 512 chars, an error 1,200 bytes).
pub const ROW_TEXT_CHARS: usize = 160;

/// `text` cut to `max` characters (never inside a character) with "…" after them, or as it is
/// when it is not longer. Cutting a cut text again gives the same text.
pub fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_string(),
    }
}

/// Whether `text` was cut (by [`cut`], or by whoever stored it): it ends with "…".
pub fn is_cut(text: &str) -> bool {
    text.ends_with('…')
}

/// Percent-encodes a URL query component (unreserved characters kept).
pub fn encode_component(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(char::from(b))
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plurals() {
        assert_eq!(plural(0, "task", "tasks"), "0 tasks");
        assert_eq!(plural(1, "task", "tasks"), "1 task");
        assert_eq!(plural(2, "task", "tasks"), "2 tasks");
        assert_eq!(plural(1, "dead task", "dead tasks"), "1 dead task");
    }

    #[test]
    fn durations() {
        assert_eq!(duration(0), "under 1 ms");
        assert_eq!(duration(850), "850 ms");
        assert_eq!(duration(1000), "1 s");
        assert_eq!(duration(1_234), "1.2 s");
        assert_eq!(duration(12_340), "12 s");
        assert_eq!(duration(180_000), "3 min");
        assert_eq!(duration(185_000), "3 min 5 s");
        assert_eq!(duration(725_000), "12 min");
        assert_eq!(duration(2 * 3_600_000 + 180_000), "2 h 3 min");
        assert_eq!(duration(3 * 86_400_000 + 4 * 3_600_000), "3 d 4 h");
        assert_eq!(duration(-1_500), "1.5 s");
    }

    #[test]
    fn relative_times() {
        assert_eq!(relative(10_000, 0), "—");
        assert_eq!(relative(10_000, 9_500), "just now");
        assert_eq!(relative(10_000, 6_000), "4 s ago");
        assert_eq!(relative(10_000, 14_900), "in 4 s");
        assert_eq!(relative(1_000_000, 1_000_000 + 54 * 60_000), "in 54 min");
        assert_eq!(relative(3 * 86_400_000, 1), "2 days ago");
        // A moment read a little after `now` is still a moment that passed.
        assert_eq!(ago(10_000, 12_000), "just now");
        assert_eq!(ago(10_000, 4_000), "6 s ago");
    }

    #[test]
    fn utc_times() {
        // 2026-12-01T06:41:07.215Z
        assert_eq!(utc(1_796_107_267_215), "2026-12-01 06:41:07 UTC");
        assert_eq!(iso(1_796_107_267_215), "2026-12-01T06:41:07.215Z");
        assert_eq!(iso(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00 UTC");
        assert_eq!(clock(1_796_107_267_215), "06:41:07");
    }

    #[test]
    fn history_details_in_words() {
        let at = 1_796_135_038_708;
        assert_eq!(
            detail_pieces(
                "still processing (poll 3, 12 ms), next poll at 1796135038958",
                at
            ),
            vec![
                Piece::Text("still processing (poll 3, 12 ms), next poll ".into()),
                Piece::Time(1_796_135_038_958, "in 250 ms".into()),
            ]
        );
        assert_eq!(
            detail_pieces("by w1 token 7 in 0 ms", at),
            vec![Piece::Text("by w1 token 7 in under 1 ms".into())]
        );
        assert_eq!(
            detail_pieces("by admin admin (was due at 1796135030708)", at),
            vec![
                Piece::Text("by admin (was due ".into()),
                Piece::Time(1_796_135_030_708, "8 s earlier".into()),
                Piece::Text(")".into()),
            ]
        );
        assert_eq!(
            detail_pieces("boom -> retry at 1796135040208 (attempt 2)", at),
            vec![
                Piece::Text("boom -> retry ".into()),
                Piece::Time(1_796_135_040_208, "in 1.5 s".into()),
                Piece::Text(" (attempt 2)".into()),
            ]
        );
        assert_eq!(
            detail_pieces("stamp 1796107267215", at),
            vec![
                Piece::Text("stamp ".into()),
                Piece::Time(1_796_107_267_215, "2026-12-01 06:41:07 UTC".into()),
            ]
        );
        assert_eq!(detail_pieces("", at), vec![]);
    }

    #[test]
    fn json_and_progress() {
        assert_eq!(pretty_json(r#"{"a":1}"#), "{\n  \"a\": 1\n}");
        assert_eq!(pretty_json("<b>not json</b>"), "<b>not json</b>");
        assert_eq!(pretty_json(r#""text""#), "text");
        assert_eq!(progress_of_text(r#"{"progress":0.42}"#), Some(42.0));
        assert_eq!(progress_of_text(r#"{"progress":42}"#), Some(42.0));
        assert_eq!(progress_of_text(r#"{"progress":1}"#), Some(100.0));
        assert_eq!(progress_of_text(r#"{"progress":420}"#), None);
        assert_eq!(progress_of_text(r#"{"progress":"half"}"#), None);
        assert_eq!(progress_of_text("[1,2]"), None);
    }

    #[test]
    fn long_texts_are_cut_on_a_character_boundary() {
        assert_eq!(cut("short", 160), "short");
        assert_eq!(cut("", 3), "");
        assert_eq!(cut("abcd", 4), "abcd");
        assert_eq!(cut("abcde", 4), "abcd…");
        // Multi-byte characters are kept whole: 4 characters of 4 bytes each.
        let long = "𝕏".repeat(200);
        let shown = cut(&long, 160);
        assert_eq!(shown.chars().count(), 161);
        assert!(shown.starts_with(&"𝕏".repeat(160)) && is_cut(&shown));
        assert_eq!(cut(&shown, 160), shown, "a cut text cut again is the same");
        assert!(!is_cut("HTTP 500"));
    }

    #[test]
    fn url_components() {
        assert_eq!(encode_component("a b&c=d/é"), "a%20b%26c%3Dd%2F%C3%A9");
    }
}
