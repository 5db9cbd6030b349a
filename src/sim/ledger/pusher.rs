//! The ledger's view of the pusher's hand-backs: a claim moved (a retry's delay, or a hold
//! kept), a delivery given back unsent with its attempt refunded, and, at the end, that
//! nothing the pusher took was lost: each expiration acknowledged, or dead.

use super::{Held, Ledger};
use crate::sim::model::Violation;

impl Held {
    pub(crate) fn delivery_id(&self) -> u64 {
        self.delivery_id
    }
}

impl Ledger {
    /// True if the expiration `key` was delivered before (and not forgotten since).
    pub(crate) fn seen(&self, key: (u64, u64)) -> bool {
        self.firings
            .get(&key)
            .is_some_and(|firing| firing.latest.is_some())
    }

    /// The backend answered that `held`'s claim now ends at `deadline` (a
    /// `retry_later`, released or kept): it may come again from then, not before.
    pub(crate) fn claim_moved(&mut self, held: &mut Held, deadline: u64) {
        held.receipt.ack_timeout = deadline.saturating_sub(held.receipt.at);
        let Some(firing) = self.firings.get_mut(&held.firing) else {
            return;
        };
        if let Some(latest) = firing.latest.as_mut() {
            if latest.delivery_id == held.delivery_id && latest.boot == held.boot {
                latest.receipt = held.receipt;
            }
        }
    }

    /// `held` was given back at `now`, never sent: it may come again at once, and as the
    /// attempt it was (its attempt refunded), never lower.
    pub(crate) fn given_back(&mut self, held: &mut Held, now: u64) {
        self.claim_moved(held, now);
        let Some(firing) = self.firings.get_mut(&held.firing) else {
            return;
        };
        if let Some(latest) = firing.latest.as_mut() {
            if latest.delivery_id == held.delivery_id && latest.boot == held.boot {
                latest.attempt = latest.attempt.saturating_sub(1);
            }
        }
    }

    /// True while an expiration of `namespace` was delivered and is neither acknowledged
    /// nor dead (its attempts used up, counting one unseen per process ended since).
    pub(crate) fn owes_in(&self, namespace: &str, max_attempts: u32) -> bool {
        self.unsettled_in(namespace, max_attempts).is_some()
    }

    /// Nothing lost: every expiration of `namespace` delivered is acknowledged or dead.
    pub(crate) fn check_none_lost(
        &self,
        namespace: &str,
        max_attempts: u32,
    ) -> Result<(), Violation> {
        match self.unsettled_in(namespace, max_attempts) {
            None => Ok(()),
            Some((key, attempt)) => Err(Violation(format!(
                "{:016x}/{} (last delivered as attempt {attempt}) was neither acknowledged nor dead at the end",
                key.0, key.1
            ))),
        }
    }

    fn unsettled_in(&self, namespace: &str, max_attempts: u32) -> Option<((u64, u64), u32)> {
        self.firings.iter().find_map(|(key, firing)| {
            let latest = firing.latest?;
            let dead = latest.attempt.saturating_add(firing.ends_since) >= max_attempts;
            (firing.namespace.as_deref() == Some(namespace) && firing.settled_at.is_none() && !dead)
                .then_some((*key, latest.attempt))
        })
    }
}
