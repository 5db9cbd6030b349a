//! The dead list: expirations that could not be delivered, kept within `--max-dead` per
//! namespace and `--max-dead-total` across all, the oldest dropped (and settled for good)
//! beyond either, and listed by Pending.

use std::sync::Arc;

use super::state::Delivery;
use crate::domain::{Dead, DeadList, Expiration};
use crate::local::delivery::queue::{dead_list, Buried};

impl Delivery {
    /// Keeps a dead expiration listed, within `--max-dead` for its namespace and
    /// `--max-dead-total` across all; beyond either the oldest are dropped and go to
    /// `dropped`, to be settled for good in the journal.
    /// Its number in that order also names it for Redrive.
    pub(super) fn bury(
        &mut self,
        namespace: &Arc<str>,
        dead: Dead,
        dropped: &mut Vec<Arc<Expiration>>,
    ) {
        self.metrics.expirations_dead.inc();
        let seq = self.budget.bury(namespace);
        let capacity = self.config.dead_capacity;
        let queue = self.queue(namespace);
        let dead = Dead { id: seq, ..dead };
        queue.dead.push_back(Buried { seq, dead });
        let oldest = (queue.dead.len() > capacity).then(|| queue.dead.pop_front());
        if let Some(Some(oldest)) = oldest {
            self.budget.unbury(oldest.seq);
            dropped.push(oldest.dead.expiration);
            self.metrics.expirations_dead_dropped.inc();
        }
        while let Some((seq, namespace)) = self.budget.oldest_beyond_bound() {
            let queue = self
                .namespaces
                .get_mut(&namespace)
                .expect("kept dead expirations have a queue");
            let oldest = queue.dead.pop_front().expect("counted dead are kept");
            debug_assert_eq!(oldest.seq, seq, "the oldest overall is first in its list");
            dropped.push(oldest.dead.expiration);
            self.metrics.expirations_dead_dropped.inc();
            self.forget_if_idle(&namespace);
        }
        self.forget_if_idle(namespace);
        self.metrics.delivery_dead.set(self.budget.dead() as i64);
    }

    /// The dead expirations kept, oldest first: one namespace's, or (None) every one's.
    pub(super) fn dead(&self, namespace: Option<&str>) -> DeadList {
        match namespace {
            Some(namespace) => dead_list(self.namespaces.get(namespace).into_iter()),
            None => dead_list(self.namespaces.values()),
        }
    }
}
