//! A subscriber's rules: what its Subscribe asked for, and the values both backends apply,
//! decided here once from what it asked and the server's defaults and limits.

use std::time::Duration;

/// What a Subscribe call asks for, validated.
#[derive(Debug, Clone)]
pub struct SubscribeOptions {
    pub namespace: String,
    pub observer: bool,
    /// None: the server's default ([`SubscriberDefaults::ack_timeout`]).
    pub ack_timeout: Option<Duration>,
    /// None: the server's default, and never past its limit.
    pub max_unacked: Option<usize>,
    pub auto_ack: bool,
}

/// What a subscriber gets where its Subscribe leaves the choice to the server, and the
/// most it may ask for (`--ack-timeout`, `--max-unacked`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubscriberDefaults {
    pub ack_timeout: Duration,
    pub max_unacked: usize,
    /// The largest `max_unacked` a subscriber may ask for; more is lowered to it.
    pub max_unacked_limit: usize,
}

impl SubscriberDefaults {
    /// The built-in defaults: what `Default` gives, and what `--ack-timeout` and
    /// `--max-unacked` default to (the flags read these), written nowhere else.
    pub const DEFAULT: Self = Self {
        ack_timeout: Duration::from_secs(30),
        max_unacked: 1_000,
        max_unacked_limit: 100_000,
    };
}

impl Default for SubscriberDefaults {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// What a caller's zero asks for: the server's default. The API's numbers cannot say
/// "unset" (proto3 scalars are 0 when absent), so 0 (or a zero duration) leaves the
/// choice to the server, for every field that has a default; decided here only.
pub fn zero_is_the_default<T: Default + PartialEq>(asked: T) -> Option<T> {
    (asked != T::default()).then_some(asked)
}

/// A subscriber's rules as decided: each backend applies these and decides nothing of
/// its own, so a subscriber is treated alike on one node and on replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubscriberRules {
    /// How long each of its deliveries may go unacknowledged before it is delivered again.
    pub ack_timeout: Duration,
    /// How many deliveries it holds unacknowledged at most (at least 1).
    pub max_unacked: usize,
}

impl SubscribeOptions {
    /// The rules this subscriber is held to under `defaults`.
    pub fn rules(&self, defaults: &SubscriberDefaults) -> SubscriberRules {
        SubscriberRules {
            ack_timeout: self.ack_timeout.unwrap_or(defaults.ack_timeout),
            max_unacked: self
                .max_unacked
                .unwrap_or(defaults.max_unacked)
                .clamp(1, defaults.max_unacked_limit.max(1)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asking(ack_timeout: Option<Duration>, max_unacked: Option<usize>) -> SubscribeOptions {
        SubscribeOptions {
            namespace: "n".into(),
            observer: false,
            ack_timeout,
            max_unacked,
            auto_ack: false,
        }
    }

    #[test]
    fn what_a_subscriber_leaves_open_is_the_servers_default() {
        let defaults = SubscriberDefaults {
            ack_timeout: Duration::from_secs(7),
            max_unacked: 12,
            max_unacked_limit: 50,
        };
        let rules = asking(None, None).rules(&defaults);
        assert_eq!(rules.ack_timeout, Duration::from_secs(7));
        assert_eq!(rules.max_unacked, 12);
        let rules = asking(Some(Duration::from_millis(250)), Some(3)).rules(&defaults);
        assert_eq!(rules.ack_timeout, Duration::from_millis(250));
        assert_eq!(rules.max_unacked, 3);
    }

    #[test]
    fn a_window_is_at_least_one_and_at_most_the_limit() {
        let defaults = SubscriberDefaults {
            max_unacked_limit: 50,
            ..SubscriberDefaults::default()
        };
        assert_eq!(
            asking(None, Some(1_000_000)).rules(&defaults).max_unacked,
            50
        );
        assert_eq!(asking(None, Some(0)).rules(&defaults).max_unacked, 1);
    }
}
