//! Task identity: the same query is the same task, so ids are derived from the query text.

use crate::error::QueueError;
use sha2::{Digest, Sha256};

/// A task id: 32 lowercase hex chars, the first 16 bytes of sha256(normalised query).
pub type TaskId = String;

/// Longest accepted normalised query, in characters. Bounds memory per task and key sizes.
pub const MAX_QUERY_CHARS: usize = 512;

/// Characters a query may not contain besides the control characters (`char::is_control`):
/// the invisible ones (zero-width spaces and joiners, word joiner, soft hyphen, BOM, invisible
/// operators, Hangul fillers, Mongolian vowel separator) and the bidirectional controls
/// (embeddings, overrides, isolates, marks). They make two queries that look identical differ,
/// or make one read as another on the admin pages (a right-to-left override turns
/// "report-exe.txt" around). Variation selectors stay allowed: emoji need them.
///
/// Inclusive ranges; the OpenAPI document builds its `pattern` from this same list.
pub const FORBIDDEN_INVISIBLE: &[(char, char)] = &[
    ('\u{00AD}', '\u{00AD}'),
    ('\u{034F}', '\u{034F}'),
    ('\u{061C}', '\u{061C}'),
    ('\u{115F}', '\u{1160}'),
    ('\u{17B4}', '\u{17B5}'),
    ('\u{180E}', '\u{180E}'),
    ('\u{200B}', '\u{200F}'),
    ('\u{202A}', '\u{202E}'),
    ('\u{2060}', '\u{2064}'),
    ('\u{2066}', '\u{206F}'),
    ('\u{3164}', '\u{3164}'),
    ('\u{FEFF}', '\u{FEFF}'),
    ('\u{FFA0}', '\u{FFA0}'),
    ('\u{FFF9}', '\u{FFFB}'),
];

/// Whether `c` is refused in a query (a control character or one of [`FORBIDDEN_INVISIBLE`]).
pub fn is_forbidden_char(c: char) -> bool {
    c.is_control()
        || FORBIDDEN_INVISIBLE
            .iter()
            .any(|&(a, b)| (a..=b).contains(&c))
}

/// The rule of [`normalise_query`] as an ECMA-262 / JSON Schema `pattern` for the raw text a
/// client sends: at least one character that is not whitespace, and no refused character.
/// Whitespace control characters (tab, newlines, ...) are allowed there: normalising turns
/// them into spaces. (The 512-character limit is checked after normalising.)
pub fn query_pattern() -> String {
    let mut class = String::from("\\u0000-\\u0008\\u000E-\\u001F\\u007F-\\u0084\\u0086-\\u009F");
    for &(a, b) in FORBIDDEN_INVISIBLE {
        class.push_str(&format!("\\u{:04X}", a as u32));
        if a != b {
            class.push_str(&format!("-\\u{:04X}", b as u32));
        }
    }
    format!("^[^{class}]*[^{class}\\s][^{class}]*$")
}

/// Unicode-normalises (NFC), trims, collapses inner whitespace runs to one space, and checks
/// the result is 1..=512 chars without control, invisible or bidirectional-control
/// characters. Normalising first means "a  b" and " a b" share a task, and "café" typed with
/// a precomposed é and with e + combining accent is one query, not two.
pub fn normalise_query(q: &str) -> Result<String, QueueError> {
    use unicode_normalization::UnicodeNormalization;
    let nfc: String = q.nfc().collect();
    let out = nfc.split_whitespace().collect::<Vec<_>>().join(" ");
    if out.is_empty() {
        return Err(QueueError::InvalidQuery("query is empty".into()));
    }
    let n = out.chars().count();
    if n > MAX_QUERY_CHARS {
        return Err(QueueError::InvalidQuery(format!(
            "query is {n} chars, at most {MAX_QUERY_CHARS} allowed"
        )));
    }
    if let Some(c) = out.chars().find(|&c| is_forbidden_char(c)) {
        return Err(QueueError::InvalidQuery(format!(
            "query contains a control or invisible character (U+{:04X})",
            c as u32
        )));
    }
    Ok(out)
}

/// The task id of an already normalised query.
pub fn task_id(normalised: &str) -> TaskId {
    let digest = Sha256::digest(normalised.as_bytes());
    hex::encode(&digest[..16])
}

/// Whether `id` has the shape of a task id (32 lowercase hex chars).
pub fn is_task_id(id: &str) -> bool {
    id.len() == 32
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_whitespace() {
        assert_eq!(normalise_query("  a \t b\n c ").unwrap(), "a b c");
        assert!(normalise_query("   ").is_err());
        assert!(normalise_query(&"x".repeat(513)).is_err());
        assert!(normalise_query(&"x".repeat(512)).is_ok());
        assert!(normalise_query("a\u{7}b").is_err());
    }

    #[test]
    fn one_spelling_per_text_and_no_invisible_characters() {
        // Precomposed and decomposed "café" are one query.
        assert_eq!(
            normalise_query("cafe\u{301}").unwrap(),
            normalise_query("caf\u{e9}").unwrap()
        );
        for bad in [
            "a\u{200B}b",
            "x\u{202E}txt.exe",
            "\u{FEFF}bom",
            "a\u{2066}b",
            "soft\u{AD}",
        ] {
            let e = normalise_query(bad).unwrap_err().to_string();
            assert!(e.contains("invisible"), "{bad:?}: {e}");
        }
        // Emoji with a variation selector stay allowed.
        assert!(normalise_query("\u{2764}\u{FE0F} report").is_ok());
    }

    #[test]
    fn the_pattern_names_every_range() {
        let p = query_pattern();
        assert!(p.starts_with("^[^\\u0000-\\u0008\\u000E-\\u001F"));
        assert!(p.contains("\\u202A-\\u202E"));
        assert!(p.contains("\\uFEFF"));
        assert!(p.ends_with("]*$"));
    }

    #[test]
    fn id_is_32_hex() {
        let id = task_id("a b");
        assert_eq!(id.len(), 32);
        assert!(id.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(id, task_id("a b"));
        assert_ne!(id, task_id("a c"));
    }
}
