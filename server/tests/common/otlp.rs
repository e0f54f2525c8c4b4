//! The in-test OTLP/HTTP receiver of the trace tests (issue 27) and what reads what it got:
//! a real exporter's protobuf requests, decoded, every span kept with the `repoll.command` of
//! the process that sent it; the simulator beside it; the variables of a traced process.

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

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
