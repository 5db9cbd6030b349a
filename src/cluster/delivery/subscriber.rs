//! A subscriber's task: claims its namespace's expirations for one stream while the stream
//! has room (and the replica's memory budget is not reached, see [`super::charged`]),
//! marks them acknowledged at once with auto-ack, and hands its claims back when the
//! stream ends (those the stream never took as the attempt they were).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tracing::{debug, warn, Instrument};

use super::charged::{send_charged, ChargedStream, StreamEnd};
use super::cluster_deliveries::ClusterDeliveries;
use super::direct::give_back;
use super::rows::{delivery_id, expiration_of, split_delivery_id, EXPIRATION_COLUMNS};
use super::slot::{Membership, Slot};
use super::wake::{next_look, Woke};
use crate::cluster::error::ClusterError;
use crate::cluster::notifications::{NamespaceWakeup, FIRED_CHANNEL};
use crate::domain::{Delivered, DeliveryStream, SubscribeOptions, SubscriberRules};

/// Claimable rows of namespace `$1` with attempts left (`$2`): never claimed, or claimed
/// and not acknowledged in time. Oldest first, skipping rows another claim is taking; at
/// most `$3` (the room reserved for the claim, see `Slot::reserve_for_claim`), and no
/// more than take subscriber `$4` to `$6` unacknowledged claims.
pub(super) const CLAIMABLE: &str = concat!(
    "SELECT seq FROM tickd_expirations
     WHERE namespace = $1 AND ",
    attempts_left!("$2"),
    " AND acked_at IS NULL AND NOT dead AND ",
    claim_lapsed!(),
    "
     ORDER BY seq
     LIMIT GREATEST(0, LEAST($3, $6 - (
         SELECT count(*) FROM tickd_expirations
         WHERE claimed_by = $4 AND claim_until > clock_timestamp())))
     FOR UPDATE SKIP LOCKED"
);

impl ClusterDeliveries {
    /// Starts the task that claims expirations for one subscriber; its stream.
    pub(super) fn claim_for(
        &self,
        options: SubscribeOptions,
        rules: SubscriberRules,
    ) -> DeliveryStream {
        let SubscriberRules {
            ack_timeout,
            max_unacked,
        } = rules;
        let (sender, receiver) = mpsc::channel(max_unacked);
        let slot = Arc::new(Slot::new(
            self.next_name(),
            ack_timeout,
            max_unacked,
            !options.auto_ack,
            sender.clone(),
        ));
        let end = StreamEnd::new(self.handing_back.clone());
        let subscriber = Subscriber {
            end: end.clone(),
            name: slot.name.clone(),
            namespace: options.namespace.clone(),
            ack_timeout: slot.ack_timeout,
            max_unacked,
            auto_ack: options.auto_ack,
            max_attempts: self.config.max_attempts,
            sender,
            membership: self.local.join(&options.namespace, slot),
            deliveries: self.clone(),
        };
        tokio::spawn(
            subscriber
                .run(self.stopping.clone())
                .instrument(self.span.clone()),
        );
        Box::pin(ChargedStream::new(receiver, self.memory.clone(), end))
    }
}

/// One subscriber's task: claims expirations for it while it has room, until its stream
/// is dropped or the replica stops.
struct Subscriber {
    /// From [`ClusterDeliveries::next_name`]: what its claims are stamped with.
    name: String,
    namespace: String,
    ack_timeout: Duration,
    max_unacked: usize,
    auto_ack: bool,
    max_attempts: u32,
    sender: mpsc::Sender<Delivered>,
    /// Its place among the replica's subscribers for direct delivery, and the room it
    /// keeps for both paths.
    membership: Membership,
    deliveries: ClusterDeliveries,
    /// How its stream ended: what it held when dropped is given back as the same attempt.
    end: Arc<StreamEnd>,
}

impl Drop for Subscriber {
    /// A task that ends without handing back (the replica stopping, or a failure) still
    /// lets go of its stream's place in the count `recorded` waits on.
    fn drop(&mut self) {
        drop(self.end.take());
    }
}

/// What a subscriber's next look at the database does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Look {
    /// Claims whatever there is (the first look, and each poll).
    Always,
    /// Claims only if this wake-up is its turn.
    IfMyTurn,
    /// Has claimed in this look: out of room, it passes the turn on.
    Claimed,
}

impl Subscriber {
    async fn run(self, mut stopping: watch::Receiver<bool>) {
        let wakeup = self.deliveries.wakeups.of(&self.namespace);
        // The first look and every poll claim whatever there is; a wake-up is one
        // subscriber's turn (see `NamespaceWakeup`).
        let mut look = Look::Always;
        loop {
            let woken = wakeup.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            if let Err(error) = self.claim_while_room(&wakeup, look).await {
                warn!(subscriber = %self.name, %error, "claiming expirations failed");
            }
            look = match next_look(woken, &self.sender, &mut stopping).await {
                Woke::ToLook => Look::IfMyTurn,
                Woke::Polled => Look::Always,
                Woke::StreamClosed => break,
                // The replica is draining: the claims stay, so acks of deliveries the
                // client already has still succeed; the rest return at their deadline.
                // (A stream dropped meanwhile is let go of as this task ends: see Drop.)
                Woke::Stopping => return,
            }
        }
        // No direct delivery from here on (a firing under way may still hand it a few,
        // which the stream, gone, refuses and the firing gives back).
        self.membership.leave();
        // Held until the hand-back is over: `recorded` waits for it.
        let dropped = self.end.take();
        if let Some((never_taken, _)) = dropped.as_ref().filter(|(ids, _)| !ids.is_empty()) {
            self.give_back_unsent(never_taken.clone()).await;
        }
        self.hand_back().await;
        drop(dropped);
    }

    async fn claim_while_room(
        &self,
        wakeup: &NamespaceWakeup,
        mut look: Look,
    ) -> Result<(), ClusterError> {
        loop {
            // The unacknowledged limit is applied by the claim itself. At its memory
            // budget the replica claims nothing: the expirations wait in the database.
            if self.deliveries.memory.is_reached() {
                return Ok(());
            }
            let slot = self.membership.slot();
            let room = slot.reserve_for_claim(self.sender.capacity());
            if room == 0 {
                slot.wants_room();
                if look == Look::Claimed {
                    // Out of room with rows perhaps left: the next subscriber's turn.
                    wakeup.wake();
                }
                return Ok(());
            }
            if look == Look::IfMyTurn && !wakeup.take_turn() {
                slot.settle_reservation(room, &[]);
                return Ok(());
            }
            look = Look::Claimed;
            let started = std::time::Instant::now();
            let claimed = match self.claim(room).await {
                Ok(claimed) => claimed,
                Err(error) => {
                    slot.settle_reservation(room, &[]);
                    return Err(error);
                }
            };
            debug!(subscriber = %self.name, room, claimed = claimed.len(), elapsed_us = started.elapsed().as_micros() as u64, "claimed");
            let exhausted = claimed.len() < room;
            let mut sent = Vec::with_capacity(claimed.len());
            let mut not_sent = Vec::new();
            let mut stream_open = true;
            if started.elapsed() >= self.ack_timeout {
                // The answer came back after the claims' own deadline (the database was
                // out of reach meanwhile): they may be another subscriber's by now, so
                // none is sent; those still ours are given back below.
                warn!(subscriber = %self.name, claimed = claimed.len(), "claims answered after their ack deadline: not delivered");
                stream_open = false;
                not_sent = claimed;
            } else {
                let mut claimed = claimed.into_iter();
                for delivered in claimed.by_ref() {
                    let (delivery_id, attempt) = (delivered.delivery_id, delivered.attempt);
                    // Room was checked; a stream closed meanwhile refuses it.
                    if let Err(refused) =
                        send_charged(&self.sender, &self.deliveries.memory, delivered)
                    {
                        stream_open = false;
                        not_sent.push(refused);
                        break;
                    }
                    self.count(attempt);
                    sent.push(delivery_id);
                }
                not_sent.extend(claimed);
            }
            slot.settle_reservation(room, &sent);
            if !not_sent.is_empty() {
                let ids = not_sent.iter().map(|delivered| delivered.delivery_id);
                self.give_back_unsent(ids.collect()).await;
            }
            if exhausted && slot.is_full() {
                // Cut short by `max_unacked` rather than by what there was to claim: the
                // next subscriber's turn.
                slot.wants_room();
                wakeup.wake();
            }
            if self.auto_ack && !sent.is_empty() {
                // Settled once handed to the stream, as on one node; what could not be
                // handed over stays claimed and comes back at its deadline.
                self.deliveries
                    .ack(self.namespace.clone(), sent)
                    .await
                    .map_err(|error| ClusterError::Settle(error.to_string()))?;
            }
            if exhausted || !stream_open {
                return Ok(());
            }
        }
    }

    /// Claims up to `room` rows until the ack deadline.
    async fn claim(&self, room: usize) -> Result<Vec<Delivered>, ClusterError> {
        let statement = format!(
            "UPDATE tickd_expirations
             SET claimed_by = $4, attempts = attempts + 1,
                 claim_until = clock_timestamp() + $5::INT8 * INTERVAL '1 millisecond'
             WHERE seq IN ({CLAIMABLE})
             RETURNING {EXPIRATION_COLUMNS}"
        );
        let max_attempts = self.max_attempts as i32;
        let ack_timeout = self.ack_timeout.as_millis() as i64;
        let parameters: [&(dyn tokio_postgres::types::ToSql + Sync); 6] = [
            &self.namespace,
            &max_attempts,
            &(room as i64),
            &self.name,
            &ack_timeout,
            &(self.max_unacked as i64),
        ];
        let mut rows = self
            .deliveries
            .connections
            .client()
            .await?
            .query(&statement, &parameters[..])
            .await
            .map_err(ClusterError::query("claiming expirations"))?;
        rows.sort_by_key(|row| row.get::<_, i64>(0));
        let delivered = rows.iter().map(|row| {
            let attempt = row.get::<_, i32>(1);
            Delivered {
                delivery_id: delivery_id(row.get(0), attempt),
                expiration: Arc::new(expiration_of(row)),
                attempt: attempt as u32,
            }
        });
        Ok(delivered.collect())
    }

    /// Counts one delivery handed to the stream (a claim never sent is not one).
    fn count(&self, attempt: u32) {
        let metrics = &self.deliveries.metrics;
        match attempt {
            1 => metrics.expirations_delivered.inc(),
            _ => metrics.expirations_redelivered.inc(),
        };
    }

    /// Claims this subscriber made that never reached its client (answered too late, the
    /// stream closed meanwhile, or left in the stream when it was dropped) go back with their attempt refunded: no client saw them,
    /// so the next claim's attempt is the one these would have had. Those another
    /// subscriber already took (the claim lapsed) are left alone by the statement.
    async fn give_back_unsent(&self, delivery_ids: Vec<u64>) {
        let claims = delivery_ids
            .into_iter()
            .map(|delivery_id| {
                let (seq, attempt) = split_delivery_id(delivery_id);
                (self.name.clone(), seq, attempt)
            })
            .collect();
        if let Err(error) = give_back(&self.deliveries.connections, claims).await {
            warn!(subscriber = %self.name, %error, "giving back unsent claims failed; they return at their ack deadline");
        }
    }

    /// Unacknowledged claims go back at once (next attempt), for any subscriber to take.
    async fn hand_back(&self) {
        if let Err(error) = self.try_hand_back().await {
            warn!(subscriber = %self.name, %error, "handing back deliveries failed; they return at their ack deadline");
        }
    }

    async fn try_hand_back(&self) -> Result<(), ClusterError> {
        self.deliveries
            .connections
            .client()
            .await?
            .query(
                "WITH released AS (
                    UPDATE tickd_expirations SET claimed_by = NULL, claim_until = NULL
                    WHERE claimed_by = $1 RETURNING namespace)
                 SELECT pg_notify($2, namespace)::TEXT FROM (SELECT DISTINCT namespace FROM released) n",
                &[&self.name, &FIRED_CHANNEL],
            )
            .await
            .map_err(ClusterError::query("handing back deliveries"))?;
        Ok(())
    }
}
