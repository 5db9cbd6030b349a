//! The timers whose last push failed, as the circuit remembers them: a new firing of one
//! is judged as an expiration that failed before. A repeating timer whose payload the sink
//! cannot take fails at every firing, and each firing is a new expiration; without this,
//! each would count as one that has not failed, probe the circuit in preference, and wait
//! in the window for it, as many of them as the window holds.

use std::collections::{BTreeMap, HashMap};

/// How many failing timers are remembered at most; the longest unheard of is forgotten
/// first. A few pages of memory per sink, however many timers fail.
const REMEMBERED: usize = 4_096;

#[derive(Default)]
pub(super) struct FailedTimers {
    /// Timer (its hash, see `Judged`) to the order in which its last failure came.
    order_of: HashMap<u64, u64>,
    /// The same, by that order: the first is forgotten first.
    by_order: BTreeMap<u64, u64>,
    next_order: u64,
}

impl FailedTimers {
    pub(super) fn contains(&self, timer: u64) -> bool {
        self.order_of.contains_key(&timer)
    }

    /// A push of `timer` failed: it is remembered (as the latest), forgetting the oldest
    /// beyond [`REMEMBERED`].
    pub(super) fn failed(&mut self, timer: u64) {
        if let Some(order) = self.order_of.insert(timer, self.next_order) {
            self.by_order.remove(&order);
        }
        self.by_order.insert(self.next_order, timer);
        self.next_order += 1;
        while self.by_order.len() > REMEMBERED {
            let (_, oldest) = self.by_order.pop_first().expect("longer than the bound");
            self.order_of.remove(&oldest);
        }
        debug_assert_eq!(self.order_of.len(), self.by_order.len());
    }

    /// The sink answered a push of `timer`: it is forgotten.
    pub(super) fn answered(&mut self, timer: u64) {
        if let Some(order) = self.order_of.remove(&timer) {
            self.by_order.remove(&order);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timer_is_remembered_until_answered_and_the_oldest_goes_first_beyond_the_bound() {
        let mut failed = FailedTimers::default();
        failed.failed(1);
        failed.failed(2);
        failed.failed(1);
        assert!(failed.contains(1) && failed.contains(2));
        failed.answered(2);
        assert!(!failed.contains(2));
        for timer in 10..10 + REMEMBERED as u64 {
            failed.failed(timer);
        }
        assert!(!failed.contains(1), "the oldest is forgotten first");
        assert!(failed.contains(10) && failed.contains(9 + REMEMBERED as u64));
        assert_eq!(failed.order_of.len(), REMEMBERED);
    }
}
