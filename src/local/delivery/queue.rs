//! One namespace's delivery state: fired expirations waiting for a subscriber, deliveries
//! awaiting an ack, the dead ones, and the subscribers sharing the namespace.
//!
//! Plain data, no tasks and no clock reads: [`super::task::Delivery`] drives it and keeps the ack
//! deadlines in its own wheel.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rustc_hash::FxHashMap;
use tokio::sync::mpsc;

use crate::domain::{Dead, DeadList, Delivered, Expiration};
use crate::wheel::Handle;

/// A dead expiration kept in its namespace's list, numbered in the order expirations died
/// across every namespace (see [`super::budget::Budget`]).
pub(super) struct Buried {
    pub(crate) seq: u64,
    pub(crate) dead: Dead,
}

/// An expiration waiting to be (re)delivered.
#[derive(Debug, Clone)]
pub(super) struct Waiting {
    pub(crate) expiration: Arc<Expiration>,
    /// Deliveries made so far.
    pub(crate) attempts: u32,
}

pub(super) struct InFlight {
    pub(crate) waiting: Waiting,
    /// The subscriber whose window it takes a place in; None once handed back to wait for
    /// its retry ([`crate::domain::Hold::Released`]), when it is no subscriber's.
    pub(crate) subscriber: Option<u64>,
    pub(crate) ack_deadline: Handle,
    /// Set once the delivery has left for its subscriber, when it waits for its attempt to
    /// be written first (None: it left at once). An ack deadline that passes before it has
    /// left starts again rather than taking it back: a slow disk is not a slow subscriber.
    pub(crate) left: Option<Arc<AtomicBool>>,
}

impl InFlight {
    /// Whether the delivery has reached its subscriber's stream.
    pub(crate) fn has_left(&self) -> bool {
        self.left
            .as_ref()
            .is_none_or(|left| left.load(Ordering::Acquire))
    }
}

pub(super) struct Subscriber {
    pub(crate) id: u64,
    pub(crate) sender: mpsc::Sender<Delivered>,
    pub(crate) unacked: usize,
    pub(crate) max_unacked: usize,
    pub(crate) ack_timeout: Duration,
    pub(crate) auto_ack: bool,
    /// Set once it gave a delivery back (a paused or stopping pusher): it is leaving, so
    /// nothing more is dispatched to it, not even what it gave back.
    pub(crate) leaving: bool,
}

impl Subscriber {
    /// Room means both: fewer unacked deliveries than the subscriber declared, and space in
    /// its stream's buffer (a delivery whose ack deadline passed may still sit there unread).
    /// For an auto-ack subscriber, `unacked` counts deliveries its stream has not pulled yet.
    fn has_room(&self) -> bool {
        !self.leaving && self.unacked < self.max_unacked && self.sender.capacity() > 0
    }
}

#[derive(Default)]
pub(super) struct NamespaceQueue {
    pub(crate) waiting: VecDeque<Waiting>,
    pub(crate) in_flight: FxHashMap<u64, InFlight>,
    pub(crate) subscribers: Vec<Subscriber>,
    pub(crate) observers: Vec<(u64, mpsc::Sender<Delivered>)>,
    /// Oldest first.
    pub(crate) dead: VecDeque<Buried>,
}

impl NamespaceQueue {
    /// The sharing subscriber with room that holds the fewest unacked deliveries.
    pub(crate) fn least_loaded(&self) -> Option<usize> {
        self.subscribers
            .iter()
            .enumerate()
            .filter(|(_, subscriber)| subscriber.has_room() && !subscriber.sender.is_closed())
            .min_by_key(|(_, subscriber)| subscriber.unacked)
            .map(|(index, _)| index)
    }

    pub(crate) fn subscriber_mut(&mut self, id: u64) -> Option<&mut Subscriber> {
        self.subscribers
            .iter_mut()
            .find(|subscriber| subscriber.id == id)
    }

    /// Copies to observers are best effort: an observer that does not keep up misses copies
    /// rather than holding memory or slowing the sharing subscribers.
    pub(crate) fn copy_to_observers(&mut self, delivered: &Delivered) {
        self.observers.retain(|(_, observer)| !observer.is_closed());
        for (_, observer) in &self.observers {
            // A full observer misses this copy; that is the observer contract.
            let _ = observer.try_send(delivered.clone());
        }
    }

    pub(crate) fn is_idle(&self) -> bool {
        self.waiting.is_empty()
            && self.in_flight.is_empty()
            && self.subscribers.is_empty()
            && self.observers.is_empty()
            && self.dead.is_empty()
    }
}

/// The dead expirations kept in `queues`, oldest first (by the order they died in).
pub(super) fn dead_list<'a>(queues: impl Iterator<Item = &'a NamespaceQueue>) -> DeadList {
    let mut buried: Vec<&Buried> = queues.flat_map(|queue| queue.dead.iter()).collect();
    buried.sort_unstable_by_key(|buried| buried.seq);
    DeadList {
        count: buried.len() as u64,
        dead: buried
            .into_iter()
            .map(|buried| buried.dead.clone())
            .collect(),
    }
}
