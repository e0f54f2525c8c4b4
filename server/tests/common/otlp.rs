//! The in-test OTLP/HTTP receiver of the trace tests (issue 27) and what reads what it got:
//! a real exporter's protobuf requests, decoded, every span kept with the `repoll.command` of
//! the process that sent it; the simulator beside it; the variables of a traced process; the
//! worker, asks and waits the trace tests share.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use testkit::http::BlockingHttp;

/// What the receiver got: every span, with the `repoll.command` of the process that sent it.
pub type Received = Arc<Mutex<Vec<(String, Span)>>>;

/// An OTLP/HTTP receiver on a free port: `POST /v1/traces` (protobuf); its base URL.
pub async fn receiver(received: Received) -> String {
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: Bytes| {
            let received = received.clone();
            async move {
                let req = ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
                for rs in req.resource_spans {
                    let command = rs
                        .resource
                        .iter()
                        .flat_map(|r| r.attributes.iter())
                        .find(|kv| kv.key == "repoll.command")
                        .and_then(|kv| kv.value.as_ref())
                        .map(|v| format!("{:?}", v.value))
                        .unwrap_or_default();
                    for ss in rs.scope_spans {
                        for span in ss.spans {
                            received.lock().unwrap().push((command.clone(), span));
                        }
                    }
                }
                (
                    [("content-type", "application/x-protobuf")],
                    Vec::<u8>::new(),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// The simulator in this process; its port.
pub async fn simulator() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(sim::serve(
        listener,
        sim::SimArgs::default(),
        std::future::pending::<()>(),
    ));
    port
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub fn attr(span: &Span, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .map(|v| match &v.value {
            Some(opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(s)) => {
                s.clone()
            }
            other => format!("{other:?}"),
        })
}

/// The OTLP variables of a traced process: every trace sampled, exported at once.
pub fn traced(cmd: &mut std::process::Command, endpoint: &str) {
    cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        .env("OTEL_TRACES_SAMPLER", "parentbased_always_on")
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_PROTOCOL")
        .env_remove("OTEL_SDK_DISABLED");
}

/// A caller's context: the trace the tests' first asks belong to.
pub const CALLER: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/// The runtime of the in-test receiver and simulator; the tests themselves block (their HTTP
/// client and the processes are blocking).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// `repoll worker` on `redis_url` polling the simulator on `sim_port` every 20 ms.
pub fn worker_command(redis_url: &str, sim_port: u16) -> std::process::Command {
    let mut cmd = crate::common::process::repoll();
    cmd.arg("worker")
        .env("REDIS_URL", redis_url)
        .env(
            "REPOLL_UPSTREAM_URL",
            format!("http://127.0.0.1:{sim_port}/api/query?q={{key}}"),
        )
        .env("REPOLL_POLL_INTERVAL_MS", "20")
        .env("RUST_LOG", "warn")
        .env_remove("REPOLL_CONFIG")
        .env_remove("REPOLL_QUEUE");
    cmd
}

/// Asks `query` over the API with `traceparent`; the task id.
pub fn ask(web: u16, query: &str, traceparent: &str) -> String {
    ask_as(web, query, "", traceparent)
}

/// [`ask`] for `tenant` (none when empty).
pub fn ask_as(web: u16, query: &str, tenant: &str, traceparent: &str) -> String {
    let mut body = serde_json::json!({ "query": query });
    if !tenant.is_empty() {
        body["tenant"] = tenant.into();
    }
    let http = BlockingHttp::local(web);
    let answer = http.send(
        http.client
            .post(http.url("/api/v1/queries"))
            .header("traceparent", traceparent)
            .json(&body),
    );
    crate::common::process::id_in(&answer)
}

/// Waits (30 s hang guard) until the task `id` has its result.
pub fn wait_done(web: u16, id: &str) {
    BlockingHttp::local(web).wait_done(id, Duration::from_secs(30));
}
