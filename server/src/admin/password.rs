//! `repoll admin hash-password`: turns a password into the argon2 PHC string that
//! REPOLL_ADMIN_PASSWORD_HASH expects, so the password itself never sits in the environment.
//! Also makes the one-time password `repoll serve` prints when none is configured.

use std::io::{BufRead, IsTerminal, Write};

use argon2::password_hash::rand_core::{OsRng, RngCore};

/// Reads the password and prints its hash. On a terminal it asks twice without echoing what
/// is typed (`rpassword` turns echo off; someone behind you or a screen recording must not
/// see it); from a pipe it reads one line.
pub fn hash_password_command() -> Result<(), String> {
    let stdin = std::io::stdin();
    let password = if stdin.is_terminal() {
        let first = rpassword::prompt_password("password: ")
            .map_err(|e| format!("cannot read the password: {e}"))?;
        let again = rpassword::prompt_password("again: ")
            .map_err(|e| format!("cannot read the password: {e}"))?;
        if first != again {
            return Err("the two passwords differ".into());
        }
        first
    } else {
        let mut line = String::new();
        stdin
            .lock()
            .read_line(&mut line)
            .map_err(|e| format!("cannot read the password: {e}"))?;
        line.trim_end_matches(['\r', '\n']).to_string()
    };
    if password.is_empty() {
        return Err("empty password".into());
    }
    let hash = app::auth::hash_password(&password)?;
    let mut out = std::io::stdout();
    let _ = writeln!(out, "{hash}");
    Ok(())
}

/// A random 24-character password from an unambiguous alphabet (~137 bits).
pub fn generate() -> String {
    const ALPHABET: &[u8] = b"abcdefghjkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789";
    let mut bytes = [0u8; 24];
    OsRng.fill_bytes(&mut bytes);
    bytes
        .iter()
        .map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char)
        .collect()
}
