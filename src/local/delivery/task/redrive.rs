//! Redrive: dead expirations go back to delivery, as if they had just fired, once the
//! consumer that could not take them is fixed (an SQS redrive).
//!
//! A dead expiration was never settled in the log; its attempts were. Redrive records them
//! as 0 and answers once that is durable, so that a restart keeps it redriven rather than
//! dead again. Redriven ones wait in the namespace's buffer like newly
//! fired ones and count against its bounds; what finds no room stays dead and can be
//! redriven later. One call sends back at most [`MAX_REDRIVE`], as the replicated
//! backend does, so that both answer "all of them" the same way: in several calls.

use std::sync::Arc;

use rustc_hash::FxHashSet;
use tokio::sync::oneshot;

use super::journal::attempted;
use super::state::Delivery;
use crate::domain::{RedriveOutcome, MAX_REDRIVE};
use crate::local::delivery::log_waits::Answer;
use crate::local::delivery::queue::Waiting;
use crate::local::store::Batch;

impl Delivery {
    /// Moves the namespace's dead expirations named by `ids` (None: all of them), oldest
    /// first, back to the head of delivery, their attempts counted afresh; answers `reply`
    /// once that is in the log.
    pub(super) fn redrive(
        &mut self,
        namespace: &str,
        ids: Option<Vec<u64>>,
        reply: oneshot::Sender<RedriveOutcome>,
    ) {
        let Some((namespace, _)) = self.namespaces.get_key_value(namespace) else {
            let _ = reply.send(RedriveOutcome {
                redriven: 0,
                not_dead: ids.unwrap_or_default(),
            });
            return;
        };
        let namespace: Arc<str> = namespace.clone();
        let queue = self
            .namespaces
            .get_mut(&namespace)
            .expect("looked up above");
        let (mut chosen, not_dead) = match ids {
            None => (queue.dead.drain(..).collect::<Vec<_>>(), Vec::new()),
            Some(ids) => {
                let wanted: FxHashSet<u64> = ids.iter().copied().collect();
                let (chosen, kept): (Vec<_>, Vec<_>) = queue
                    .dead
                    .drain(..)
                    .partition(|buried| wanted.contains(&buried.dead.id));
                queue.dead.extend(kept);
                let found: FxHashSet<u64> = chosen.iter().map(|buried| buried.dead.id).collect();
                let not_dead = ids.into_iter().filter(|id| !found.contains(id)).collect();
                (chosen, not_dead)
            }
        };
        // Oldest first, at most MAX_REDRIVE, within the room the buffer has; the rest
        // stay dead, for the next call.
        chosen.sort_unstable_by_key(|buried| buried.seq);
        let mut redriven = 0;
        let mut left = Vec::new();
        let mut records = Batch::default();
        for buried in chosen {
            if redriven as usize >= MAX_REDRIVE || self.buffer_full(&namespace) {
                left.push(buried);
                continue;
            }
            self.budget.unbury(buried.seq);
            self.budget.hold();
            self.metrics.delivery_buffered.inc();
            records.record(&attempted(&buried.dead.expiration, 0));
            let queue = self.queue(&namespace);
            queue.waiting.push_back(Waiting {
                expiration: buried.dead.expiration,
                attempts: 0,
            });
            redriven += 1;
        }
        if !left.is_empty() {
            // Back in their place in the dead list, which stays ordered by death.
            let queue = self.queue(&namespace);
            queue.dead.extend(left);
            queue
                .dead
                .make_contiguous()
                .sort_unstable_by_key(|buried| buried.seq);
        }
        self.metrics.delivery_dead.set(self.budget.dead() as i64);
        // Recorded before any delivery of them is: their attempts from 0 precede them.
        let outcome = RedriveOutcome { redriven, not_dead };
        self.append_then(records, Some(Answer::Redriven(reply, outcome)));
        self.dispatch(&namespace);
    }
}
