//! The admin side: sign-in, sessions, cross-site protection and the dashboard's live stream.

use axum::Router;
use clap::Args;

use crate::web::WebState;

/// Settings of the admin dashboard.
#[derive(Debug, Clone, Args, Default)]
pub struct AdminArgs {}

/// State the admin handlers need beyond [`WebState`]'s shared parts.
#[derive(Clone, Default)]
pub struct AdminState {}

impl AdminState {
    pub fn new(_args: &AdminArgs) -> Self {
        AdminState {}
    }
}

/// Routes of the admin side.
pub fn router() -> Router<WebState> {
    Router::new()
}
