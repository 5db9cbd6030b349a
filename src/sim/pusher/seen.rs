//! The pusher as the harness's checks see it: the head-of-line state, and what it holds
//! for a failure's message.

use super::{SimPusher, Stage, MAX_IN_FLIGHT};

impl SimPusher {
    /// What the pusher holds, for a failure's message.
    pub(crate) fn describe(&self) -> String {
        let hands: Vec<String> = self
            .in_hand
            .values()
            .map(|hand| {
                format!(
                    "{:x}:{:?}/{:?}/ext={}/fresh={:?}/attempt={}/unreached={}",
                    hand.delivered.delivery_id,
                    hand.stage,
                    hand.admission,
                    hand.extending,
                    hand.fresh_key,
                    hand.delivered.attempt,
                    hand.unreached
                )
            })
            .collect();
        format!(
            "pushing={} circuit={} asked={} paused={} subscribed={} in hand: {hands:?}",
            self.pushing,
            self.circuit.describe(),
            self.asked.len(),
            self.paused,
            self.subscription.is_some()
        )
    }

    /// The head-of-line state at `now`: the window is full and one of its places is held
    /// by an expiration waiting out its own failure, or one that failed before waiting
    /// for an open circuit, so the expirations behind it wait for another's failure.
    /// Never so with the real rules: a failed push is handed back released, and one that
    /// failed before meets an open circuit only to be given back for later.
    pub(crate) fn blocked_by_a_failure(&self, now: u64) -> bool {
        let circuit_open = self.circuit.gauge_value() != 0;
        self.subscription.is_some()
            && self.in_hand.len() >= MAX_IN_FLIGHT * 2
            && self.in_hand.values().any(|hand| {
                let Stage::Waiting { until } = hand.stage else {
                    return false;
                };
                let failed_before = hand.delivered.attempt > 1 || hand.unreached > 0;
                let waits_for_the_circuit =
                    circuit_open && failed_before && hand.admission.is_none() && until <= now;
                hand.held_after_own_failure || waits_for_the_circuit
            })
    }
}
