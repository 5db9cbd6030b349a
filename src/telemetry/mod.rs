//! Trace export over OTLP/gRPC: off by default, on with `--otlp-endpoint` (or the usual
//! `OTEL_EXPORTER_OTLP_ENDPOINT`). What each span holds is in [`spans`].
//!
//! Export never stands in the way of a timer: spans are queued to the SDK's batch
//! processor, which keeps at most `OTEL_BSP_MAX_QUEUE_SIZE` of them (2,048 by default) and
//! drops the rest while the collector is slow or down. A down collector costs that queue
//! and the exporter's retries, nothing else: no delivery waits on it.

pub(crate) mod ids;
pub(crate) mod spans;

use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::global::{self, BoxedTracer};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use opentelemetry_sdk::Resource;

/// Whether spans are exported: checked before any span is built, so that with export off
/// a delivery pays one relaxed load.
static EXPORTING: AtomicBool = AtomicBool::new(false);

pub(crate) fn exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

/// The tracer tickd's spans are made with (the SDK's once [`Export::start`] has run).
pub(crate) fn tracer() -> BoxedTracer {
    global::tracer("tickd")
}

/// A running export, flushed and stopped by [`Export::shutdown`].
pub struct Export {
    provider: SdkTracerProvider,
}

impl Export {
    /// Starts exporting to `endpoint` (or, when `None`, to `OTEL_EXPORTER_OTLP_ENDPOINT`
    /// if it is set); `Ok(None)` when neither names a collector. The service is named by
    /// `OTEL_SERVICE_NAME`, `tickd` when unset. Needs a Tokio runtime (the exporter's
    /// tonic client runs on it).
    pub fn start(endpoint: Option<&str>) -> Result<Option<Export>, String> {
        let from_environment = std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT")
            .ok()
            .filter(|endpoint| !endpoint.is_empty());
        if endpoint.is_none() && from_environment.is_none() {
            return Ok(None);
        }
        let mut exporter = opentelemetry_otlp::SpanExporter::builder().with_tonic();
        if let Some(endpoint) = endpoint {
            exporter = exporter.with_endpoint(endpoint);
        }
        let exporter = exporter
            .build()
            .map_err(|error| format!("--otlp-endpoint: {error}"))?;
        let named = std::env::var("OTEL_SERVICE_NAME").is_ok_and(|name| !name.is_empty());
        let mut resource = Resource::builder();
        if !named {
            resource = resource.with_service_name("tickd");
        }
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_id_generator(ids::ChosenIds::default())
            // A span under a caller's context follows its sampling; tickd's own roots (the
            // fire spans) are made only for sampled registrations.
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::AlwaysOn)))
            .with_resource(resource.build())
            .build();
        global::set_tracer_provider(provider.clone());
        EXPORTING.store(true, Ordering::Relaxed);
        Ok(Some(Export { provider }))
    }

    /// The layer that turns the gRPC handlers' `tracing` spans (`tickd.register`) into
    /// exported ones. It sees those spans alone: every other span and event, the log's,
    /// stays as cheap as the log's filter makes it.
    pub fn layer<S>(&self) -> impl tracing_subscriber::Layer<S>
    where
        S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
    {
        use tracing_subscriber::Layer as _;
        // With its level (`tickd.register` is an info span) as the hint: without one the
        // whole stack's maximum level would be TRACE, and every trace-level event (the
        // `log` crate's too) would be built and filtered at run time.
        let only_tickds_spans = tracing_subscriber::filter::filter_fn(|metadata| {
            metadata.is_span() && metadata.name().starts_with("tickd.")
        })
        .with_max_level_hint(tracing::level_filters::LevelFilter::INFO);
        tracing_opentelemetry::layer()
            .with_tracer(self.provider.tracer("tickd"))
            .with_filter(only_tickds_spans)
    }

    /// Exports what is queued (within the exporter's timeout) and stops.
    pub fn shutdown(self) {
        EXPORTING.store(false, Ordering::Relaxed);
        if let Err(error) = self.provider.shutdown() {
            tracing::warn!(%error, "trace export did not shut down cleanly");
        }
    }
}
