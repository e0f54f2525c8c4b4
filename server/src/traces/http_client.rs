//! The OTLP exporter's HTTP client: our reqwest 0.12 behind opentelemetry-http's
//! [`HttpClient`] (the exporter's own `reqwest` feature would add reqwest 0.13 to the build).
//!
//! The SDK's batch processor exports from a thread of its own, outside the Tokio runtime,
//! and reqwest needs the runtime's reactor: each request runs as a task on the runtime the
//! process started with, and the export thread only waits for its answer.

use std::time::Duration;

use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};

/// The most an export may take, connection included; a slow collector costs the export
/// thread this, never a request or a worker (their spans wait in the bounded queue).
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest collector answer read (an OTLP answer is a few bytes).
const MAX_ANSWER_BYTES: usize = 64 * 1024;

#[derive(Debug, Clone)]
pub struct ReqwestClient {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

impl ReqwestClient {
    /// A client whose requests run on `runtime`.
    pub fn new(runtime: tokio::runtime::Handle) -> Result<ReqwestClient, String> {
        let client = reqwest::Client::builder()
            .timeout(EXPORT_TIMEOUT)
            .connect_timeout(Duration::from_secs(2))
            .build()
            .map_err(|e| format!("cannot build the OTLP client: {e}"))?;
        Ok(ReqwestClient { client, runtime })
    }
}

#[async_trait::async_trait]
impl HttpClient for ReqwestClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let request = reqwest::Request::try_from(request)?;
        let answer = self
            .runtime
            .spawn(async move {
                let mut resp = client.execute(request).await?;
                let mut builder = Response::builder().status(resp.status().as_u16());
                for (name, value) in resp.headers() {
                    builder = builder.header(name.as_str(), value.as_bytes());
                }
                let mut body = Vec::new();
                while let Some(chunk) = resp.chunk().await? {
                    if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                        break;
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok::<_, HttpError>(builder.body(Bytes::from(body))?)
            })
            .await??;
        Ok(answer)
    }
}
