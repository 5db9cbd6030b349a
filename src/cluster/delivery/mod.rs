//! Delivery from the shared database: subscribers on any replica share a namespace's
//! expirations, with the single node's guarantees.
//!
//! An expiration is a row of `tickd_expirations` from the moment it fires until it is
//! acknowledged. A subscriber's task claims rows for it (`FOR UPDATE SKIP LOCKED`, so two
//! subscribers never claim the same row) up to its `max_unacked`, stamping each claim with
//! the subscriber's name, the attempt number and the ack deadline. An Ack, on any replica,
//! marks the row acknowledged if that same attempt's deadline has not passed. A claim whose
//! deadline passed is claimed again by any subscriber, with the next attempt number: that
//! is redelivery, and it also covers a replica that died holding claims. A subscriber that
//! leaves hands its claims back at once. After `max_attempts` the row stays as dead and is
//! listed by Pending. The totals across namespaces are kept as on one node: expirations
//! fired beyond `--max-buffered-total` are recorded dead at once (by `firing`), dead ones
//! beyond `--max-dead-total` are trimmed oldest first, and Redrive sends back at most
//! [`MAX_REDRIVE`] a call.
//!
//! Observers take no part: each follows the namespace's rows in `seq` order and streams a
//! copy of each. While a namespace has an observer (registered in `tickd_observers`), an
//! ack marks its rows acknowledged instead of deleting them, so that the observer sees
//! them too; a trim every [`TRIM_INTERVAL`] deletes them after [`ACKED_RETENTION`], and
//! the dead beyond `--max-dead`. Namespaces nobody observes pay nothing for this. Copies are best-effort, as on one node: one whose firing committed
//! after a later-numbered one (two replicas firing at once) can be passed over.
//!
//! The firing replica hands what it fires to its own subscribers of the namespace
//! directly, claimed for them by the firing statement ([`direct`]); claims by subscribers'
//! tasks take the rest. Acks are group-committed ([`acks`]).
//!
//! Subscribers and observers wake on `tickd_fired` (sent by the firing statement for what
//! it left unclaimed), on acks made on this replica (a subscriber only if it was out of
//! room), and otherwise every [`POLL_INTERVAL`], which bounds how late a redelivery is.
//!
//! [`MAX_REDRIVE`]: crate::domain::MAX_REDRIVE
//! [`POLL_INTERVAL`]: wake::POLL_INTERVAL

/// The SQL condition of an expiration not under a live claim: never claimed, or its ack
/// deadline passed. One definition for what claims take and what counts as dead, which
/// must agree: a row is claimable again exactly when, out of attempts, it would be dead.
/// A macro, so that the statements built from it stay `&str` constants (`concat!`).
macro_rules! claim_lapsed {
    () => {
        "(claim_until IS NULL OR claim_until < clock_timestamp())"
    };
}

/// The SQL form of [`crate::domain::DeliveryConfig::has_attempts_left`], over a row's
/// `attempts`, with `$max` the parameter holding `--max-attempts`: the one rule for "out of
/// attempts" that every statement here applies (`attempts_spent!` is its negation), so
/// that replicas and one node decide alike (`tests/dead_verdict.rs`). A macro, as
/// [`claim_lapsed`] is.
macro_rules! attempts_left {
    ($max:literal) => {
        concat!("attempts < ", $max)
    };
}

pub(crate) use attempts_left;

/// Not [`attempts_left`]: delivered `--max-attempts` times (`$max`) or more.
macro_rules! attempts_spent {
    ($max:literal) => {
        concat!("NOT (", attempts_left!($max), ")")
    };
}

mod acks;
mod charged;
mod cluster_deliveries;
mod dead;
mod direct;
mod observer;
mod rows;
mod slot;
mod subscriber;
mod trim;
mod wake;

pub use self::cluster_deliveries::ClusterDeliveries;
pub(crate) use self::dead::{buffered, OVERFLOWED_ATTEMPTS};
pub(crate) use self::direct::{Assignment, DirectDelivery};

/// The query that picks the rows a subscriber claims, for the test that checks that a
/// claim does not walk the dead list (`tests/replica_plans.rs`): not part of the crate's
/// interface.
#[doc(hidden)]
pub const CLAIMABLE_STATEMENT: &str = subscriber::CLAIMABLE;

/// The ack statement's text, for the test that checks the plan a replica keeps of it
/// (`tests/replica_plans.rs`): not part of the crate's interface.
#[doc(hidden)]
pub const ACK_STATEMENT: &str = acks::ACK;
