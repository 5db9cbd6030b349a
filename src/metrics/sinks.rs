//! `tickd_sink_*`: each push sink's pushes by outcome, their latency, the pushes in flight
//! and the state of its circuit, labelled by the sink's namespace (sinks are configured,
//! so the label set is as small as the configuration).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct SinkLabels {
    pub(crate) namespace: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct OutcomeLabels {
    pub(crate) namespace: String,
    /// `delivered` (2xx), `retry` (408, 5xx or no answer in time), `slowed` (429, or 503
    /// with Retry-After: the sink slows down, no attempt spent), `rejected` (any other
    /// answer) or `unreachable` (never reached the sink).
    pub(crate) outcome: &'static str,
}

/// Every outcome a push has, shown from the start at 0 for each sink.
pub(crate) const OUTCOMES: [&str; 5] = ["delivered", "retry", "slowed", "rejected", "unreachable"];

fn latency_buckets() -> Histogram {
    // 0.5 ms to about 16 s: a loopback sidecar answers in well under a millisecond, a
    // remote one within the push timeout.
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.0005, 2.0, 16,
    ))
}

pub(crate) struct SinkMetrics {
    pub(crate) pushes: Family<OutcomeLabels, Counter>,
    pub(crate) push_seconds: Family<SinkLabels, Histogram, fn() -> Histogram>,
    pub(crate) in_flight: Family<SinkLabels, Gauge>,
    /// 0 closed, 1 open (pushes paused), 2 half open (one probe out).
    pub(crate) circuit: Family<SinkLabels, Gauge>,
}

impl Default for SinkMetrics {
    fn default() -> Self {
        Self {
            pushes: Family::default(),
            push_seconds: Family::new_with_constructor(latency_buckets),
            in_flight: Family::default(),
            circuit: Family::default(),
        }
    }
}

impl SinkMetrics {
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "sink_pushes",
            "Pushes to each namespace's sink, by outcome (delivered, retry, rejected, unreachable)",
            self.pushes.clone(),
        );
        registry.register(
            "sink_push_seconds",
            "Time from a push's start to the sink's answer (or the timeout)",
            self.push_seconds.clone(),
        );
        registry.register(
            "sink_in_flight",
            "Pushes to each sink awaiting its answer",
            self.in_flight.clone(),
        );
        registry.register(
            "sink_circuit",
            "Each sink's circuit: 0 closed, 1 open (pushes paused), 2 half open (one probe)",
            self.circuit.clone(),
        );
    }

    /// A sink's series, shown at 0 before its first push (a dashboard sees no gap), and
    /// looked up once: its pusher counts each push without a label lookup.
    pub(crate) fn announce(&self, namespace: &str) -> SinkSeries {
        let pushes = OUTCOMES.map(|outcome| {
            self.pushes
                .get_or_create(&OutcomeLabels {
                    namespace: namespace.to_owned(),
                    outcome,
                })
                .clone()
        });
        let labels = SinkLabels {
            namespace: namespace.to_owned(),
        };
        SinkSeries {
            pushes,
            push_seconds: self.push_seconds.get_or_create(&labels).clone(),
            in_flight: self.in_flight.get_or_create(&labels).clone(),
            circuit: self.circuit.get_or_create(&labels).clone(),
        }
    }
}

/// One sink's series (handles that share their values with the registry's).
#[derive(Clone)]
pub(crate) struct SinkSeries {
    /// By outcome, in the order of [`OUTCOMES`].
    pushes: [Counter; OUTCOMES.len()],
    pub(crate) push_seconds: Histogram,
    pub(crate) in_flight: Gauge,
    pub(crate) circuit: Gauge,
}

impl SinkSeries {
    /// Counts a push by its outcome, one of [`OUTCOMES`].
    pub(crate) fn pushed(&self, outcome: &'static str) {
        debug_assert!(OUTCOMES.contains(&outcome), "{outcome} is not an outcome");
        if let Some(index) = OUTCOMES.iter().position(|known| *known == outcome) {
            self.pushes[index].inc();
        }
    }
}
