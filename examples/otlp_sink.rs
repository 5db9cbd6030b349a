//! An OTLP/gRPC trace receiver for benchmarks: accepts every export, keeps nothing but a
//! count, so a benchmark of tickd with `--otlp-endpoint` measures tickd's cost of making and
//! sending spans, not a collector's. It listens on `127.0.0.1:0`, prints
//! `otlp_sink addr=http://127.0.0.1:PORT` once bound, and at SIGTERM or SIGINT prints
//! `otlp_sink spans=N exports=M`.
//!
//! `cargo run --release --example otlp_sink` (it uses the dev-dependency opentelemetry-proto,
//! which is why it is an example and not one of the crate's binaries).

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use tokio::signal::unix::{signal, SignalKind};
use tonic::{Request, Response, Status};

/// Spans and export calls received.
#[derive(Default)]
struct Counts {
    spans: AtomicU64,
    exports: AtomicU64,
}

struct CountingReceiver(Arc<Counts>);

#[tonic::async_trait]
impl TraceService for CountingReceiver {
    async fn export(
        &self,
        request: Request<ExportTraceServiceRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        let spans: usize = request
            .into_inner()
            .resource_spans
            .iter()
            .flat_map(|resource| &resource.scope_spans)
            .map(|scope| scope.spans.len())
            .sum();
        self.0.spans.fetch_add(spans as u64, Ordering::Relaxed);
        self.0.exports.fetch_add(1, Ordering::Relaxed);
        Ok(Response::new(ExportTraceServiceResponse::default()))
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    println!("otlp_sink addr=http://{address}");
    std::io::stdout().flush()?;
    let counts = Arc::new(Counts::default());
    let mut terminate = signal(SignalKind::terminate())?;
    let stopped = async move {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    };
    tonic::transport::Server::builder()
        .add_service(TraceServiceServer::new(CountingReceiver(counts.clone())))
        .serve_with_incoming_shutdown(
            tokio_stream::wrappers::TcpListenerStream::new(listener),
            stopped,
        )
        .await
        .map_err(std::io::Error::other)?;
    println!(
        "otlp_sink spans={} exports={}",
        counts.spans.load(Ordering::Relaxed),
        counts.exports.load(Ordering::Relaxed)
    );
    Ok(())
}
