//! The trace context a task record keeps while its processes trace (issue 27): the
//! `traceparent` of the span that made it and of those who joined it. Empty when tracing is
//! off. Shown on the dashboard's task page as trace ids.

use serde::{Deserialize, Serialize};

/// The context a task record holds: the creator's and the joiners' `traceparent`s.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskTrace {
    /// The `create` span that made the task (record field `tc`).
    pub created: Option<String>,
    /// The joiners' contexts (record field `tl`), at most `queue::trace_context::MAX_LINKS`.
    pub joined: Vec<String>,
}

impl TaskTrace {
    /// From the record's `tc` and `tl` fields (absent: empty).
    pub fn from_fields(tc: Option<&str>, tl: Option<&str>) -> TaskTrace {
        TaskTrace {
            created: tc.filter(|s| !s.is_empty()).map(str::to_string),
            joined: tl
                .unwrap_or_default()
                .split(' ')
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect(),
        }
    }

    /// No context at all (tracing was off when the task was made).
    pub fn is_empty(&self) -> bool {
        self.created.is_none() && self.joined.is_empty()
    }

    /// Every context, the creator's first.
    pub fn all(&self) -> impl Iterator<Item = &str> {
        self.created
            .iter()
            .chain(self.joined.iter())
            .map(String::as_str)
    }

    /// The trace ids of [`TaskTrace::all`] (the second field of each `traceparent`), without
    /// repeats, in order.
    pub fn trace_ids(&self) -> Vec<&str> {
        let mut ids: Vec<&str> = Vec::new();
        for id in self.all().filter_map(|tp| tp.split('-').nth(1)) {
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        ids
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_fields() {
        let t = TaskTrace::from_fields(Some("a"), Some("b c"));
        assert_eq!(t.all().collect::<Vec<_>>(), ["a", "b", "c"]);
        assert!(TaskTrace::from_fields(None, None).is_empty());
        assert!(TaskTrace::from_fields(Some(""), Some("")).is_empty());
    }

    #[test]
    fn trace_ids_once_each() {
        let a = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let b = "00-4bf92f3577b34da6a3ce929d0e0e4736-11f067aa0ba902b7-01";
        let c = "00-0000000000000000000000000000abcd-11f067aa0ba902b7-01";
        let t = TaskTrace::from_fields(Some(a), Some(&format!("{b} {c}")));
        assert_eq!(
            t.trace_ids(),
            [
                "4bf92f3577b34da6a3ce929d0e0e4736",
                "0000000000000000000000000000abcd"
            ]
        );
    }
}
