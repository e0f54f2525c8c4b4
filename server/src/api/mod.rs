//! The public JSON API (`/api/v1/...`) and the per-query live stream.

use axum::Router;
use clap::Args;

use crate::web::WebState;

/// Settings of the public API.
#[derive(Debug, Clone, Args, Default)]
pub struct ApiArgs {}

/// State the API handlers need beyond [`WebState`]'s shared parts.
#[derive(Clone, Default)]
pub struct ApiState {}

impl ApiState {
    pub fn new(_args: &ApiArgs) -> Self {
        ApiState {}
    }
}

/// Routes of the public API.
pub fn router() -> Router<WebState> {
    Router::new()
}
