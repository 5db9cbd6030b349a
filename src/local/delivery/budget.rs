//! The delivery task's bounds across namespaces, which keep its memory independent of how
//! many namespaces there are: expirations held for delivery (`--max-buffered-total`) and
//! dead expirations kept (`--max-dead-total`, the oldest across namespaces dropped first).
//!
//! Plain counting, no queues: [`super::task`] asks and reports; the expirations themselves
//! stay in their namespaces' queues.

use std::collections::BTreeMap;
use std::sync::Arc;

pub(super) struct Budget {
    /// Expirations fired and neither settled nor dead: waiting for a subscriber or in
    /// flight to one. Counting both means a redelivery, which moves an expiration from in
    /// flight back to waiting, can never take the total past the bound.
    held: usize,
    max_held: usize,
    /// The namespace of every dead expiration kept, by its burial number: the first entry
    /// is the oldest across namespaces.
    dead: BTreeMap<u64, Arc<str>>,
    max_dead: usize,
    next_seq: u64,
}

impl Budget {
    /// `first_seq`: the first burial number, which names dead expirations to Redrive and
    /// must not repeat across boots (see [`super::ids`]).
    pub(super) fn new(max_held: usize, max_dead: usize, first_seq: u64) -> Self {
        Self {
            held: 0,
            max_held,
            dead: BTreeMap::new(),
            max_dead,
            next_seq: first_seq,
        }
    }

    /// Room for one more expiration to wait for delivery.
    pub(super) fn has_room(&self) -> bool {
        self.held < self.max_held
    }

    pub(super) fn held(&self) -> usize {
        self.held
    }

    pub(super) fn hold(&mut self) {
        self.held += 1;
    }

    /// Expirations settled (acknowledged, or handed to an auto-ack stream) or declared dead.
    pub(super) fn let_go(&mut self, count: usize) {
        debug_assert!(self.held >= count, "let go of more than was held");
        self.held -= count;
    }

    /// Numbers a new dead expiration of `namespace`.
    pub(super) fn bury(&mut self, namespace: &Arc<str>) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.dead.insert(seq, namespace.clone());
        seq
    }

    /// A dead expiration left its namespace's list.
    pub(super) fn unbury(&mut self, seq: u64) {
        self.dead.remove(&seq);
    }

    /// The oldest dead expiration, while more are kept than `--max-dead-total` allows;
    /// the caller drops it from its namespace's list (where it is the first).
    pub(super) fn oldest_beyond_bound(&mut self) -> Option<(u64, Arc<str>)> {
        (self.dead.len() > self.max_dead)
            .then(|| self.dead.pop_first())
            .flatten()
    }

    pub(super) fn dead(&self) -> usize {
        self.dead.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_dead_across_namespaces_goes_first() {
        let mut budget = Budget::new(2, 2, 0);
        let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
        let first = budget.bury(&a);
        let second = budget.bury(&b);
        assert_eq!(budget.oldest_beyond_bound(), None);
        let third = budget.bury(&b);
        assert_eq!(budget.oldest_beyond_bound(), Some((first, a.clone())));
        assert_eq!(budget.oldest_beyond_bound(), None);
        budget.unbury(second);
        assert_eq!(budget.dead(), 1);
        assert!(third > second);

        assert!(budget.has_room());
        budget.hold();
        budget.hold();
        assert!(!budget.has_room());
        budget.let_go(1);
        assert!(budget.has_room());
        assert_eq!(budget.held(), 1);
    }
}
