//! The Pub/Sub notice: every state change publishes one on the queue's dashboard channel.
//!
//! A notice says *that* something changed, never the new state: whoever cares re-reads the
//! state from Redis, so a lost or reordered notice can delay a page but never show it a wrong
//! state. The Lua scripts build the JSON by hand (cheaper than cjson on the hot path;
//! `queue/lua/prelude/history.lua`, `wake_msg` and `notify_dash_batch`); this type is the one reader,
//! and `queue/tests` checks that what the scripts publish parses into it.

use serde::{Deserialize, Deserializer, Serialize};

use crate::id::TaskId;

/// `{"kind":"completed","id":"<task id>","at_ms":…}`, plus `"ids":[…]` for a batch (where
/// `id` is the first of them), or `"id":""` for a queue-wide change (pause, purge, …).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notice {
    /// What happened, e.g. "created", "claimed", "completed", "dead", "paused".
    pub kind: String,
    /// The task it concerns; None for a queue-wide change.
    #[serde(default, deserialize_with = "empty_is_none")]
    pub id: Option<TaskId>,
    /// Every task of a batch notice (empty for one task).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ids: Vec<TaskId>,
    /// Redis time of the change.
    #[serde(default)]
    pub at_ms: i64,
}

impl Notice {
    /// Decodes a published message; an error means the message cannot be trusted (the reader
    /// should re-read everything).
    pub fn parse(message: &str) -> Result<Notice, serde_json::Error> {
        serde_json::from_str(message)
    }

    /// Every task the notice concerns (none for a queue-wide change).
    pub fn task_ids(&self) -> impl Iterator<Item = &TaskId> {
        let single = if self.ids.is_empty() {
            self.id.as_ref()
        } else {
            None
        };
        self.ids.iter().chain(single)
    }
}

fn empty_is_none<'de, D: Deserializer<'de>>(d: D) -> Result<Option<TaskId>, D::Error> {
    let s = Option::<String>::deserialize(d)?;
    match s.as_deref() {
        None | Some("") => Ok(None),
        Some(id) => TaskId::parse(id)
            .map(Some)
            .map_err(serde::de::Error::custom),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "0123456789abcdef0123456789abcdef";
    const B: &str = "fedcba9876543210fedcba9876543210";

    #[test]
    fn one_task_a_batch_and_a_queue_wide_change() {
        let one =
            Notice::parse(&format!(r#"{{"kind":"completed","id":"{A}","at_ms":5}}"#)).unwrap();
        assert_eq!(one.kind, "completed");
        assert_eq!(one.task_ids().map(|i| i.as_str()).collect::<Vec<_>>(), [A]);
        assert_eq!(one.at_ms, 5);

        let batch = Notice::parse(&format!(
            r#"{{"kind":"claimed","id":"{A}","ids":["{A}","{B}"],"at_ms":7}}"#
        ))
        .unwrap();
        assert_eq!(
            batch.task_ids().map(|i| i.as_str()).collect::<Vec<_>>(),
            [A, B]
        );

        let queue = Notice::parse(r#"{"kind":"paused","id":"","at_ms":9}"#).unwrap();
        assert_eq!(queue.id, None);
        assert_eq!(queue.task_ids().count(), 0);
    }

    #[test]
    fn a_bad_id_or_bad_json_is_an_error() {
        assert!(Notice::parse(r#"{"kind":"completed","id":"../x","at_ms":1}"#).is_err());
        assert!(Notice::parse("not json").is_err());
    }
}
