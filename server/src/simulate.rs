//! `repoll sim`: the simulated upstream API as its own process (or, through `serve --sim`,
//! inside the web process).

use tokio_util::sync::CancellationToken;

use crate::{cli::SimCmdArgs, shutdown, startup::ServeError};

/// Serves the simulator on `listener` until `stop` is cancelled.
pub async fn serve(
    listener: tokio::net::TcpListener,
    args: sim::SimArgs,
    stop: CancellationToken,
) -> std::io::Result<()> {
    sim::serve(listener, args, stop.cancelled_owned()).await
}

/// Runs `repoll sim` until SIGINT/SIGTERM.
pub async fn run(args: SimCmdArgs) -> Result<(), ServeError> {
    let stop = shutdown::on_signal();
    let listener = crate::startup::bind(args.addr).await?;
    tracing::info!("simulated upstream on http://{}", args.addr);
    serve(listener, args.sim, stop).await?;
    Ok(())
}
