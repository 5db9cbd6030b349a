//! What bounds delivery, in either backend: how many expirations may wait, how many dead
//! ones are kept, how often one is delivered before it is dead, and what a subscriber's
//! rules are decided from.

use super::subscriber::SubscriberDefaults;

#[derive(Debug, Clone, Copy)]
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

impl Default for DeliveryConfig {
    fn default() -> Self {
        Self {
            buffer_capacity: 100_000,
            dead_capacity: 10_000,
            buffered_total: 1_000_000,
            dead_total: 100_000,
            subscriber: SubscriberDefaults::default(),
            max_attempts: 5,
        }
    }
}
