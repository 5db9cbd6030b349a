//! `tickd_subscribers{mode}`: Subscribe streams open on this process, counted for as long
//! as each stream lives, whichever backend serves it.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio_stream::StreamExt;

use crate::domain::{DeliveryStream, SubscribeOptions};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ModeLabels {
    /// `shared` (acknowledges), `auto_ack` (shared, at most once) or `observer`.
    pub(crate) mode: &'static str,
}

const MODES: [&str; 3] = ["shared", "auto_ack", "observer"];

fn mode_of(options: &SubscribeOptions) -> &'static str {
    match (options.observer, options.auto_ack) {
        (true, _) => "observer",
        (false, true) => "auto_ack",
        (false, false) => "shared",
    }
}

#[derive(Default)]
pub(crate) struct SubscriberMetrics {
    open: Family<ModeLabels, Gauge>,
}

/// Counts one subscriber from its creation; dropping it uncounts it. Taken before the
/// backend is asked for the stream, so a refused subscription counts for no longer than
/// the attempt.
pub(crate) struct CountedSubscriber(Gauge);

impl CountedSubscriber {
    /// `stream`, keeping this count for as long as it lives.
    pub(crate) fn around(self, stream: DeliveryStream) -> DeliveryStream {
        Box::pin(stream.map(move |delivered| {
            let _counted = &self;
            delivered
        }))
    }
}

impl Drop for CountedSubscriber {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl SubscriberMetrics {
    pub(super) fn register(&self, registry: &mut Registry) {
        // Every mode shows from the start, at 0: a dashboard or alert sees no gap.
        for mode in MODES {
            drop(self.open.get_or_create(&ModeLabels { mode }));
        }
        registry.register(
            "subscribers",
            "Subscribe streams open on this process, by mode (shared, auto_ack, observer)",
            self.open.clone(),
        );
    }

    /// One more subscriber of `options`' mode, until the count is dropped.
    pub(crate) fn count(&self, options: &SubscribeOptions) -> CountedSubscriber {
        let gauge = self
            .open
            .get_or_create(&ModeLabels {
                mode: mode_of(options),
            })
            .clone();
        gauge.inc();
        CountedSubscriber(gauge)
    }

    /// Open streams of one mode (for tests).
    #[cfg(test)]
    pub(crate) fn open(&self, mode: &'static str) -> i64 {
        self.open.get_or_create(&ModeLabels { mode }).get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_counts_under_its_mode_until_dropped() {
        let metrics = SubscriberMetrics::default();
        let options = |observer, auto_ack| SubscribeOptions {
            namespace: "n".into(),
            observer,
            ack_timeout: None,
            max_unacked: None,
            auto_ack,
        };
        let empty = || -> DeliveryStream { Box::pin(tokio_stream::empty()) };
        let shared = metrics.count(&options(false, false)).around(empty());
        let auto_ack = metrics.count(&options(false, true)).around(empty());
        let observer = metrics.count(&options(true, true)).around(empty());
        let second_shared = metrics.count(&options(false, false));
        assert_eq!(metrics.open("shared"), 2);
        assert_eq!(metrics.open("auto_ack"), 1);
        assert_eq!(metrics.open("observer"), 1);
        drop((shared, auto_ack, observer));
        assert_eq!(metrics.open("shared"), 1);
        assert_eq!(metrics.open("auto_ack"), 0);
        assert_eq!(metrics.open("observer"), 0);
        drop(second_shared);
        assert_eq!(metrics.open("shared"), 0);
    }
}
