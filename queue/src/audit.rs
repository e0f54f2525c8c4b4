//! The audit log: every admin action (who, when, what, how many), newest first, in a capped
//! list next to the queue (`{name}:audit`).
//!
//! Kept apart from the queue's own event stream on purpose: that stream is capped by volume
//! of task events and would push an admin action out within seconds on a busy queue; this
//! list holds only admin actions, so the last [`AUDIT_CAP`] of them stay.

use crate::decode::{array, string};
use crate::error::Result;
use crate::model::AuditEntry;
use crate::queue::Queue;

/// Entries kept.
pub const AUDIT_CAP: usize = 1000;

impl Queue {
    /// Appends an entry stamped with Redis time and returns it. Push and trim go in one
    /// `MULTI`, so the list never holds more than the cap.
    pub async fn audit(
        &self,
        who: &str,
        action: &str,
        target: &str,
        count: u64,
    ) -> Result<AuditEntry> {
        let entry = AuditEntry {
            at_ms: self.now_ms().await?,
            who: who.into(),
            action: action.into(),
            target: target.into(),
            count,
        };
        let body = serde_json::to_string(&entry).unwrap_or_default();
        let key = &self.keys().audit;
        let mut c = self.conn.clone();
        redis::pipe()
            .atomic()
            .cmd("LPUSH")
            .arg(key)
            .arg(body)
            .ignore()
            .cmd("LTRIM")
            .arg(key)
            .arg(0)
            .arg(AUDIT_CAP - 1)
            .ignore()
            .query_async::<()>(&mut c)
            .await?;
        Ok(entry)
    }

    /// The newest `n` entries (at most [`AUDIT_CAP`]); entries that do not parse are skipped.
    pub async fn audit_log(&self, n: usize) -> Result<Vec<AuditEntry>> {
        let mut c = self.conn.clone();
        let v: redis::Value = redis::cmd("LRANGE")
            .arg(&self.keys().audit)
            .arg(0)
            .arg(n.clamp(1, AUDIT_CAP) - 1)
            .query_async(&mut c)
            .await?;
        Ok(array(v)?
            .iter()
            .filter_map(|r| string(r).ok())
            .filter_map(|r| serde_json::from_str(&r).ok())
            .collect())
    }
}
