//! Direct delivery: the firing replica hands what it fires straight to its own
//! subscribers of the namespace, claimed for them by the firing statement itself.
//!
//! Claiming through the database costs a notification, a claim statement (a round trip
//! and a commit) per subscriber woken, and the wait for both: most of an expiration's
//! lateness in replicated mode. When the replica that fires a timer has a subscriber of
//! its namespace with room, the firing statement records the expiration already claimed
//! for that subscriber (first attempt, its ack deadline), exactly as a claim would have
//! left the row, and the replica puts it in the subscriber's stream once that statement
//! has committed. Everything after (acks on any replica, redelivery when the ack
//! deadline passes, handing back) works on the row as for any claim. What no local
//! subscriber has room for is recorded unclaimed, and subscribers anywhere claim it.
//!
//! The lease: the firing statement checks, in its transaction, that the replica holds
//! every partition it fires from, and reports how long the shortest of those leases had
//! left. The replica hands the expirations over only if the statement's answer came back
//! within that time, so it never delivers on the strength of a lease it can no longer
//! prove (a replica cut off from the database longer than its lease, then answered, does
//! not deliver: the claims return at their ack deadline, to a subscriber of any replica).
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
use tokio_postgres::Row;
use tracing::warn;

use super::charged::send_charged;
use super::{delivery_id, expiration_at};
use crate::budget::MemoryBudget;
use crate::cluster::notifications::{Wakeups, FIRED_CHANNEL};
use crate::cluster::{ClusterError, Connections};
use crate::domain::Delivered;
use crate::metrics::Metrics;

/// One subscriber of this replica, as direct delivery and its own claims see it.
pub(crate) struct Slot {
    /// What its claims are stamped with.
    pub(super) name: String,
    pub(super) ack_timeout: Duration,
    max_unacked: usize,
    /// Direct delivery passes over auto-ack subscribers (their claims take the claim
    /// path, which settles them once sent).
    direct: bool,
    sender: mpsc::Sender<Delivered>,
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
    fn reserve(&self, wanted: usize) -> usize {
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

    fn lock(&self) -> std::sync::MutexGuard<'_, FxHashMap<String, Vec<Arc<Slot>>>> {
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

/// What the firing needs for direct delivery: the local subscribers, the memory budget
/// their streams are charged to, and the delivery metrics.
#[derive(Clone)]
pub(crate) struct DirectDelivery {
    pub(super) subscribers: LocalSubscribers,
    pub(super) memory: Arc<MemoryBudget>,
    pub(super) metrics: Arc<Metrics>,
    /// For the subscribers (here) of what was fired unclaimed.
    pub(super) wakeups: Wakeups,
    /// For giving back claims that could not be handed over.
    pub(super) connections: Connections,
}

impl DirectDelivery {
    /// Chooses a local subscriber with room for each of a batch's timers (`namespaces`,
    /// in batch order), reserving that room; `None` where there is none. A namespace's
    /// timers are spread over its subscribers, evenly while each has room.
    pub(crate) fn assign(&self, namespaces: &[&str]) -> Assignment {
        let mut assignment = Assignment {
            claimers: vec![None; namespaces.len()],
            reserved: Vec::new(),
            direct: self.clone(),
        };
        if self.memory.is_reached() {
            return assignment;
        }
        let mut wanted: FxHashMap<&str, Vec<usize>> = FxHashMap::default();
        for (at, namespace) in namespaces.iter().enumerate() {
            wanted.entry(namespace).or_default().push(at);
        }
        let subscribers = self.subscribers.lock();
        for (namespace, timers) in wanted {
            let Some(slots) = subscribers.get(namespace) else {
                continue;
            };
            let slots: Vec<&Arc<Slot>> = slots.iter().filter(|slot| slot.direct).collect();
            if slots.is_empty() {
                continue;
            }
            let share = timers.len().div_ceil(slots.len());
            let mut timers = timers.into_iter();
            // An even share from each first, then whatever room is left, in turn.
            for pass_share in [share, usize::MAX] {
                for slot in &slots {
                    let remaining = timers.len();
                    if remaining == 0 {
                        break;
                    }
                    let granted = slot.reserve(remaining.min(pass_share));
                    if granted == 0 {
                        continue;
                    }
                    assignment.reserved.push(((*slot).clone(), granted));
                    let index = assignment.reserved.len() - 1;
                    for at in timers.by_ref().take(granted) {
                        assignment.claimers[at] = Some(index);
                    }
                }
            }
        }
        assignment
    }
}

impl DirectDelivery {
    /// Hands what the firing statement claimed for subscribers here to them (see
    /// [`Assignment::hand_over`]); claims it could not hand over are given back, for any
    /// subscriber to claim, by a task of their own.
    pub(crate) fn deliver(
        &self,
        assignment: Assignment,
        rows: &[Row],
        first_column: usize,
        claimer_column: usize,
        lease_proved: bool,
    ) {
        let not_handed = assignment.hand_over(rows, first_column, claimer_column, lease_proved);
        if not_handed.is_empty() {
            return;
        }
        let connections = self.connections.clone();
        tokio::spawn(async move {
            if let Err(error) = give_back(&connections, not_handed).await {
                warn!(%error, "giving back undelivered claims failed; they return at their ack deadline");
            }
        });
    }

    /// Wakes this replica's subscribers of the namespaces (column 0 of `rows`) that had
    /// expirations recorded unclaimed (no claimer at `claimer_column`).
    pub(crate) fn wake_claimers(&self, rows: &[Row], claimer_column: usize) {
        let mut woken: Vec<&str> = Vec::new();
        for row in rows {
            if row.get::<_, Option<&str>>(claimer_column).is_none() {
                let namespace: &str = row.get(0);
                if !woken.contains(&namespace) {
                    woken.push(namespace);
                    self.wakeups.wake(namespace);
                }
            }
        }
    }
}

/// Ends the claims (subscriber name, `seq`, attempt) the firing made but could not hand over,
/// and wakes every replica's subscribers of their namespaces to claim them. The attempt
/// the firing counted is taken back: that delivery never left, so the next claim's is the
/// first (no client can hold an ack of the id it would have had).
async fn give_back(
    connections: &Connections,
    claims: Vec<(String, i64, i32)>,
) -> Result<(), ClusterError> {
    let mut names = Vec::with_capacity(claims.len());
    let mut seqs = Vec::with_capacity(claims.len());
    let mut attempts = Vec::with_capacity(claims.len());
    for (name, seq, attempt) in claims {
        names.push(name);
        seqs.push(seq);
        attempts.push(attempt);
    }
    connections
        .client()
        .await?
        .query(
            "WITH released AS (
                UPDATE tickd_expirations e
                SET claimed_by = NULL, claim_until = NULL, attempts = e.attempts - 1
                FROM unnest($1::TEXT[], $2::INT8[], $4::INT4[]) AS c(claimed_by, seq, attempts)
                WHERE e.seq = c.seq AND e.claimed_by = c.claimed_by
                  AND e.attempts = c.attempts AND e.acked_at IS NULL
                RETURNING e.namespace)
             SELECT pg_notify($3, namespace)::TEXT FROM (SELECT DISTINCT namespace FROM released) n",
            &[&names, &seqs, &FIRED_CHANNEL, &attempts],
        )
        .await
        .map_err(ClusterError::query("giving back undelivered claims"))?;
    Ok(())
}

/// The subscriber chosen for each timer of a batch, and the room reserved; the room is
/// given back when it is dropped, whatever became of the batch.
pub(crate) struct Assignment {
    /// Per timer, the index of its subscriber in `reserved`.
    claimers: Vec<Option<usize>>,
    reserved: Vec<(Arc<Slot>, usize)>,
    direct: DirectDelivery,
}

impl Assignment {
    /// Per timer, the name its expiration is claimed for (NULL: none), and the claim's
    /// length in milliseconds: the firing statement's parameters.
    pub(crate) fn claims(&self) -> (Vec<Option<&str>>, Vec<Option<i64>>) {
        self.claimers
            .iter()
            .map(|claimer| match claimer {
                Some(at) => {
                    let slot = &self.reserved[*at].0;
                    (
                        Some(slot.name.as_str()),
                        Some(slot.ack_timeout.as_millis() as i64),
                    )
                }
                None => (None, None),
            })
            .unzip()
    }

    /// Hands the expirations the firing statement claimed (`rows`, with the expiration's
    /// columns from `first_column` and the claimer's name at `claimer_column`) to their
    /// subscribers, if the statement's answer came within the lease (`lease_proved`).
    /// Returns those that could not be handed over (a stream closed or full meanwhile,
    /// or the lease not proved), by subscriber name: their claims are to be given back.
    fn hand_over(
        self,
        rows: &[Row],
        first_column: usize,
        claimer_column: usize,
        lease_proved: bool,
    ) -> Vec<(String, i64, i32)> {
        let by_name: FxHashMap<&str, &Arc<Slot>> = self
            .reserved
            .iter()
            .map(|(slot, _)| (slot.name.as_str(), slot))
            .collect();
        let mut delivered: FxHashMap<&str, Vec<u64>> = FxHashMap::default();
        let mut not_handed = Vec::new();
        for row in rows {
            let Some(claimer) = row.get::<_, Option<&str>>(claimer_column) else {
                continue;
            };
            let seq: i64 = row.get(first_column);
            let attempt: i32 = row.get(first_column + 1);
            let Some(slot) = by_name.get(claimer) else {
                continue;
            };
            let handed = lease_proved && {
                let delivery = Delivered {
                    delivery_id: delivery_id(seq, attempt),
                    expiration: Arc::new(expiration_at(row, first_column)),
                    attempt: attempt as u32,
                };
                send_charged(&slot.sender, &self.direct.memory, delivery)
            };
            if handed {
                self.direct.metrics.expirations_delivered.inc();
                delivered
                    .entry(claimer)
                    .or_default()
                    .push(delivery_id(seq, attempt));
            } else {
                not_handed.push((claimer.to_owned(), seq, attempt));
            }
        }
        if !lease_proved && !not_handed.is_empty() {
            warn!(
                expirations = not_handed.len(),
                "fired, but the lease could not be proved when the database answered: not delivered here"
            );
        }
        for (slot, reserved) in &self.reserved {
            let ids = delivered.remove(slot.name.as_str()).unwrap_or_default();
            slot.settle_reservation(*reserved, &ids);
        }
        // Nothing left to give back on drop.
        let mut this = self;
        this.reserved.clear();
        not_handed
    }
}

impl Drop for Assignment {
    fn drop(&mut self) {
        for (slot, reserved) in &self.reserved {
            slot.settle_reservation(*reserved, &[]);
        }
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
