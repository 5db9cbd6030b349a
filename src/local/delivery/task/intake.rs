//! Fired expirations coming in, from the worker or recovered at start: each waits in its
//! namespace's buffer for a subscriber, or is dead at once when that buffer (or the one
//! across namespaces) is full, the memory budget is, or it is out of attempts.

use std::sync::Arc;

use tracing::warn;

use super::state::Delivery;
use crate::domain::{Dead, DeadReason, Delivered, Expiration, Handoff};
use crate::local::delivery::queue::Waiting;

impl Delivery {
    /// What the worker sent, in its order: expirations, and namespaces it forgot after them.
    pub(super) fn handoff(&mut self, batch: Vec<Handoff>) {
        let mut fired = Vec::with_capacity(batch.len());
        for item in batch {
            match item {
                Handoff::Fired(expiration) => fired.push((expiration, 0)),
                Handoff::Forgotten(namespace) => {
                    self.enqueue_fired(std::mem::take(&mut fired));
                    self.live.release(&namespace);
                }
            }
        }
        self.enqueue_fired(fired);
    }

    /// Takes in fired expirations, each with the deliveries it already had (0 when it just
    /// fired; recovered ones count those made before a restart): they wait for a
    /// subscriber, or are dead if the buffer is full or they are out of attempts.
    pub(crate) fn enqueue_fired(&mut self, batch: Vec<(Expiration, u32)>) {
        if batch.is_empty() {
            return;
        }
        let mut touched: Vec<Arc<str>> = Vec::new();
        let mut overflowed = 0u64;
        let mut dropped = Vec::new();
        for (expiration, attempts) in batch {
            let namespace = expiration.namespace.clone();
            if touched.last() != Some(&namespace) && !touched.contains(&namespace) {
                touched.push(namespace.clone());
            }
            let expiration = Arc::new(expiration);
            let copy = Delivered {
                delivery_id: 0,
                expiration: expiration.clone(),
                attempt: 1,
            };
            if self.buffer_full(&namespace) {
                // Subscribers with room may make some (auto-ack ones settle as they take).
                self.dispatch(&namespace);
            }
            let full = self.buffer_full(&namespace);
            let verdict = self
                .config
                .verdict(attempts, full, expiration.over_memory_budget);
            let queue = self.queue(&namespace);
            queue.copy_to_observers(&copy);
            match verdict {
                Some(reason) => {
                    // Out of attempts: delivered that often before a restart (or a crash at
                    // each delivery). Otherwise never delivered, for want of room.
                    overflowed += u64::from(reason != DeadReason::AttemptsSpent);
                    let dead = Dead {
                        id: 0,
                        attempts: reason.attempts_shown(attempts),
                        expiration,
                        reason: reason.describe(),
                    };
                    self.bury(&namespace, dead, &mut dropped);
                }
                None => {
                    queue.waiting.push_back(Waiting {
                        expiration,
                        attempts,
                    });
                    self.budget.hold();
                    self.metrics.delivery_buffered.inc();
                }
            }
        }
        if overflowed > 0 {
            warn!(
                overflowed,
                max_buffered = self.config.buffer_capacity,
                max_buffered_total = self.config.buffered_total,
                buffered_total = self.budget.held(),
                "delivery buffer full: expirations moved to the dead list"
            );
        }
        self.journal_settled(&dropped, None);
        for namespace in touched {
            self.dispatch(&namespace);
        }
    }

    /// No room for one more waiting expiration: in the namespace's buffer, or across all.
    pub(super) fn buffer_full(&self, namespace: &str) -> bool {
        let waiting = self
            .namespaces
            .get(namespace)
            .map_or(0, |queue| queue.waiting.len());
        waiting >= self.config.buffer_capacity || !self.budget.has_room()
    }
}
