//! Task identity: the same query is the same task, so ids are derived from the query text.

use crate::error::QueueError;
use sha2::{Digest, Sha256};

/// A task id: 32 lowercase hex chars, the first 16 bytes of sha256(normalised query).
pub type TaskId = String;

/// Longest accepted normalised query, in characters. Bounds memory per task and key sizes.
pub const MAX_QUERY_CHARS: usize = 512;

/// Trims, collapses inner whitespace runs to one space, and checks the result is 1..=512
/// chars without control characters. Normalising first means "a  b" and " a b" share a task.
pub fn normalise_query(q: &str) -> Result<String, QueueError> {
    let out = q.split_whitespace().collect::<Vec<_>>().join(" ");
    if out.is_empty() {
        return Err(QueueError::InvalidQuery("query is empty".into()));
    }
    let n = out.chars().count();
    if n > MAX_QUERY_CHARS {
        return Err(QueueError::InvalidQuery(format!(
            "query is {n} chars, at most {MAX_QUERY_CHARS} allowed"
        )));
    }
    if out.chars().any(char::is_control) {
        return Err(QueueError::InvalidQuery(
            "query contains control characters".into(),
        ));
    }
    Ok(out)
}

/// The task id of an already normalised query.
pub fn task_id(normalised: &str) -> TaskId {
    let digest = Sha256::digest(normalised.as_bytes());
    hex::encode(&digest[..16])
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
    fn id_is_32_hex() {
        let id = task_id("a b");
        assert_eq!(id.len(), 32);
        assert!(id.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(id, task_id("a b"));
        assert_ne!(id, task_id("a c"));
    }
}
