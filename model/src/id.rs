//! Task identity: the same query is the same task, so a task's id is derived from its
//! normalised text. [`TaskId`] can only hold a well-formed id: it is checked once where it
//! enters (a URL, a form, a JSON body, a Redis reply) and never again.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// A task id: 32 lowercase hex characters, the first 16 bytes of sha256(normalised query).
///
/// Anything else cannot name a task, so a malformed id is refused before any Redis key is
/// built from it (a 404 without asking Redis, and no way to reach another key by a crafted
/// id). Serialised as the plain string; deserialising validates.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TaskId(String);

/// The name of the upstream configured by the top-level settings (`REPOLL_UPSTREAM_*`).
pub const DEFAULT_UPSTREAM: &str = "default";

/// Whether `name` can name an upstream: 1 to 32 of `a-z 0-9 _ -`, starting with a letter or
/// digit. It becomes part of a queue name (a Redis hash tag) and of URLs, so it is kept plain.
pub fn is_valid_upstream_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && name.bytes().enumerate().all(|(i, b)| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || (i > 0 && (b == b'_' || b == b'-'))
        })
}

/// Longest tenant name, in bytes.
pub const MAX_TENANT_LEN: usize = 64;

/// A tenant name is 1..=64 bytes of letters, digits and `._:@-` (so it fits a key member, a
/// URL and a log line unescaped, and never holds the `|` the fair zset uses as a separator).
pub fn is_valid_tenant(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= MAX_TENANT_LEN
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'@' | b'-'))
}

/// The text given is not a task id.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("not a task id (32 lowercase hex characters)")]
pub struct InvalidTaskId;

impl TaskId {
    /// The id of an already normalised query ([`normalise_query`]).
    pub fn of_query(normalised: &str) -> TaskId {
        let digest = Sha256::digest(normalised.as_bytes());
        TaskId(hex::encode(&digest[..16]))
    }

    /// The id of a normalised query sent to the named upstream `upstream` (issue 13: the same
    /// text for two APIs is two tasks). The default upstream (`""` or `"default"`) keeps
    /// [`TaskId::of_query`], so ids from before named upstreams stay valid. The separator is a
    /// control character, which neither a normalised query nor an upstream name can hold.
    pub fn of_upstream_query(upstream: &str, normalised: &str) -> TaskId {
        if upstream.is_empty() || upstream == DEFAULT_UPSTREAM {
            return Self::of_query(normalised);
        }
        let mut h = Sha256::new();
        h.update(upstream.as_bytes());
        h.update([0x1f]);
        h.update(normalised.as_bytes());
        TaskId(hex::encode(&h.finalize()[..16]))
    }

    /// Checks the shape: 32 lowercase hex characters.
    pub fn parse(s: &str) -> Result<TaskId, InvalidTaskId> {
        if Self::is_valid(s) {
            Ok(TaskId(s.to_owned()))
        } else {
            Err(InvalidTaskId)
        }
    }

    /// Whether `s` has the shape of a task id.
    pub fn is_valid(s: &str) -> bool {
        s.len() == 32
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for TaskId {
    type Err = InvalidTaskId;
    fn from_str(s: &str) -> Result<TaskId, InvalidTaskId> {
        TaskId::parse(s)
    }
}

impl TryFrom<String> for TaskId {
    type Error = InvalidTaskId;
    fn try_from(s: String) -> Result<TaskId, InvalidTaskId> {
        if Self::is_valid(&s) {
            Ok(TaskId(s))
        } else {
            Err(InvalidTaskId)
        }
    }
}

impl From<TaskId> for String {
    fn from(id: TaskId) -> String {
        id.0
    }
}

impl std::ops::Deref for TaskId {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for TaskId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for TaskId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl PartialEq<str> for TaskId {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for TaskId {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for TaskId {
    fn eq(&self, other: &String) -> bool {
        &self.0 == other
    }
}

impl PartialEq<TaskId> for String {
    fn eq(&self, other: &TaskId) -> bool {
        *self == other.0
    }
}

impl PartialEq<TaskId> for &str {
    fn eq(&self, other: &TaskId) -> bool {
        *self == other.0
    }
}

/// In the OpenAPI document: a string of that shape.
#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for TaskId {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::schema::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .pattern(Some("^[0-9a-f]{32}$"))
            .description(Some(
                "Query id: 32 lowercase hex characters, derived from the normalised query.",
            ))
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for TaskId {}

/// Longest accepted normalised query, in characters. Bounds memory per task and key sizes.
pub const MAX_QUERY_CHARS: usize = 512;

// `InvalidQuery` lives with the character rules that raise it (query_chars is the lower
// layer: it cannot name this module back); re-exported so `id::InvalidQuery` still resolves.
pub use crate::query_chars::{
    check_query_chars, invisible_kind, is_invisible_char, is_refused_char, query_pattern,
    refused_ranges, InvalidQuery,
};

/// Unicode-normalises (NFC), trims, collapses inner whitespace runs to one space, and checks
/// the result is 1..=512 chars without control or invisible characters, save the joiners,
/// variation selectors and flag tags where writing uses them ([`check_query_chars`]).
/// Normalising first means "a  b" and " a b" share a task, and "café" typed with a precomposed
/// é and with e + combining accent is one query, not two.
///
/// A structured input's canonical JSON text ([`crate::input`]) is kept as it is: whitespace and
/// code points inside its strings are the caller's data, and it is already the one spelling of
/// its input.
pub fn normalise_query(q: &str) -> Result<String, InvalidQuery> {
    use unicode_normalization::UnicodeNormalization;
    if crate::input::parse_input(q).is_some() {
        return Ok(q.to_string());
    }
    if is_plain_ascii(q) {
        return Ok(q.to_string());
    }
    let nfc: String = q.nfc().collect();
    let out = nfc.split_whitespace().collect::<Vec<_>>().join(" ");
    if out.is_empty() {
        return Err(InvalidQuery("query is empty".into()));
    }
    let n = out.chars().count();
    if n > MAX_QUERY_CHARS {
        return Err(InvalidQuery(format!(
            "query is {n} chars, at most {MAX_QUERY_CHARS} allowed"
        )));
    }
    check_query_chars(&out)?;
    Ok(out)
}

/// Text every rule below leaves as it is: printable ASCII (NFC changes none of it, none of it
/// is a control or an invisible character), single spaces only between words, at most
/// [`MAX_QUERY_CHARS`]. Most queries are such text, and checking it is a byte scan instead of
/// the Unicode tables' lookups per character (4.7 % of a hit's CPU in the profile).
fn is_plain_ascii(q: &str) -> bool {
    let b = q.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_QUERY_CHARS
        && b[0] != b' '
        && b[b.len() - 1] != b' '
        && b.iter().all(|c| (b' '..=b'~').contains(c))
        && !b.windows(2).any(|w| w == b"  ")
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The plain-ASCII shortcut answers exactly what the full rules do, for any ASCII text
        /// (controls, runs of whitespace, leading and trailing spaces and lengths around the
        /// limit included).
        #[test]
        fn plain_ascii_is_what_the_rules_make_of_it(q in "[\\x00-\\x7f]{0,20}|[ a-z]{500,520}") {
            let slow = || -> Result<String, InvalidQuery> {
                use unicode_normalization::UnicodeNormalization;
                let nfc: String = q.nfc().collect();
                let out = nfc.split_whitespace().collect::<Vec<_>>().join(" ");
                if out.is_empty() || out.chars().count() > MAX_QUERY_CHARS {
                    return Err(InvalidQuery(String::new()));
                }
                check_query_chars(&out)?;
                Ok(out)
            };
            if is_plain_ascii(&q) {
                proptest::prop_assert_eq!(slow().ok(), Some(q.clone()));
            }
        }
    }

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
        assert!(p.starts_with("^[^\\S\\uFEFF]*(?:\\u{1F3F4}["), "{p}");
        assert!(p.contains("[^\\u0000-\\u0008\\u000E-\\u001F\\u007F-\\u0084\\u0086-\\u009F"));
        assert!(p.contains("\\u202A-\\u202E"));
        assert!(p.contains("\\uFEFF"));
        // Above the BMP in the `u` flag's escape: the whole tag block (the flag's tags come back
        // only through the flag group) and the other format controls.
        assert!(p.contains("\\u{E0000}-\\u{E00FF}"), "{p}");
        assert!(p.contains("\\u{1D173}-\\u{1D17A}"), "{p}");
        assert!(p.ends_with("])*$"));
    }

    #[test]
    fn id_is_32_hex() {
        assert_eq!(
            TaskId::of_upstream_query("default", "a b"),
            TaskId::of_query("a b")
        );
        assert_eq!(
            TaskId::of_upstream_query("", "a b"),
            TaskId::of_query("a b")
        );
        assert_ne!(
            TaskId::of_upstream_query("reports", "a b"),
            TaskId::of_query("a b")
        );
        assert_ne!(
            TaskId::of_upstream_query("reports", "a b"),
            TaskId::of_upstream_query("search", "a b")
        );
        assert!(is_valid_upstream_name("reports") && is_valid_upstream_name("v2-search_eu"));
        for bad in ["", "-x", "Reports", "a.b", "a{b}", &"x".repeat(33)] {
            assert!(!is_valid_upstream_name(bad), "{bad}");
        }
        let id = TaskId::of_query("a b");
        assert_eq!(id.len(), 32);
        assert!(id.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(id, TaskId::of_query("a b"));
        assert_ne!(id, TaskId::of_query("a c"));
    }

    #[test]
    fn only_well_formed_ids_parse() {
        assert!("0123456789abcdef0123456789abcdef".parse::<TaskId>().is_ok());
        for bad in [
            "0123456789ABCDEF0123456789abcdef",
            "0123456789abcdef",
            "../../../../../../../etc/passwd..",
            "0123456789abcdef0123456789abcdeg",
            "",
        ] {
            assert_eq!(bad.parse::<TaskId>(), Err(InvalidTaskId), "{bad:?}");
        }
    }

    #[test]
    fn json_carries_the_plain_string_and_checks_it() {
        let id = TaskId::of_query("x");
        let json = serde_json::to_string(&id).unwrap();
        assert_eq!(json, format!("\"{id}\""));
        assert_eq!(serde_json::from_str::<TaskId>(&json).unwrap(), id);
        assert!(serde_json::from_str::<TaskId>("\"nope\"").is_err());
    }
}
