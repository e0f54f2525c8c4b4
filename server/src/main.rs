//! `repoll`: thin entry point. Parses the command line (and the config file, if any), sets up logging and hands over to
//! the command's module.

use server::cli::Command;

/// Every allocation of the process (a hit's request, its JSON, its Redis reply) goes through
/// mimalloc: per-thread free lists without the locks and consolidation of glibc's malloc.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = match server::cli::parse_cli() {
        Ok(cli) => cli,
        Err(e) => {
            eprintln!("repoll: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    // Only the long-running commands export traces; every command logs alike.
    let (name, exports) = match &cli.command {
        Command::Serve(_) => ("serve", true),
        Command::Worker(_) => ("worker", true),
        Command::Sim(_) => ("sim", false),
        Command::Admin { .. } => ("admin", false),
    };
    // How long the trace export may take at exit: the command's own grace setting.
    let flush_within = std::time::Duration::from_millis(match &cli.command {
        Command::Serve(args) => args.shutdown_grace_ms,
        Command::Worker(args) => args.worker.grace_ms,
        _ => 0,
    });
    let tracing = match server::traces::init(name, exports) {
        Ok(tracing) => tracing,
        Err(e) => {
            eprintln!("repoll: {e}");
            return std::process::ExitCode::from(2);
        }
    };

    let outcome = match cli.command {
        Command::Serve(mut args) => {
            args.trace_url = tracing.trace_url();
            server::serve::run(*args).await
        }
        Command::Worker(args) => server::work::run(*args).await,
        Command::Sim(args) => server::simulate::run(args).await,
        Command::Admin { command } => server::admin::run(command).await,
    };
    // What is still queued is sent before the process ends, within the grace setting.
    tokio::task::spawn_blocking(move || tracing.shutdown(flush_within))
        .await
        .ok();
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // `{:#}`-style chain: the top message plus every cause, on one line.
            eprintln!("repoll: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
