//! The delivery task's state, and its bookkeeping of namespaces.
//!
//! A namespace's queue exists while it holds anything (waiting, in-flight or dead
//! expirations, subscribers, observers) and is forgotten as soon as it holds nothing; while
//! it exists the task has a hold on the namespace in the live set (see
//! [`crate::local::live_namespaces`]). The worker's holds reach the task with its expirations
//! ([`crate::domain::Handoff::Forgotten`]) and are let go here too.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::clock::Clock;
use crate::domain::DeliveryConfig;
use crate::local::delivery::budget::Budget;
use crate::local::delivery::ids::DeliveryIds;
use crate::local::delivery::log_waits::LogWaits;
use crate::local::delivery::queue::NamespaceQueue;
use crate::local::live_namespaces::LiveNamespaces;
use crate::local::store::watermark::Marks;
use crate::local::store::StoreHandle;
use crate::metrics::Metrics;
use crate::wheel::Wheel;

/// The task's state.
pub(crate) struct Delivery {
    pub(super) config: DeliveryConfig,
    pub(super) namespaces: FxHashMap<Arc<str>, NamespaceQueue>,
    /// The process's live namespaces: a queue holds its namespace there, and the table's
    /// holds come over with its handoffs, for this task to let go.
    pub(super) live: Arc<LiveNamespaces>,
    pub(super) budget: Budget,
    pub(super) ack_deadlines: Wheel<(Arc<str>, u64)>,
    /// Ack deadlines are on this clock's monotonic time.
    pub(super) clock: Arc<dyn Clock>,
    pub(super) ids: DeliveryIds,
    pub(super) store: Option<StoreHandle>,
    /// The store's marks (kept after `Close` lets go of the store: what waits for its last
    /// commit is still released), and what waits for them.
    pub(super) marks: Option<Marks>,
    pub(super) awaiting: LogWaits,
    pub(super) metrics: Arc<Metrics>,
    /// After `Close`, an ack could no longer be journaled: it is refused instead.
    pub(super) closed: bool,
}

impl Delivery {
    /// `boot`: the data directory's boot this process recorded (see
    /// [`crate::local::delivery::ids`]).
    pub(crate) fn new(
        config: DeliveryConfig,
        store: Option<StoreHandle>,
        boot: u64,
        (metrics, live, clock): (Arc<Metrics>, Arc<LiveNamespaces>, Arc<dyn Clock>),
    ) -> Self {
        let ids = DeliveryIds::new(boot);
        Self {
            live,
            config,
            namespaces: FxHashMap::default(),
            budget: Budget::new(
                config.buffered_total,
                config.dead_total,
                ids.first_dead_seq(),
            ),
            ack_deadlines: Wheel::new(1_000_000, usize::MAX),
            clock,
            ids,
            marks: store.as_ref().map(StoreHandle::marks),
            awaiting: LogWaits::default(),
            store,
            metrics,
            closed: false,
        }
    }

    pub(super) fn now(&self) -> u64 {
        self.clock.monotonic()
    }

    /// The namespace's queue, created (with a hold on the live namespace) if need be.
    pub(super) fn queue(&mut self, namespace: &Arc<str>) -> &mut NamespaceQueue {
        let live = &self.live;
        self.namespaces.entry(namespace.clone()).or_insert_with(|| {
            live.hold(namespace);
            NamespaceQueue::default()
        })
    }

    pub(super) fn forget_if_idle(&mut self, namespace: &Arc<str>) {
        if self
            .namespaces
            .get(namespace)
            .is_some_and(NamespaceQueue::is_idle)
        {
            self.namespaces.remove(namespace);
            self.live.release(namespace);
        }
    }
}
