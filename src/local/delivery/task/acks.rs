//! Acknowledgements and their deadlines: an ack settles its delivery (answered once that
//! is durable); a deadline passed takes the delivery back for another attempt, or buries
//! it once it is out of attempts.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;

use super::journal::attempted;
use super::state::Delivery;
use crate::domain::{AckOutcome, Dead, DeadReason, GiveBack, Hold};
use crate::local::delivery::log_waits::Answer;
use crate::local::delivery::queue::Waiting;
use crate::local::store::Batch;

impl Delivery {
    /// Settles acknowledged deliveries; the answer waits until the settlement is durable.
    pub(super) fn ack(
        &mut self,
        namespace: &str,
        delivery_ids: Vec<u64>,
        reply: oneshot::Sender<AckOutcome>,
    ) {
        if self.closed {
            // Dropping the reply answers UNAVAILABLE.
            return;
        }
        let mut outcome = AckOutcome::default();
        let namespace: Arc<str> = Arc::from(namespace);
        let mut settled = Vec::new();
        for delivery_id in delivery_ids {
            match self.settle(&namespace, delivery_id) {
                Some(waiting) => {
                    outcome.acknowledged += 1;
                    settled.push(waiting.expiration);
                }
                None => outcome.unknown.push(delivery_id),
            }
        }
        self.budget.let_go(settled.len());
        self.dispatch(&namespace);
        self.forget_if_idle(&namespace);
        self.journal_settled(&settled, Some(Answer::Acked(reply, outcome)));
    }

    /// Ends an in-flight delivery: cancels its ack deadline and frees its subscriber's room.
    fn settle(&mut self, namespace: &Arc<str>, delivery_id: u64) -> Option<Waiting> {
        let queue = self.namespaces.get_mut(namespace)?;
        let in_flight = queue.in_flight.remove(&delivery_id)?;
        self.metrics.delivery_unacked.dec();
        self.ack_deadlines.cancel(in_flight.ack_deadline);
        if let Some(subscriber) = in_flight.subscriber.and_then(|id| queue.subscriber_mut(id)) {
            subscriber.unacked -= 1;
        }
        Some(in_flight.waiting)
    }

    /// Moves an in-flight delivery's ack deadline to `after` from now, when it is taken
    /// back (or buried) as any other whose deadline passed; released, it leaves its
    /// subscriber's window at once, and another delivery may take its place. Nothing is
    /// logged: the attempt was when it left, and a restart brings the delivery back anyway.
    pub(super) fn retry_later(
        &mut self,
        namespace: &str,
        delivery_id: u64,
        after: Duration,
        hold: Hold,
    ) -> bool {
        let now = self.now();
        let Some(queue) = self.namespaces.get_mut(namespace) else {
            return false;
        };
        let Some(in_flight) = queue.in_flight.get_mut(&delivery_id) else {
            return false;
        };
        self.ack_deadlines.cancel(in_flight.ack_deadline);
        let deadline = now.saturating_add(u64::try_from(after.as_nanos()).unwrap_or(u64::MAX));
        in_flight.ack_deadline = self
            .ack_deadlines
            .insert(deadline, (Arc::from(namespace), delivery_id))
            .expect("the ack deadline wheel has no limit");
        if hold == Hold::Kept {
            return true;
        }
        if let Some(subscriber) = in_flight.subscriber.take() {
            if let Some(subscriber) = queue.subscriber_mut(subscriber) {
                subscriber.unacked -= 1;
            }
        }
        let namespace: Arc<str> = Arc::from(namespace);
        self.dispatch(&namespace);
        true
    }

    /// Puts an unacknowledged delivery back in line, or buries it once it has used up its
    /// attempts. One whose subscriber held it when its deadline passed (it did not ack in
    /// time) goes first, as the oldest; one handed back to wait for its retry, or given
    /// back for later, takes its turn behind those waiting: an expiration that keeps
    /// failing never goes before the others.
    pub(super) fn take_back(&mut self, namespace: &Arc<str>, delivery_id: u64) {
        let waited_elsewhere = self
            .namespaces
            .get(namespace)
            .and_then(|queue| queue.in_flight.get(&delivery_id))
            .is_some_and(|in_flight| in_flight.subscriber.is_none());
        let Some(waiting) = self.settle(namespace, delivery_id) else {
            return;
        };
        if !self.config.has_attempts_left(waiting.attempts) {
            let dead = Dead {
                id: 0,
                attempts: waiting.attempts,
                expiration: waiting.expiration,
                reason: DeadReason::AttemptsSpent.describe(),
            };
            self.budget.let_go(1);
            let mut dropped = Vec::new();
            self.bury(namespace, dead, &mut dropped);
            self.journal_settled(&dropped, None);
            return;
        }
        let line = &mut self.queue(namespace).waiting;
        if waited_elsewhere {
            line.push_back(waiting);
        } else {
            line.push_front(waiting);
        }
        self.metrics.delivery_buffered.inc();
    }

    /// Gives back an unacknowledged delivery that never reached its client as the attempt
    /// it was: the attempt its dispatch counted is refunded, and recorded so, so that a
    /// restart counts it no more than this does. It comes again as `when` says (see
    /// [`GiveBack`]). False if it is not in flight.
    pub(super) fn give_back(
        &mut self,
        namespace: &Arc<str>,
        delivery_id: u64,
        when: GiveBack,
    ) -> bool {
        let Some(in_flight) = self
            .namespaces
            .get_mut(namespace)
            .and_then(|queue| queue.in_flight.get_mut(&delivery_id))
        else {
            return false;
        };
        in_flight.waiting.attempts = in_flight.waiting.attempts.saturating_sub(1);
        let holder = in_flight.subscriber;
        let refund = attempted(&in_flight.waiting.expiration, in_flight.waiting.attempts);
        if self.store.is_some() {
            let mut batch = Batch::default();
            batch.record(&refund);
            // Promised once written (the pusher's `Recorded`): should the fsync after fail,
            // the cut keeps it, as it keeps the attempts of deliveries that left.
            batch.leaves_once_written();
            self.append_then(batch, None);
        }
        match when {
            GiveBack::Leaving => {
                let waiting = self.settle(namespace, delivery_id).expect("found above");
                // Who gives back is leaving: what it gives back goes to another subscriber
                // (or waits), never to the stream about to be dropped with it inside.
                if let Some(subscriber) =
                    holder.and_then(|id| self.queue(namespace).subscriber_mut(id))
                {
                    subscriber.leaving = true;
                }
                self.queue(namespace).waiting.push_front(waiting);
                self.metrics.delivery_buffered.inc();
                self.dispatch(namespace);
            }
            // It waits out `after` in flight, no subscriber's, as a retry does: its
            // deadline then puts it back in line (see `take_back`). Releasing its place
            // dispatches what may take it.
            GiveBack::After(after) => {
                let released = self.retry_later(namespace, delivery_id, after, Hold::Released);
                debug_assert!(released, "in flight above");
            }
        }
        true
    }

    pub(crate) fn expire_ack_deadlines(&mut self) {
        let mut expired = Vec::new();
        self.ack_deadlines.advance(self.now(), &mut expired);
        if expired.is_empty() {
            return;
        }
        let mut touched: Vec<Arc<str>> = Vec::new();
        for entry in expired {
            // The fired entry's handle is stale now, so settling it cancels nothing.
            let (namespace, delivery_id) = entry.value;
            if !self.restart_unsent(&namespace, delivery_id) {
                self.take_back(&namespace, delivery_id);
            }
            if !touched.contains(&namespace) {
                touched.push(namespace);
            }
        }
        for namespace in touched {
            self.dispatch(&namespace);
        }
    }

    /// A delivery whose deadline passed before it even left (its attempt's write was that
    /// slow) gets its subscriber's whole ack timeout again, from now: true if so.
    pub(super) fn restart_unsent(&mut self, namespace: &Arc<str>, delivery_id: u64) -> bool {
        let now = self.now();
        let Some(queue) = self.namespaces.get_mut(namespace) else {
            return false;
        };
        let Some(in_flight) = queue.in_flight.get(&delivery_id) else {
            return false;
        };
        if in_flight.has_left() {
            return false;
        }
        let Some(ack_timeout) = in_flight
            .subscriber
            .and_then(|subscriber| queue.subscriber_mut(subscriber))
            .map(|subscriber| subscriber.ack_timeout)
        else {
            return false;
        };
        let deadline = now.saturating_add(ack_timeout.as_nanos() as u64);
        let handle = self
            .ack_deadlines
            .insert(deadline, (namespace.clone(), delivery_id))
            .expect("the ack deadline wheel has no limit");
        if let Some(in_flight) = queue.in_flight.get_mut(&delivery_id) {
            in_flight.ack_deadline = handle;
        }
        true
    }
}
