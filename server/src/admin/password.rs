//! `repoll admin hash-password`: turns a password into the argon2 PHC string that
//! REPOLL_ADMIN_PASSWORD_HASH expects, so the password itself never sits in the environment.
//! Also makes the one-time password `repoll serve` prints when none is configured.

use std::io::{BufRead, IsTerminal, Write};

use argon2::password_hash::rand_core::{OsRng, RngCore};

/// Reads one line from stdin (prompting on a terminal) and prints its hash.
pub fn hash_password_command() -> Result<(), String> {
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        eprint!("password (input is shown): ");
        let _ = std::io::stderr().flush();
    }
    let mut line = String::new();
    stdin
        .lock()
        .read_line(&mut line)
        .map_err(|e| format!("cannot read the password: {e}"))?;
    let password = line.trim_end_matches(['\r', '\n']);
    if password.is_empty() {
        return Err("empty password".into());
    }
    let hash = app::auth::hash_password(password)?;
    println!("{hash}");
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
