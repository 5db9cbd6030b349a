//! What bounds delivery, in either backend: how many expirations may wait, how many dead
//! ones are kept, how often one is delivered before it is dead, and what a subscriber's
//! rules are decided from; and the verdict on an expiration that cannot be delivered,
//! decided here once: the local backend applies [`DeliveryConfig::verdict`] as it is, the
//! replicas' SQL applies [`DeliveryConfig::has_attempts_left`] through one fragment
//! (`attempts_left!` in `cluster/delivery`), and `tests/dead_verdict.rs` holds the two to
//! the same outcome of one conversation.

use super::subscriber::SubscriberDefaults;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeliveryConfig {
    /// Expirations that may wait for a subscriber, per namespace.
    pub buffer_capacity: usize,
    /// Dead expirations kept per namespace.
    pub dead_capacity: usize,
    /// Expirations fired and not yet settled (waiting or in flight), all namespaces.
    pub buffered_total: usize,
    /// Dead expirations kept, all namespaces.
    pub dead_total: usize,
    /// What a subscriber's rules are decided from (see [`super::subscriber::SubscribeOptions::rules`]).
    pub subscriber: SubscriberDefaults,
    /// Deliveries of one expiration before it is declared dead.
    pub max_attempts: u32,
}

impl DeliveryConfig {
    /// The built-in bounds: what `Default` gives, and what tickd's flags default to (their
    /// `default_value_t` reads these), written nowhere else.
    pub const DEFAULT: Self = Self {
        buffer_capacity: 100_000,
        dead_capacity: 10_000,
        buffered_total: 1_000_000,
        dead_total: 100_000,
        subscriber: SubscriberDefaults::DEFAULT,
        max_attempts: 5,
    };

    /// Whether an expiration delivered `attempts` times may be delivered again: below
    /// `max_attempts`. An expiration at or past it is dead once its last delivery's ack
    /// deadline has passed.
    pub fn has_attempts_left(&self, attempts: u32) -> bool {
        attempts < self.max_attempts
    }

    /// The verdict on an expiration as it comes to delivery (just fired, or recovered with
    /// the `attempts` it had, or taken back from a subscriber): dead, and why, or None, to
    /// wait for a subscriber. Out of attempts comes first (it counts what happened); then
    /// a full buffer (the namespace's, or the one across namespaces); then a full memory
    /// budget (a repeating timer's firing, which needs memory of its own).
    pub fn verdict(
        &self,
        attempts: u32,
        buffer_full: bool,
        over_memory_budget: bool,
    ) -> Option<DeadReason> {
        if !self.has_attempts_left(attempts) {
            Some(DeadReason::AttemptsSpent)
        } else if buffer_full {
            Some(DeadReason::BufferFull)
        } else if over_memory_budget {
            Some(DeadReason::MemoryFull)
        } else {
            None
        }
    }
}

impl Default for DeliveryConfig {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Why an expiration is dead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadReason {
    /// Delivered `max_attempts` times without an ack.
    AttemptsSpent,
    /// Fired while the buffer was full: never delivered.
    BufferFull,
    /// Fired while the memory budget was full: never delivered.
    MemoryFull,
}

impl DeadReason {
    /// As the dead list gives it, on either backend.
    pub const fn describe(self) -> &'static str {
        match self {
            DeadReason::AttemptsSpent => "max delivery attempts reached without an ack",
            DeadReason::BufferFull => "delivery buffer full",
            DeadReason::MemoryFull => "memory budget full",
        }
    }

    /// The attempts a dead expiration shows: those it had, or none when it was never
    /// delivered.
    pub const fn attempts_shown(self, attempts: u32) -> u32 {
        match self {
            DeadReason::AttemptsSpent => attempts,
            DeadReason::BufferFull | DeadReason::MemoryFull => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_spent_outweighs_a_full_buffer_which_outweighs_full_memory() {
        let config = DeliveryConfig {
            max_attempts: 3,
            ..DeliveryConfig::DEFAULT
        };
        assert_eq!(config.verdict(2, false, false), None);
        assert_eq!(
            config.verdict(3, false, false),
            Some(DeadReason::AttemptsSpent)
        );
        assert_eq!(
            config.verdict(3, true, true),
            Some(DeadReason::AttemptsSpent)
        );
        assert_eq!(config.verdict(0, true, true), Some(DeadReason::BufferFull));
        assert_eq!(config.verdict(0, false, true), Some(DeadReason::MemoryFull));
        assert!(config.has_attempts_left(2) && !config.has_attempts_left(3));
    }
}
