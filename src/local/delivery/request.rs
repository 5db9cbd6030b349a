//! What the delivery task is sent: by its handle (fired expirations, subscriptions, acks,
//! the dead list, redrives, shutdown) and by each subscriber's stream (taken, or gone).
//! Everything reaches the task through this one channel, so the task alone owns the queues.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use crate::domain::{
    AckOutcome, DeadList, Delivered, FiredRound, RedriveOutcome, SubscribeOptions, SubscriberRules,
};

/// A message to the delivery task, handled in the order sent.
pub(super) enum Request {
    Fired(Vec<FiredRound>),
    Subscribe {
        options: SubscribeOptions,
        rules: SubscriberRules,
        id: u64,
        sender: mpsc::Sender<Delivered>,
    },
    /// A subscriber's stream is gone; `never_taken` are the deliveries still in its
    /// buffer, which no client saw (their attempts are refunded).
    Unsubscribe {
        namespace: Arc<str>,
        id: u64,
        never_taken: Vec<u64>,
    },
    /// A subscriber's stream took one delivery from its buffer, making room.
    Pulled {
        namespace: Arc<str>,
        id: u64,
    },
    Ack {
        namespace: String,
        delivery_ids: Vec<u64>,
        reply: oneshot::Sender<AckOutcome>,
    },
    /// Moves an in-flight delivery's ack deadline to `after` from now.
    RetryLater {
        namespace: String,
        delivery_id: u64,
        after: std::time::Duration,
        hold: crate::domain::Hold,
        reply: oneshot::Sender<bool>,
    },
    /// Hands back an in-flight delivery that never reached its client, its attempt
    /// refunded (see [`crate::domain::Expirations::give_back`]).
    GiveBack {
        namespace: String,
        delivery_id: u64,
        when: crate::domain::GiveBack,
        reply: oneshot::Sender<bool>,
    },
    Dead {
        /// None: every namespace.
        namespace: Option<String>,
        reply: oneshot::Sender<DeadList>,
    },
    Redrive {
        namespace: String,
        /// None: every dead expiration of the namespace.
        ids: Option<Vec<u64>>,
        reply: oneshot::Sender<RedriveOutcome>,
    },
    /// How many expirations of each namespace wait in its buffer.
    Waiting {
        namespaces: Vec<String>,
        reply: oneshot::Sender<Vec<u64>>,
    },
    /// Answers once everything asked before is written (see
    /// [`crate::domain::Expirations::recorded`]).
    Recorded(oneshot::Sender<()>),
    Shutdown,
    /// Stops journaling (the store is closing) and confirms.
    Close(oneshot::Sender<()>),
}
