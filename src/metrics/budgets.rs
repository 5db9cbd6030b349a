//! The byte budgets' metrics (see [`crate::budget`]): each budget and what is used of it,
//! and `tickd_refusals_total{reason}`, the calls refused with RESOURCE_EXHAUSTED by the
//! limit that refused them.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

use crate::budget::Refusal;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ReasonLabels {
    reason: &'static str,
}

#[derive(Default)]
pub(crate) struct BudgetMetrics {
    /// `--max-memory` in force (0: none).
    pub(crate) memory_budget: Gauge,
    /// The memory budget's counter itself (see [`crate::budget::MemoryBudget`]).
    pub(crate) memory_used: Gauge,
    /// `--max-disk` in force (0: none).
    pub(crate) disk_budget: Gauge,
    /// Bytes of the data directory's log and snapshots.
    pub(crate) disk_used: Gauge,
    refusals: Family<ReasonLabels, Counter>,
}

impl BudgetMetrics {
    pub(crate) fn refused(&self, reason: Refusal) {
        self.refusals
            .get_or_create(&ReasonLabels {
                reason: reason.label(),
            })
            .inc();
    }

    pub(super) fn register(&self, registry: &mut Registry) {
        // Every reason shows from the start, at 0, so rate() and alerts see no gap.
        for reason in Refusal::ALL {
            drop(self.refusals.get_or_create(&ReasonLabels {
                reason: reason.label(),
            }));
        }
        registry.register(
            "refusals",
            "Calls refused with RESOURCE_EXHAUSTED, by the limit that refused them",
            self.refusals.clone(),
        );
        registry.register_with_unit(
            "memory_budget",
            "The memory budget (--max-memory, or its default from the container's limit); 0: none",
            Unit::Bytes,
            self.memory_budget.clone(),
        );
        registry.register_with_unit(
            "memory_used",
            "Memory held for timers, expirations, their indexes and requests in flight",
            Unit::Bytes,
            self.memory_used.clone(),
        );
        registry.register_with_unit(
            "disk_budget",
            "The disk budget (--max-disk); 0: none",
            Unit::Bytes,
            self.disk_budget.clone(),
        );
        registry.register_with_unit(
            "disk_used",
            "Bytes of the data directory's log segments and snapshots",
            Unit::Bytes,
            self.disk_used.clone(),
        );
    }
}
