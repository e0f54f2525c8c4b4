//! Task identity: the same query is the same task, so ids are derived from the query text.
//! The rules live in the shared `model` crate (the browser checks ids with the same code);
//! this module is where the queue takes them from.

pub use model::id::{
    invisible_kind, is_invisible_char, is_refused_char, is_valid_tenant, is_valid_upstream_name,
    normalise_query, query_pattern, InvalidQuery, InvalidTaskId, TaskId, DEFAULT_UPSTREAM,
    MAX_QUERY_CHARS, MAX_TENANT_LEN,
};
