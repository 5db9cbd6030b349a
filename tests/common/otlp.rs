//! An OpenTelemetry collector's trace receiver, as much of one as the tests need: a tonic
//! server of OTLP/gRPC's `TraceService` on `127.0.0.1:0` that keeps every span it is sent,
//! and wakes whoever waits for one.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::trace::v1::Span;
use tokio::sync::Notify;
use tonic::{Request, Response, Status};

use super::rpc::PATIENCE;

/// The spans received so far, and a wake-up for each export.
#[derive(Default)]
struct Received {
    spans: Mutex<Vec<Span>>,
    exported: Notify,
}

struct Receiver(Arc<Received>);

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: Request<ExportTraceServiceRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        let spans = request
            .into_inner()
            .resource_spans
            .into_iter()
            .flat_map(|resource| resource.scope_spans)
            .flat_map(|scope| scope.spans);
        self.0.spans.lock().unwrap().extend(spans);
        self.0.exported.notify_waiters();
        Ok(Response::new(ExportTraceServiceResponse::default()))
    }
}

/// A running receiver; stopped when dropped.
pub(crate) struct Collector {
    pub addr: SocketAddr,
    received: Arc<Received>,
    server: tokio::task::JoinHandle<()>,
}

impl Collector {
    pub(crate) async fn start() -> Collector {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let received = Arc::new(Received::default());
        let service = TraceServiceServer::new(Receiver(received.clone()));
        let server = tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
                .await
                .unwrap();
        });
        Collector {
            addr,
            received,
            server,
        }
    }

    /// What tickd's `--otlp-endpoint` is given.
    pub(crate) fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub(crate) fn spans(&self) -> Vec<Span> {
        self.received.spans.lock().unwrap().clone()
    }

    /// Waits (at most [`PATIENCE`]) until a span `matches`, and returns it.
    pub(crate) async fn span(&self, what: &str, matches: impl Fn(&Span) -> bool) -> Span {
        let wait = async {
            loop {
                let exported = self.received.exported.notified();
                if let Some(span) = self.spans().into_iter().find(|span| matches(span)) {
                    return span;
                }
                exported.await;
            }
        };
        match tokio::time::timeout(PATIENCE, wait).await {
            Ok(span) => span,
            Err(_) => panic!(
                "no {what} span within {PATIENCE:?}; received: {:#?}",
                self.spans()
                    .iter()
                    .map(|span| span.name.clone())
                    .collect::<Vec<_>>()
            ),
        }
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// A span attribute's value as text (strings as they are, numbers and booleans shown).
pub(crate) fn attribute(span: &Span, key: &str) -> Option<String> {
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    let value = span
        .attributes
        .iter()
        .find(|attribute| attribute.key == key)?
        .value
        .as_ref()?
        .value
        .as_ref()?;
    Some(match value {
        Value::StringValue(text) => text.clone(),
        Value::IntValue(number) => number.to_string(),
        Value::DoubleValue(number) => number.to_string(),
        Value::BoolValue(flag) => flag.to_string(),
        other => format!("{other:?}"),
    })
}

/// Lowercase hex of an id's bytes, as a `traceparent` writes it.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}
