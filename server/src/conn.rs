//! [`ConnCloser`]: what the accept loop (`http_server`) hands each request so a handler can
//! close its own connection. Its own module at the bottom of the layers: the live stream
//! (`api::events`) takes it from a request's extensions without importing the accept loop,
//! which itself imports the API's error shape.

use tokio_util::sync::CancellationToken;

/// Closes the connection a request came on (in its extensions when served by
/// `http_server`): the live stream uses it to drop a reader that stopped reading, which no
/// response body can do by ending (hyper only asks a body for more once the socket has taken
/// what it had).
#[derive(Clone, Debug, Default)]
pub struct ConnCloser(CancellationToken);

impl ConnCloser {
    /// Drops the connection now: its unsent bytes are discarded (a reset, not a FIN after
    /// them), so neither this process nor the kernel holds them any longer.
    pub fn close(&self) {
        self.0.cancel();
    }

    /// Completes once [`ConnCloser::close`] was called (the accept loop waits on it).
    pub async fn closed(&self) {
        self.0.cancelled().await
    }
}
