//! The bulk page's form, as the queue understands it: the filter's text checked and turned
//! into a [`queue::BulkFilter`] (a 400 with the reason for a bad value), the upstream it names,
//! and a run's progress as the page shows it. Server only.

use super::bulk_data::FilterForm;
use crate::auth::refuse;
use http::StatusCode;
use leptos::prelude::ServerFnError;

/// The queue's filter from the form's text; a 400 with the reason for a bad value.
pub fn filter(f: &FilterForm) -> Result<queue::BulkFilter, ServerFnError> {
    let bad = |m: &str| refuse(StatusCode::BAD_REQUEST, m);
    let state = match f.state.trim() {
        "" => queue::BulkState::Dead,
        s => queue::BulkState::parse(s).ok_or_else(|| bad("unknown state"))?,
    };
    let text = |s: &str, what: &str| -> Result<Option<String>, ServerFnError> {
        let s = s.trim();
        if s.chars().count() > 512 {
            return Err(bad(&format!("{what} text is longer than 512 characters")));
        }
        Ok((!s.is_empty()).then(|| s.to_string()))
    };
    let within_ms = match f.hours.trim() {
        "" => None,
        h => {
            let hours: f64 = h
                .parse()
                .map_err(|_| bad("the time window is not a number of hours"))?;
            if !(hours > 0.0 && hours <= 24.0 * 366.0) {
                return Err(bad("the time window must be between 0 and 8784 hours"));
            }
            Some((hours * 3_600_000.0).round() as u64)
        }
    };
    let time_field = match f.field.trim() {
        "" | "updated" => queue::TimeField::Updated,
        "created" => queue::TimeField::Created,
        _ => return Err(bad("unknown time field")),
    };
    let tenant = match f.tenant.trim() {
        "" => None,
        "none" => Some(String::new()),
        t if queue::is_valid_tenant(t) => Some(t.to_string()),
        _ => {
            return Err(bad(
                "the tenant is not a tenant name (letters, digits and ._:@-) or none",
            ))
        }
    };
    Ok(queue::BulkFilter {
        state,
        error: text(&f.error, "error")?,
        query: text(&f.query, "query")?,
        within_ms,
        time_field,
        tenant,
        class: match f.class.trim() {
            "" => None,
            c => Some(
                model::error_class::ErrorClass::parse(c)
                    .ok_or_else(|| bad("unknown error class"))?
                    .slug(),
            ),
        },
        group: match f.group.trim() {
            "" => None,
            g if model::error_class::is_group_key(g) => Some(g.to_string()),
            _ => return Err(bad("the error group is not a group key")),
        },
        ..queue::BulkFilter::default()
    })
}

/// The queue of the form's upstream; a 400 naming the known ones for an unknown name.
pub fn queue_of<'a>(
    ctx: &'a crate::context::AppContext,
    f: &FilterForm,
) -> Result<&'a queue::Queue, ServerFnError> {
    super::call::upstream_queue(ctx, Some(f.upstream.as_str()))
}
