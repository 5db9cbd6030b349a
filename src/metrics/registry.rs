//! [`Metrics`]: every figure tickd exports, registered once in one `prometheus-client`
//! registry under the names and help texts a scrape shows, and updated in place by the
//! layers that own them.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};

use super::{budgets, connections, process, sinks, subscribers};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct NamespaceLabels {
    pub(crate) namespace: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RpcLabels {
    pub(crate) method: &'static str,
    pub(crate) code: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct MethodLabels {
    pub(crate) method: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
    /// The release of the IANA time zone database compiled in (cron schedules use it).
    tz_database: &'static str,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Latency buckets from 50 µs to about 3 s.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_05, 2.0, 16))
}

pub struct Metrics {
    registry: Registry,
    pub(crate) timers_pending: Family<NamespaceLabels, Gauge>,
    pub(crate) timers_registered: Counter,
    pub(crate) timers_cancelled: Counter,
    pub(crate) timers_fired: Counter,
    /// Seconds between a timer's deadline and its firing: from 100 µs (a tick) to 105 s
    /// (a stalled worker or a replica catching up), doubling.
    pub(crate) firing_lateness: Histogram,
    pub(crate) expirations_delivered: Counter,
    pub(crate) expirations_redelivered: Counter,
    pub(crate) expirations_dead: Counter,
    /// Expirations waiting for a subscriber, all namespaces.
    pub(crate) delivery_buffered: Gauge,
    /// Dead expirations kept (what Pending lists), all namespaces.
    pub(crate) delivery_dead: Gauge,
    /// Deliveries sent to a subscriber and not acknowledged yet (single node; a replica's
    /// claims live in the database).
    pub(crate) delivery_unacked: Gauge,
    /// Subscribe streams open, by mode.
    pub(crate) subscribers: subscribers::SubscriberMetrics,
    /// Dead expirations dropped, oldest first, to keep within `--max-dead` and
    /// `--max-dead-total`.
    pub(crate) expirations_dead_dropped: Counter,
    pub(crate) worker_busy_seconds: Counter<f64, AtomicU64>,
    pub(crate) log_fsync_seconds: Histogram,
    pub(crate) rpc_requests: Family<RpcLabels, Counter>,
    pub(crate) rpc_seconds: HistogramFamily<MethodLabels>,
    /// Replicated mode: partitions whose lease this replica holds.
    pub(crate) partitions_owned: Gauge,
    pub(crate) connections: connections::ConnectionMetrics,
    /// 1 while tickd reports SERVING, 0 otherwise (its store failed or is unreachable).
    pub(crate) serving: Gauge,
    /// How many namespaces are live, `tickd_namespaces` (the set is
    /// [`crate::local::live_namespaces::LiveNamespaces`], shared by the table and delivery).
    pub(crate) namespaces: Gauge,
    /// The byte budgets and refusals by reason.
    pub(crate) budgets: budgets::BudgetMetrics,
    /// Each push sink's pushes, latency, in flight and circuit.
    pub(crate) sinks: sinks::SinkMetrics,
}

impl Metrics {
    pub fn new() -> Arc<Self> {
        let namespaces = Gauge::default();
        let mut metrics = Self {
            registry: Registry::default(),
            timers_pending: Family::default(),
            timers_registered: Counter::default(),
            timers_cancelled: Counter::default(),
            timers_fired: Counter::default(),
            firing_lateness: Histogram::new(exponential_buckets(0.000_1, 2.0, 21)),
            expirations_delivered: Counter::default(),
            expirations_redelivered: Counter::default(),
            expirations_dead: Counter::default(),
            delivery_buffered: Gauge::default(),
            delivery_dead: Gauge::default(),
            delivery_unacked: Gauge::default(),
            subscribers: subscribers::SubscriberMetrics::default(),
            expirations_dead_dropped: Counter::default(),
            worker_busy_seconds: Counter::default(),
            log_fsync_seconds: latency_histogram(),
            rpc_requests: Family::default(),
            rpc_seconds: Family::new_with_constructor(latency_histogram),
            partitions_owned: Gauge::default(),
            connections: connections::ConnectionMetrics::default(),
            serving: Gauge::default(),
            namespaces: namespaces.clone(),
            budgets: budgets::BudgetMetrics::default(),
            sinks: sinks::SinkMetrics::default(),
        };
        metrics.register_all(namespaces);
        Arc::new(metrics)
    }

    fn register_all(&mut self, namespaces: Gauge) {
        // The root holds what every exporter names alike; tickd's own metrics are `tickd_*`.
        self.registry
            .register_collector(Box::new(process::ProcessCollector));
        let registry = self.registry.sub_registry_with_prefix("tickd");
        registry.register(
            "build",
            "The version tickd was built as (always 1)",
            Info::new(BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
                tz_database: crate::cron::time_zone_database_version(),
            }),
        );
        self.connections.register(registry);
        self.subscribers.register(registry);
        self.budgets.register(registry);
        self.sinks.register(registry);
        registry.register(
            "serving",
            "1 while tickd reports SERVING; 0 once its store failed or is unreachable",
            self.serving.clone(),
        );
        registry.register(
            "timers_pending",
            "Pending timers",
            self.timers_pending.clone(),
        );
        registry.register(
            "namespaces",
            "Namespaces holding pending timers, expirations or subscribers",
            namespaces,
        );
        registry.register(
            "timers_registered",
            "Timers registered",
            self.timers_registered.clone(),
        );
        registry.register(
            "timers_cancelled",
            "Timers cancelled while pending",
            self.timers_cancelled.clone(),
        );
        registry.register("timers_fired", "Timer firings", self.timers_fired.clone());
        registry.register_with_unit(
            "firing_lateness",
            "Time from a timer's deadline to its firing",
            Unit::Seconds,
            self.firing_lateness.clone(),
        );
        registry.register(
            "expirations_delivered",
            "First deliveries to a subscriber",
            self.expirations_delivered.clone(),
        );
        registry.register(
            "expirations_redelivered",
            "Deliveries after an ack timeout or a lost subscriber",
            self.expirations_redelivered.clone(),
        );
        registry.register(
            "expirations_dead",
            "Expirations given up on (attempts used up or buffer full)",
            self.expirations_dead.clone(),
        );
        registry.register(
            "delivery_buffered",
            "Expirations waiting for a subscriber",
            self.delivery_buffered.clone(),
        );
        registry.register(
            "delivery_dead",
            "Dead expirations kept",
            self.delivery_dead.clone(),
        );
        registry.register(
            "delivery_unacked",
            "Deliveries sent to a subscriber and awaiting its ack (single node)",
            self.delivery_unacked.clone(),
        );
        registry.register(
            "expirations_dead_dropped",
            "Dead expirations dropped, oldest first, beyond --max-dead or --max-dead-total",
            self.expirations_dead_dropped.clone(),
        );
        registry.register_with_unit(
            "worker_busy",
            "Time the wheel worker thread spent working (not sleeping)",
            Unit::Seconds,
            self.worker_busy_seconds.clone(),
        );
        registry.register_with_unit(
            "log_fsync",
            "Log fsync latency",
            Unit::Seconds,
            self.log_fsync_seconds.clone(),
        );
        registry.register(
            "rpc_requests",
            "gRPC calls by method and status code",
            self.rpc_requests.clone(),
        );
        registry.register_with_unit(
            "rpc",
            "gRPC call latency by method",
            Unit::Seconds,
            self.rpc_seconds.clone(),
        );
        registry.register(
            "partitions_owned",
            "Partitions whose lease this replica holds (replicated mode)",
            self.partitions_owned.clone(),
        );
    }

    pub(crate) fn pending_gauge(&self, namespace: &str) -> Gauge {
        self.timers_pending
            .get_or_create(&NamespaceLabels {
                namespace: namespace.to_owned(),
            })
            .clone()
    }

    /// Removes a forgotten namespace's series, so that the scrape stays the size of the
    /// live namespaces rather than of every namespace ever used.
    pub(crate) fn forget_pending_gauge(&self, namespace: &str) {
        self.timers_pending.remove(&NamespaceLabels {
            namespace: namespace.to_owned(),
        });
    }

    /// Counts one finished call.
    pub(crate) fn observe_rpc(&self, method: &'static str, code: tonic::Code, elapsed: Duration) {
        self.rpc_requests
            .get_or_create(&RpcLabels {
                method,
                code: code_name(code),
            })
            .inc();
        self.rpc_seconds
            .get_or_create(&MethodLabels { method })
            .observe(elapsed.as_secs_f64());
    }

    /// The OpenMetrics exposition of every metric.
    pub(crate) fn encode(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("writing to a String cannot fail");
        text
    }
}

fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "CANCELLED",
        Unknown => "UNKNOWN",
        InvalidArgument => "INVALID_ARGUMENT",
        DeadlineExceeded => "DEADLINE_EXCEEDED",
        NotFound => "NOT_FOUND",
        AlreadyExists => "ALREADY_EXISTS",
        PermissionDenied => "PERMISSION_DENIED",
        ResourceExhausted => "RESOURCE_EXHAUSTED",
        FailedPrecondition => "FAILED_PRECONDITION",
        Aborted => "ABORTED",
        OutOfRange => "OUT_OF_RANGE",
        Unimplemented => "UNIMPLEMENTED",
        Internal => "INTERNAL",
        Unavailable => "UNAVAILABLE",
        DataLoss => "DATA_LOSS",
        Unauthenticated => "UNAUTHENTICATED",
    }
}
