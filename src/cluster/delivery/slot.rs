//! A subscriber's room on this replica: what it may still be sent out of `max_unacked`,
//! kept for both paths that deliver to it (direct delivery by the firing, and its own
//! claims), and this replica's subscribers by namespace, which direct delivery chooses
//! from.
//!
//! `max_unacked` is kept by each subscriber's [`Slot`]: the deliveries it holds unacked
//! (by either path, forgotten when acked on this replica or when their ack deadline
//! passes) and those reserved for a statement under way. A delivery acked on another
//! replica is counted until its deadline, which can only leave less room, never more
//! than the database's own count allows.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;
use tokio::sync::mpsc;

use crate::domain::Delivered;

/// One subscriber of this replica, as direct delivery and its own claims see it.
pub(crate) struct Slot {
    /// What its claims are stamped with.
    pub(super) name: String,
    pub(super) ack_timeout: Duration,
    max_unacked: usize,
    /// Direct delivery passes over auto-ack subscribers (their claims take the claim
    /// path, which settles them once sent).
    pub(super) direct: bool,
    pub(super) sender: mpsc::Sender<Delivered>,
    held: Mutex<Held>,
    /// Set when either path found it without room for what there was: an ack of one of
    /// its deliveries on this replica then wakes it to claim (and only then, so that
    /// acks do not set every subscriber claiming for nothing).
    wants_room: AtomicBool,
}

/// A subscriber's deliveries not yet known to be settled, and its reservations.
#[derive(Default)]
struct Held {
    /// Delivery id and the ack deadline after which it no longer counts.
    unacked: FxHashMap<u64, Instant>,
    reserved: usize,
}

impl Held {
    /// The room direct delivery has out of `max_unacked`: what is neither held (its ack
    /// deadline not passed) nor reserved by either path.
    fn direct_room(&mut self, max_unacked: usize) -> usize {
        let now = Instant::now();
        self.unacked.retain(|_, deadline| *deadline > now);
        max_unacked.saturating_sub(self.unacked.len() + self.reserved)
    }
}

impl Slot {
    pub(super) fn new(
        name: String,
        ack_timeout: Duration,
        max_unacked: usize,
        direct: bool,
        sender: mpsc::Sender<Delivered>,
    ) -> Self {
        Self {
            name,
            ack_timeout,
            max_unacked,
            direct,
            sender,
            held: Mutex::default(),
            wants_room: AtomicBool::new(false),
        }
    }

    /// Reserves room for up to `wanted` deliveries by direct delivery; how many it got.
    /// The deliveries held count against it: the database's count of live claims cannot
    /// be read before the firing statement claims.
    pub(super) fn reserve(&self, wanted: usize) -> usize {
        let mut held = self.lock();
        let granted = wanted
            .min(held.direct_room(self.max_unacked))
            .min(self.sender.capacity());
        held.reserved += granted;
        if granted < wanted {
            self.wants_room.store(true, Ordering::Relaxed);
        }
        granted
    }

    /// Reserves room for up to `wanted` deliveries by a claim statement, which counts
    /// the subscriber's live claims itself: only what direct delivery has reserved for a
    /// statement under way (not yet in the database) counts against it here, so that
    /// acks made on other replicas (unseen here) leave room as they should.
    ///
    /// A claim for a subscriber that direct delivery serves gets at most half of the room
    /// direct delivery sees (rounded up), so that direct delivery keeps the other half
    /// while the claim statement runs; a claim that fills its share claims again. Where
    /// direct delivery sees no room, it has nothing to lose, and the claim may take what
    /// the database allows. Reserving the whole window instead (20,000 in the benchmark)
    /// for the claim's 5-60 ms left firings on this replica no room: they were recorded
    /// unclaimed, and 2-3% of expirations at 10,000/s took the slower path (a
    /// notification, then a claim statement), which set the p99 lateness.
    pub(super) fn reserve_for_claim(&self, wanted: usize) -> usize {
        let mut held = self.lock();
        let share = match held.direct_room(self.max_unacked) {
            room if self.direct && room > 0 => room.div_ceil(2),
            _ => self.max_unacked.saturating_sub(held.reserved),
        };
        let granted = wanted.min(share);
        held.reserved += granted;
        granted
    }

    /// Notes that the subscriber's claims stopped for want of room (its stream full, or
    /// `max_unacked` reached): the next ack here wakes it.
    pub(super) fn wants_room(&self) {
        self.wants_room.store(true, Ordering::Relaxed);
    }

    /// Whether it holds `max_unacked` deliveries, as far as this replica knows.
    pub(super) fn is_full(&self) -> bool {
        self.lock().unacked.len() >= self.max_unacked
    }

    /// Gives back `reserved`, and counts `delivered` as held until their ack deadline.
    pub(super) fn settle_reservation(&self, reserved: usize, delivered: &[u64]) {
        let deadline = Instant::now() + self.ack_timeout;
        let mut held = self.lock();
        held.reserved = held.reserved.saturating_sub(reserved);
        for &id in delivered {
            held.unacked.insert(id, deadline);
        }
    }

    /// A held delivery's claim now lasts `until` (see [`LocalSubscribers::extended`]).
    fn extended(&self, delivery_id: u64, until: Instant) {
        if let Some(deadline) = self.lock().unacked.get_mut(&delivery_id) {
            *deadline = (*deadline).max(until);
        }
    }

    fn acknowledged(&self, delivery_ids: &[u64]) {
        let mut held = self.lock();
        for id in delivery_ids {
            held.unacked.remove(id);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// This replica's subscribers, by namespace.
#[derive(Clone, Default)]
pub(crate) struct LocalSubscribers {
    namespaces: Arc<Mutex<FxHashMap<String, Vec<Arc<Slot>>>>>,
}

impl LocalSubscribers {
    /// Adds a subscriber; it stays until the guard is dropped.
    pub(super) fn join(&self, namespace: &str, slot: Arc<Slot>) -> Membership {
        self.lock()
            .entry(namespace.to_owned())
            .or_default()
            .push(slot.clone());
        Membership {
            subscribers: self.clone(),
            namespace: namespace.to_owned(),
            slot,
        }
    }

    /// A delivery's claim was moved to end `until` (a sink holds it, or handed it back
    /// to be retried then): whichever subscriber here holds it counts it in its window
    /// until then, as the database does. Without this the window would forget it at its
    /// first deadline, and a sink that is down would be handed more than its window.
    pub(super) fn extended(&self, namespace: &str, delivery_id: u64, until: Instant) {
        if let Some(slots) = self.lock().get(namespace) {
            for slot in slots {
                slot.extended(delivery_id, until);
            }
        }
    }

    /// Forgets acknowledged deliveries of `namespace` (they leave room); whether one of
    /// its subscribers was waiting for room (and is to be woken).
    pub(super) fn acknowledged(&self, namespace: &str, delivery_ids: &[u64]) -> bool {
        if delivery_ids.is_empty() {
            return false;
        }
        let mut waiting = false;
        if let Some(slots) = self.lock().get(namespace) {
            for slot in slots {
                slot.acknowledged(delivery_ids);
                waiting |= slot.wants_room.swap(false, Ordering::Relaxed);
            }
        }
        waiting
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, FxHashMap<String, Vec<Arc<Slot>>>> {
        self.namespaces
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A subscriber's place among [`LocalSubscribers`], left when dropped.
pub(super) struct Membership {
    subscribers: LocalSubscribers,
    namespace: String,
    slot: Arc<Slot>,
}

impl Membership {
    pub(super) fn slot(&self) -> &Arc<Slot> {
        &self.slot
    }

    /// Leaves (again: nothing).
    pub(super) fn leave(&self) {
        let mut namespaces = self.subscribers.lock();
        if let Some(slots) = namespaces.get_mut(&self.namespace) {
            slots.retain(|slot| !Arc::ptr_eq(slot, &self.slot));
            if slots.is_empty() {
                namespaces.remove(&self.namespace);
            }
        }
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.leave();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(max_unacked: usize, stream: usize) -> (Arc<Slot>, mpsc::Receiver<Delivered>) {
        let (sender, receiver) = mpsc::channel(stream);
        let slot = Slot::new(
            "s".into(),
            Duration::from_secs(60),
            max_unacked,
            true,
            sender,
        );
        (Arc::new(slot), receiver)
    }

    /// Direct delivery counts what the subscriber holds and what is reserved by either
    /// path; a claim counts only the reservations (the database counts the rest).
    #[test]
    fn room_is_what_neither_path_holds_or_has_reserved() {
        let (slot, _stream) = slot(5, 100);
        assert_eq!(slot.reserve(3), 3);
        slot.settle_reservation(3, &[1, 2]);
        // Two held, nothing reserved: three left for direct delivery.
        assert_eq!(slot.reserve(10), 3);
        // A claim under way sees the three reserved, not the two held (direct delivery,
        // with none left, has nothing to keep).
        assert_eq!(slot.reserve_for_claim(10), 2);
        slot.settle_reservation(3, &[]);
        slot.settle_reservation(2, &[]);
        slot.acknowledged(&[1]);
        assert_eq!(slot.reserve(10), 4);
    }

    /// A claim under way leaves direct delivery half of the room it has, however much
    /// the claim asks for, and however many deliveries the subscriber holds already.
    #[test]
    fn a_claim_under_way_leaves_direct_delivery_room() {
        let (shared, _stream) = slot(1_000, 1_000);
        assert_eq!(shared.reserve_for_claim(1_000), 500);
        assert_eq!(
            shared.reserve(1_000),
            500,
            "firings meanwhile are delivered directly"
        );
        let ids: Vec<u64> = (0..600).collect();
        shared.settle_reservation(500, &ids[..500]);
        shared.settle_reservation(500, &ids[500..]);
        // 600 of 1,000 held: the next claim takes half of the 400 left, not of 1,000.
        assert_eq!(shared.reserve_for_claim(1_000), 200);
        assert_eq!(shared.reserve(1_000), 200);
        let (single, _stream) = slot(1, 10);
        assert_eq!(
            single.reserve_for_claim(10),
            1,
            "a window of one is the claim's"
        );
    }

    /// Where direct delivery has no room (the subscriber holds its window, as far as
    /// this replica knows), a claim may take what the database allows: acks made on
    /// other replicas are seen only there.
    #[test]
    fn a_claim_beyond_what_direct_delivery_sees_is_the_databases_to_bound() {
        let (shared, _stream) = slot(10, 100);
        assert_eq!(shared.reserve(10), 10);
        shared.settle_reservation(10, &(0..10).collect::<Vec<u64>>());
        assert_eq!(shared.reserve(1), 0);
        assert_eq!(shared.reserve_for_claim(10), 10);
    }

    /// Subscribers that acknowledge on sending are never served directly: their claims
    /// are not halved.
    #[test]
    fn auto_ack_subscribers_claim_their_whole_room() {
        let (sender, _stream) = mpsc::channel(100);
        let auto_ack = Slot::new("a".into(), Duration::from_secs(60), 100, false, sender);
        assert_eq!(auto_ack.reserve_for_claim(100), 100);
    }

    /// A delivery whose claim was moved on stays in the window until its new deadline,
    /// not its first one: a sink holding deliveries while it is down gets no more.
    #[test]
    fn an_extended_claim_keeps_its_room_past_its_first_deadline() {
        let subscribers = LocalSubscribers::default();
        let (sender, _stream) = mpsc::channel(10);
        // An ack timeout of zero: each delivery's first deadline has passed by the
        // next look.
        let slot = Arc::new(Slot::new("s".into(), Duration::ZERO, 2, true, sender));
        let _membership = subscribers.join("n", slot.clone());
        assert_eq!(slot.reserve(2), 2);
        slot.settle_reservation(2, &[1, 2]);
        subscribers.extended("n", 1, Instant::now() + Duration::from_secs(60));
        subscribers.extended("other", 2, Instant::now() + Duration::from_secs(60));
        assert_eq!(
            slot.reserve(2),
            1,
            "1 is still held; 2's deadline passed (its extension was another namespace's)"
        );
    }

    /// A stream smaller than `max_unacked` bounds direct delivery too.
    #[test]
    fn direct_delivery_never_overfills_the_stream() {
        let (slot, _stream) = slot(100, 2);
        assert_eq!(slot.reserve(10), 2);
    }

    /// An ack here wakes the namespace's subscribers only when one of them ran out of
    /// room, once; the membership ends with its guard.
    #[test]
    fn acks_wake_only_subscribers_out_of_room() {
        let subscribers = LocalSubscribers::default();
        let (slot, _stream) = slot(1, 10);
        let membership = subscribers.join("n", slot.clone());
        assert_eq!(slot.reserve(1), 1);
        slot.settle_reservation(1, &[7]);
        assert!(!subscribers.acknowledged("n", &[7]), "it had room");
        assert_eq!(slot.reserve(1), 1);
        slot.settle_reservation(1, &[8]);
        assert_eq!(slot.reserve(1), 0, "full");
        assert!(subscribers.acknowledged("n", &[8]));
        assert!(!subscribers.acknowledged("n", &[9]), "woken once");
        drop(membership);
        assert!(subscribers.lock().get("n").is_none());
    }
}
