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

    /// `held` was given back at `now`, never sent: it may come again from `again_at` (at
    /// once, or after the wait it was given back for), and as the attempt it was (its
    /// attempt refunded, and recorded so: a crash after the refund is durable counts from
    /// it), never lower.
    pub(crate) fn given_back(&mut self, held: &mut Held, now: u64, again_at: u64) {
        self.claim_moved(held, again_at);
        let Some(firing) = self.firings.get_mut(&held.firing) else {
            return;
        };
        if let Some(latest) = firing.latest.as_mut() {
            if latest.delivery_id == held.delivery_id && latest.boot == held.boot {
                latest.attempt = latest.attempt.saturating_sub(1);
                firing.attempts.push((latest.attempt, now));
            }
        }
    }

    /// An ack of `held` was sent and the process ended before it was answered: each may
    /// be settled, or come again.
    pub(crate) fn ack_in_doubt(&mut self, held: &[Held]) {
        for delivery in held {
            let Some(firing) = self.firings.get_mut(&delivery.firing) else {
                continue;
            };
            let current = firing
                .latest
                .is_some_and(|latest| latest.delivery_id == delivery.delivery_id);
            if current {
                firing.maybe_settled = true;
            }
        }
    }

    /// The expirations of `namespace` delivered and neither acknowledged nor dead (their
    /// attempts used up, counting one unseen per process ended since).
    pub(crate) fn unsettled_in(&self, namespace: &str, max_attempts: u32) -> Vec<(u64, u64)> {
        self.firings
            .iter()
            .filter(|(_, firing)| firing.namespace.as_deref() == Some(namespace))
            .filter(|(key, _)| self.unsettled(**key, max_attempts).is_some())
            .map(|(key, _)| *key)
            .collect()
    }

    /// Nothing lost: each of `keys` is acknowledged or dead.
    pub(crate) fn check_none_lost(
        &self,
        keys: &[(u64, u64)],
        max_attempts: u32,
    ) -> Result<(), Violation> {
        match keys
            .iter()
            .find_map(|key| self.unsettled(*key, max_attempts).map(|attempt| (key, attempt)))
        {
            None => Ok(()),
            Some((key, attempt)) => Err(Violation(format!(
                "{:016x}/{} (last delivered as attempt {attempt}) was neither acknowledged nor dead at the end",
                key.0, key.1
            ))),
        }
    }

    /// The last attempt of `key` if it is delivered, not acknowledged (nor maybe, its
    /// ack's record in a power cut's reach) and not dead.
    pub(crate) fn unsettled(&self, key: (u64, u64), max_attempts: u32) -> Option<u32> {
        let firing = self.firings.get(&key)?;
        let latest = firing.latest?;
        let dead = latest.attempt.saturating_add(firing.ends_since) >= max_attempts;
        let settled = firing.settled_at.is_some() || firing.maybe_settled;
        (!settled && !dead).then_some(latest.attempt)
    }
}
