//! Pieces both checks use: starting `repoll` commands with a clean environment, waiting for an
//! HTTP endpoint, the log directory.

use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use tokio::process::Command;

use crate::procs::Proc;

/// A `repoll` command whose environment holds only what the suite sets: a REDIS_URL or
/// REPOLL_* left in the caller's shell would otherwise change what is being tested.
pub fn repoll_cmd(bin: &Path, args: &[&str], env: &[(String, String)]) -> Command {
    let mut cmd = Command::new(bin);
    cmd.args(args);
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if k.starts_with("REPOLL_") || k.starts_with("REDIS_") || k.starts_with("LEPTOS_") {
            cmd.env_remove(k);
        }
    }
    // The processes log warnings only, unless CHAOS_CHILD_LOG asks for more (a run to study).
    cmd.env(
        "RUST_LOG",
        std::env::var("CHAOS_CHILD_LOG").unwrap_or_else(|_| "warn".into()),
    )
    .env("NO_COLOR", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// Waits until `url` answers 2xx, failing early when `proc` exits.
pub async fn wait_http(
    http: &reqwest::Client,
    url: &str,
    limit: Duration,
    proc: &mut Proc,
    log: &Path,
) -> Result<(), String> {
    let started = Instant::now();
    loop {
        if let Some(status) = proc.exited() {
            return Err(format!(
                "{} exited ({status}) before {url} answered; log: {}",
                proc.name,
                log.display()
            ));
        }
        if let Ok(r) = http.get(url).send().await {
            if r.status().is_success() {
                return Ok(());
            }
        }
        if started.elapsed() > limit {
            return Err(format!("{url} did not answer within {limit:?}"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The directory for this run's logs: `--log-dir`, else `target/chaos/<what>-<unix time>`.
/// Logs are kept (unlike the Redis data dir) so a failed run can be read afterwards.
pub fn log_dir(given: Option<PathBuf>, what: &str) -> Result<PathBuf, String> {
    let dir = given.unwrap_or_else(|| {
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("target"));
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        target.join("chaos").join(format!("{what}-{secs}"))
    });
    std::fs::create_dir_all(&dir).map_err(|e| format!("log dir {}: {e}", dir.display()))?;
    Ok(dir)
}

/// Milliseconds as "1234 ms" / "12.3 s" for the tables.
pub fn fmt_ms(ms: u128) -> String {
    if ms < 10_000 {
        format!("{ms} ms")
    } else {
        format!("{:.1} s", ms as f64 / 1000.0)
    }
}
