//! Connection metrics: how many are open, and why the others were closed by tickd.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Why tickd closed a connection itself.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub(crate) enum CloseReason {
    /// Refused at accept: `--max-connections` were open.
    Limit,
    /// The HTTP/2 preface did not arrive within `--handshake-timeout`.
    HandshakeTimeout,
    /// Still waiting for its preface when `--max-handshaking` newer ones arrived.
    Evicted,
    /// No call open for `--idle-timeout`.
    Idle,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct CloseLabels {
    pub(crate) reason: CloseReason,
}

#[derive(Default)]
pub(crate) struct ConnectionMetrics {
    /// Connections open, including those still in their handshake.
    pub(crate) open: Gauge,
    pub(crate) closed_by_server: Family<CloseLabels, Counter>,
}

impl ConnectionMetrics {
    pub(crate) fn closed(&self, reason: CloseReason) {
        self.closed_by_server
            .get_or_create(&CloseLabels { reason })
            .inc();
    }

    pub(super) fn register(&self, registry: &mut Registry) {
        // Every reason shows from the start, at 0: `rate()` then sees the first close, and
        // an alert or dashboard on one reason has a series to read before it happens.
        for reason in [
            CloseReason::Limit,
            CloseReason::HandshakeTimeout,
            CloseReason::Evicted,
            CloseReason::Idle,
        ] {
            drop(self.closed_by_server.get_or_create(&CloseLabels { reason }));
        }
        registry.register(
            "connections_open",
            "gRPC connections open, handshaking ones included",
            self.open.clone(),
        );
        registry.register(
            "connections_closed_by_server",
            "Connections tickd closed itself, by reason",
            self.closed_by_server.clone(),
        );
    }
}
