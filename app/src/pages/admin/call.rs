//! The start every admin server function shares, written once: the caller's session, refused
//! below the role the function needs (401 signed out, 403 a viewer where an admin is needed),
//! the app's context, and the queue of the upstream a request names (400 for a name that is
//! not configured). Server only.

use leptos::prelude::ServerFnError;

use crate::auth::{refuse, require, Role, Session};
use crate::context::AppContext;

/// Who calls, and the app they call.
pub(super) struct AdminCall {
    pub session: Session,
    pub ctx: AppContext,
}

/// The session of the request, at least of `role`, and the app's context.
pub(super) async fn admin_call(role: Role) -> Result<AdminCall, ServerFnError> {
    let session = require(role).await?;
    let ctx = crate::context::app_context()?;
    Ok(AdminCall { session, ctx })
}

/// The queue of the upstream `name` names (none or empty: the default one); a 400 naming the
/// configured upstreams when it names none of them.
pub(super) fn upstream_queue<'a>(
    ctx: &'a AppContext,
    name: Option<&str>,
) -> Result<&'a queue::Queue, ServerFnError> {
    ctx.upstream(name)
        .map(|(q, _)| q)
        .map_err(|e| refuse(http::StatusCode::BAD_REQUEST, &e.to_string()))
}
