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
//! How much each subscriber may still be sent is kept by its [`Slot`] (see `slot`).

use std::sync::Arc;

use rustc_hash::FxHashMap;
use tokio_postgres::Row;
use tracing::warn;

use super::charged::send_charged;
use super::rows::{delivery_id, expiration_at};
use super::slot::{LocalSubscribers, Slot};
use crate::budget::MemoryBudget;
use crate::cluster::connections::Connections;
use crate::cluster::error::ClusterError;
use crate::cluster::notifications::{Wakeups, FIRED_CHANNEL};
use crate::domain::Delivered;
use crate::metrics::Metrics;

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
pub(super) async fn give_back(
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
                send_charged(&slot.sender, &self.direct.memory, delivery).is_ok()
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
