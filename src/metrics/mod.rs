//! Prometheus metrics, served at `/metrics` on `--metrics-listen` (OpenMetrics for
//! Prometheus, the text format 0.0.4 for anyone else: see [`exposition`]).
//!
//! One [`Metrics`] is shared by every layer; each updates its own figures with atomic
//! operations (no locks on the hot paths), and a scrape encodes them with
//! `prometheus-client`. tickd's own metrics are named `tickd_*`; the standard `process_*`
//! ones are read from `/proc` at scrape time ([`process`]).

mod budgets;
pub(crate) mod connections;
mod exposition;
mod process;
mod registry;
pub(crate) mod sinks;
pub(crate) mod subscribers;

use std::future::Future;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Instant;

use prometheus_client::metrics::counter::Counter;

pub(crate) use exposition::serve;
pub use registry::Metrics;

/// Measures how long the worker spends between two sleeps.
pub(crate) struct BusyTimer<'a> {
    counter: &'a Counter<f64, AtomicU64>,
    started: Instant,
}

impl<'a> BusyTimer<'a> {
    pub(crate) fn start(counter: &'a Counter<f64, AtomicU64>) -> Self {
        Self {
            counter,
            started: Instant::now(),
        }
    }
}

impl Drop for BusyTimer<'_> {
    fn drop(&mut self) {
        self.counter.inc_by(self.started.elapsed().as_secs_f64());
    }
}

/// The gRPC methods counted by name; anything else counts as "other", so a client cannot
/// grow the label set.
const KNOWN_METHODS: [&str; 11] = [
    "NewTimeout",
    "NewTimeouts",
    "Cancel",
    "Pending",
    "Get",
    "Touch",
    "KeepAlive",
    "Subscribe",
    "Ack",
    "Check",
    "Watch",
];

fn method_name(path: &str) -> &'static str {
    let method = path.rsplit('/').next().unwrap_or_default();
    KNOWN_METHODS
        .iter()
        .find(|known| **known == method)
        .copied()
        .unwrap_or("other")
}

/// A tower layer counting every gRPC call by method and status code, with its latency up
/// to the response headers (the whole call for unary methods, the opening for streams).
#[derive(Clone)]
pub(crate) struct RpcMetricsLayer {
    metrics: Arc<Metrics>,
}

impl RpcMetricsLayer {
    pub(crate) fn new(metrics: Arc<Metrics>) -> Self {
        Self { metrics }
    }
}

impl<S> tower::Layer<S> for RpcMetricsLayer {
    type Service = RpcMetricsService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        RpcMetricsService {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

#[derive(Clone)]
pub(crate) struct RpcMetricsService<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

type HttpRequest<B> = tonic::codegen::http::Request<B>;
type HttpResponse<B> = tonic::codegen::http::Response<B>;

impl<S, RequestBody, ResponseBody> tower::Service<HttpRequest<RequestBody>> for RpcMetricsService<S>
where
    S: tower::Service<HttpRequest<RequestBody>, Response = HttpResponse<ResponseBody>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    RequestBody: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = std::pin::Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(
        &mut self,
        context: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), S::Error>> {
        self.inner.poll_ready(context)
    }

    fn call(&mut self, request: HttpRequest<RequestBody>) -> Self::Future {
        // The clone is not polled ready; the ready one serves this call (tower's usual dance).
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let metrics = self.metrics.clone();
        let method = method_name(request.uri().path());
        let started = Instant::now();
        Box::pin(async move {
            // Below this layer only load shedding fails a call (tonic answers it with
            // RESOURCE_EXHAUSTED); count it too.
            let response = inner.call(request).await.inspect_err(|_| {
                metrics.observe_rpc(method, tonic::Code::ResourceExhausted, started.elapsed())
            })?;
            // A call that failed before any message carries its status in the headers;
            // otherwise it is OK (or its stream's own status comes later, in trailers).
            let code = response
                .headers()
                .get("grpc-status")
                .and_then(|value| value.to_str().ok())
                .and_then(|value| value.parse::<i32>().ok())
                .map_or(tonic::Code::Ok, tonic::Code::from);
            metrics.observe_rpc(method, code, started.elapsed());
            Ok(response)
        })
    }
}
