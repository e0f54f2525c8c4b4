//! `repoll`: thin entry point. Parses the command line (and the config file, if any), sets up logging and hands over to
//! the command's module.

use server::cli::Command;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = match server::cli::parse_cli() {
        Ok(cli) => cli,
        Err(e) => {
            eprintln!("repoll: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| EnvFilter::new("info,tower_http=info")),
        )
        .init();

    let outcome = match cli.command {
        Command::Serve(args) => server::serve::run(*args).await,
        Command::Worker(args) => server::work::run(*args).await,
        Command::Sim(args) => server::simulate::run(args).await,
        Command::Admin { command } => server::admin::run(command).await,
    };
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // `{:#}`-style chain: the top message plus every cause, on one line.
            eprintln!("repoll: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
