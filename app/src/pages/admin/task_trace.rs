//! A task's trace ids on its page (issue 27): the creator's trace and each joiner's, linked
//! into the operator's trace viewer through `REPOLL_TRACE_URL` (e.g.
//! `http://jaeger:16686/trace/{trace_id}`) when it is set, as text when it is not; nothing
//! when the task keeps no context (tracing was off when it was made).

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

/// One trace a task belongs to, as its page shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceRef {
    pub trace_id: String,
    /// The trace of the request that made the task (else a joiner's).
    pub creator: bool,
    /// Into the trace viewer, when `REPOLL_TRACE_URL` is set.
    pub link: Option<String>,
}

/// The traces of `trace` (each once, the creator's first), linked through `template`.
#[cfg(feature = "ssr")]
pub fn trace_refs(trace: &model::TaskTrace, template: Option<&str>) -> Vec<TraceRef> {
    let creator = trace.created.as_deref().and_then(|tp| tp.split('-').nth(1));
    trace
        .trace_ids()
        .into_iter()
        .map(|id| TraceRef {
            trace_id: id.to_string(),
            creator: Some(id) == creator,
            // Encoded although the record keeps only lower-case hex (enqueue.lua checks):
            // the page never builds a URL from stored text as it is.
            link: template.map(|t| t.replace("{trace_id}", &urlencoding::encode(id))),
        })
        .collect()
}

/// The `trace` field's value: "creator: <id>, joined: <id>, …", each id a link when it has one.
pub fn trace_view(refs: Vec<TraceRef>) -> AnyView {
    refs.into_iter()
        .enumerate()
        .map(|(i, r)| {
            let role = if r.creator { "made by " } else { "joined by " };
            let id = match r.link {
                Some(href) => view! {
                    <a href=href target="_blank" rel="noopener noreferrer" data-testid="task-trace-link">
                        <code>{r.trace_id}</code>
                    </a>
                }
                .into_any(),
                None => view! { <code data-testid="task-trace-id">{r.trace_id}</code> }.into_any(),
            };
            view! { {(i > 0).then_some(", ")} {role} {id} }
        })
        .collect_view()
        .into_any()
}

#[cfg(all(test, feature = "ssr"))]
mod tests {
    use super::*;

    #[test]
    fn creator_first_joiners_after_each_once_linked_when_a_template_is_set() {
        let a = "00-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-00f067aa0ba902b7-01";
        let b = "00-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb-00f067aa0ba902b7-01";
        let a2 = "00-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-1111111111111111-01";
        let t = model::TaskTrace::from_fields(Some(a), Some(&format!("{b} {a2}")));
        let refs = trace_refs(&t, Some("https://tempo.example/t/{trace_id}?x=1"));
        assert_eq!(refs.len(), 2);
        assert!(refs[0].creator && !refs[1].creator);
        assert_eq!(
            refs[1].link.as_deref(),
            Some("https://tempo.example/t/bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb?x=1")
        );
        assert!(trace_refs(&t, None).iter().all(|r| r.link.is_none()));
        assert!(trace_refs(&model::TaskTrace::default(), Some("http://x/{trace_id}")).is_empty());
    }
}
