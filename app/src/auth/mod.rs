//! Who may use the admin dashboard, and how a request proves it.
//!
//! The types here ([`Role`], [`Me`]) cross the server-function boundary, so they compile to
//! wasm too; everything that touches secrets, cookies or Redis is server-only:
//!
//! - `credentials`: the configured passwords (argon2 PHC hashes, or plain ones for
//!   development) and how a typed password is checked against them.
//! - `session`: random session ids in the `repoll_session` cookie, stored in Redis (only
//!   their sha256) with a time to live.
//!
//! The Redis side (session records, the sign-in attempt limit) belongs to the queue crate
//! (`queue::Sessions`, `Queue::sign_in_attempts`), which owns every key name.
//! - `guard`: what server functions call first — [`require`] refuses a request without a
//!   session (401) or with too weak a role (403), before anything is read or changed.

use serde::{Deserialize, Serialize};

/// What a signed-in user may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Sees every page; every action is refused.
    Viewer,
    /// Sees and acts.
    Admin,
}

impl Role {
    /// The name shown in the UI and written to the audit log.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Admin => "admin",
        }
    }
}

/// The signed-in user as the UI sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Me {
    pub user: String,
    pub role: Role,
}

#[cfg(feature = "ssr")]
mod credentials;
#[cfg(feature = "ssr")]
mod guard;
#[cfg(feature = "ssr")]
mod session;

#[cfg(feature = "ssr")]
pub use credentials::{
    hash_password, AuthConfig, AuthSettings, Credential, DEFAULT_PASSWORD_CHECKS,
    PASSWORD_CHECK_WAIT,
};
#[cfg(feature = "ssr")]
pub use guard::{current, refuse, request_is_https, require, unreachable, ADMIN_FN_PREFIX};
#[cfg(feature = "ssr")]
pub use session::{clear_cookie, cookie_id, cookie_value, set_cookie, Session, Sessions, COOKIE};
