//! The configured passwords and the check of a typed one.
//!
//! Production configures an argon2 PHC hash (`repoll admin hash-password` prints one), so the
//! password itself is never in the environment; a plain password is accepted for development
//! and compared in constant time (over sha256 digests, so lengths do not leak either).

use std::sync::Arc;

use argon2::{
    password_hash::{rand_core::OsRng, PasswordHash, PasswordHasher, PasswordVerifier, SaltString},
    Argon2,
};
use sha2::{Digest, Sha256};

use super::Role;

/// One configured password.
pub enum Credential {
    /// An argon2 PHC string (`$argon2id$v=19$...`), checked by argon2 itself.
    Phc(String),
    /// sha256 of a plain development password.
    Plain([u8; 32]),
}

impl Credential {
    /// The secret described by a hash setting (preferred) or a plain setting; `Ok(None)` when
    /// both are empty. A hash that is not a PHC string is a configuration error, reported at
    /// start rather than as "wrong password" forever.
    pub fn from_settings(
        hash: Option<&str>,
        plain: Option<&str>,
    ) -> Result<Option<Credential>, String> {
        if let Some(h) = hash.map(str::trim).filter(|h| !h.is_empty()) {
            PasswordHash::new(h).map_err(|_| {
                "the password hash is not an argon2 PHC string (make one with `repoll admin hash-password`)"
                    .to_string()
            })?;
            return Ok(Some(Credential::Phc(h.to_string())));
        }
        Ok(plain
            .filter(|p| !p.is_empty())
            .map(|p| Credential::Plain(digest(p))))
    }

    /// Whether `given` is this password. CPU-heavy for argon2: call it off the async threads.
    pub fn verify(&self, given: &str) -> bool {
        match self {
            Credential::Phc(h) => PasswordHash::new(h)
                .map(|ph| {
                    Argon2::default()
                        .verify_password(given.as_bytes(), &ph)
                        .is_ok()
                })
                .unwrap_or(false),
            Credential::Plain(d) => constant_time_eq(&digest(given), d),
        }
    }
}

impl Credential {
    /// What a session made with this credential for `role` keeps, to tell later whether the
    /// credential is still the one configured: HMAC-SHA256 keyed by the credential's secret
    /// (the PHC string, or the plain password's sha256) over a label naming the role, in hex.
    /// Never the password or its hash: Redis (a backup, a replica) must not hold something to
    /// check guesses against cheaply — for a PHC string the key is its random salt and hash,
    /// which no guess reproduces. A plain (development) password is only as safe as itself:
    /// whoever reads Redis can test guesses against the fingerprint as fast as sha256 goes.
    pub fn fingerprint(&self, role: Role) -> String {
        use hmac::{Hmac, Mac};
        let key: &[u8] = match self {
            Credential::Phc(h) => h.as_bytes(),
            Credential::Plain(d) => d,
        };
        let mut mac =
            <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes a key of any length");
        mac.update(b"repoll session credential v1: ");
        mac.update(role.as_str().as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }
}

fn digest(s: &str) -> [u8; 32] {
    Sha256::digest(s.as_bytes()).into()
}

/// Compares without an early exit, so timing does not tell how much of a guess was right.
fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// An argon2id PHC string for `password`, with a random salt.
pub fn hash_password(password: &str) -> Result<String, String> {
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| e.to_string())
}

/// Password checks that may run at once by default: argon2 as configured takes ~19 MiB and
/// most of a core for tens of milliseconds, so a burst of sign-ins must not run all of them
/// together (100 parallel checks grew the process by half a gigabyte).
pub const DEFAULT_PASSWORD_CHECKS: usize = 2;

/// How long a sign-in waits for a free check slot before it is told to come back (503).
pub const PASSWORD_CHECK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Everything the admin side is configured with.
pub struct AuthSettings {
    pub admin: Option<Credential>,
    pub viewer: Option<Credential>,
    /// Lifetime of a session in Redis and of its cookie.
    pub session_ttl_s: u64,
    /// Failed sign-ins per client address per minute before further tries are refused.
    pub max_failures: u32,
    /// Always mark the cookie `Secure` (behind a TLS-terminating proxy).
    pub cookie_secure: bool,
    /// Believe `X-Forwarded-Proto` / `X-Forwarded-For` (only behind a proxy that sets them).
    pub trust_forwarded: bool,
    /// A worker whose last heartbeat is older than this is shown as gone.
    pub gone_after_ms: i64,
    /// The attention strip names an oldest ready task that has waited longer than this.
    pub attention_ready_age_ms: i64,
    /// Password checks allowed to run at once (at least 1).
    pub max_password_checks: usize,
    /// Tasks one bulk action by filter may touch (`/admin/bulk`); above it the action is
    /// refused with the count and the limit.
    pub bulk_limit: u64,
}

impl Default for AuthSettings {
    /// No passwords: nobody can sign in (what tests get unless they configure one).
    fn default() -> Self {
        AuthSettings {
            admin: None,
            viewer: None,
            session_ttl_s: 12 * 3600,
            max_failures: 5,
            cookie_secure: false,
            trust_forwarded: false,
            gone_after_ms: 10_000,
            attention_ready_age_ms: model::attention::DEFAULT_READY_AGE_MS,
            max_password_checks: DEFAULT_PASSWORD_CHECKS,
            bulk_limit: queue::DEFAULT_BULK_LIMIT,
        }
    }
}

/// Shared, cheap-to-clone handle to the [`AuthSettings`] and the password-check slots.
#[derive(Clone)]
pub struct AuthConfig(Arc<AuthSettings>, Arc<tokio::sync::Semaphore>);

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig::new(AuthSettings::default())
    }
}

impl AuthConfig {
    pub fn new(settings: AuthSettings) -> Self {
        let slots = tokio::sync::Semaphore::new(settings.max_password_checks.max(1));
        AuthConfig(Arc::new(settings), Arc::new(slots))
    }

    pub fn settings(&self) -> &AuthSettings {
        &self.0
    }

    /// Slots of the password check: hold one while [`AuthConfig::check`] runs.
    pub fn check_slots(&self) -> Arc<tokio::sync::Semaphore> {
        self.1.clone()
    }

    /// The fingerprint of the credential `role` signs in with now ([`Credential::fingerprint`]);
    /// None when the role has no password configured (nobody can be that role).
    pub fn fingerprint(&self, role: Role) -> Option<String> {
        let s = &self.0;
        match role {
            Role::Admin => s.admin.as_ref(),
            Role::Viewer => s.viewer.as_ref(),
        }
        .map(|c| c.fingerprint(role))
    }

    /// The role `password` signs in as, if any. The admin password wins if both match.
    pub fn check(&self, password: &str) -> Option<Role> {
        let s = &self.0;
        if s.admin.as_ref().is_some_and(|a| a.verify(password)) {
            Some(Role::Admin)
        } else if s.viewer.as_ref().is_some_and(|v| v.verify(password)) {
            Some(Role::Viewer)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_hashed_passwords() {
        let plain = Credential::from_settings(None, Some("s3cret"))
            .unwrap()
            .unwrap();
        assert!(plain.verify("s3cret"));
        assert!(!plain.verify("s3cre"));
        let phc = hash_password("pw").unwrap();
        let hashed = Credential::from_settings(Some(&phc), Some("ignored"))
            .unwrap()
            .unwrap();
        assert!(hashed.verify("pw"));
        assert!(!hashed.verify("ignored"));
        assert!(Credential::from_settings(Some("not-a-hash"), None).is_err());
        assert!(Credential::from_settings(Some(" "), Some(""))
            .unwrap()
            .is_none());
    }

    /// A session's fingerprint changes with the password and with the role, and holds neither
    /// the password nor the stored hash.
    #[test]
    fn the_fingerprint_follows_the_credential_and_the_role() {
        let plain = |p: &str| Credential::from_settings(None, Some(p)).unwrap().unwrap();
        let a = plain("password A").fingerprint(Role::Admin);
        assert_eq!(a, plain("password A").fingerprint(Role::Admin));
        assert_ne!(a, plain("password B").fingerprint(Role::Admin));
        assert_ne!(a, plain("password A").fingerprint(Role::Viewer));
        assert_eq!(a.len(), 64);
        assert!(!a.contains(&hex::encode(digest("password A"))));
        let phc = hash_password("pw").unwrap();
        let hashed = Credential::from_settings(Some(&phc), None)
            .unwrap()
            .unwrap();
        let f = hashed.fingerprint(Role::Admin);
        assert_ne!(f, plain("pw").fingerprint(Role::Admin));
        assert!(!f.contains(&phc) && !phc.contains(&f));
        // Another hash of the same password (another salt) is another credential.
        let again = Credential::from_settings(Some(&hash_password("pw").unwrap()), None)
            .unwrap()
            .unwrap();
        assert_ne!(f, again.fingerprint(Role::Admin));
    }
}
