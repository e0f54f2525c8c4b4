//! repoll's resilience suite (`scripts/chaos`).
//!
//! - `chaos run`: web process, three workers and a faulty simulator on a private Redis;
//!   workers SIGKILLed every 2 s, Redis restarted once and stalled once, while queries are
//!   submitted over HTTP. Fails when an accepted query is lost or the upstream was driven to
//!   `done` twice for a task that never lost a lease. See [`run`].
//! - `chaos abuse`: live streams, slow headers, a hostile upstream, request lines without a
//!   path and wrong sign-ins against `repoll serve --sim`, each followed by probes that must
//!   answer within 1 s, and gates on what each left behind. See [`abuse`].
//!
//! Exit codes: 0 pass, 1 a gate failed, 2 the suite itself could not run, 130 interrupted.

mod abuse;
mod common;
mod procs;
mod redis_server;
mod run;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "chaos", about = "repoll's resilience suite")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Worker kills, a Redis restart and stall, upstream faults; counts lost and duplicate work.
    Run(run::RunArgs),
    /// Live streams, slow connections, a hostile upstream, request lines without a path and
    /// wrong sign-ins; probes must answer within 1 s.
    Abuse(abuse::AbuseArgs),
}

/// Open-file soft limit of the environment the suite was started from (see `main`).
pub static AMBIENT_NOFILE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1024);

fn main() {
    let cli = Cli::parse();
    procs::install_panic_hook();
    let _guard = procs::Guard;
    // The limit a server started from this shell would have had: scripts/chaos raises the
    // shell's limit before starting us and passes the old value along.
    let before = std::env::var("CHAOS_NOFILE_BEFORE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(procs::nofile().0);
    AMBIENT_NOFILE.store(before, std::sync::atomic::Ordering::Relaxed);
    // Raised before any child starts: the client's sockets must not be what runs out.
    procs::raise_nofile();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("chaos: tokio runtime: {e}");
            std::process::exit(2);
        }
    };
    let code = rt.block_on(async {
        let work = async move {
            match cli.command {
                Command::Run(a) => run::run(a).await,
                Command::Abuse(a) => abuse::abuse(a).await,
            }
        };
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("chaos: SIGTERM handler: {e}");
                    return 2;
                }
            };
        tokio::select! {
            r = work => match r {
                Ok(true) => 0,
                Ok(false) => 1,
                Err(e) => {
                    eprintln!("chaos: {e}");
                    2
                }
            },
            _ = tokio::signal::ctrl_c() => {
                eprintln!("chaos: interrupted; stopping every child");
                130
            }
            _ = term.recv() => {
                eprintln!("chaos: terminated; stopping every child");
                143
            }
        }
    });
    // Children first, then the runtime (whose drop would wait for nothing we need).
    procs::cleanup();
    rt.shutdown_timeout(std::time::Duration::from_secs(1));
    std::process::exit(code);
}
