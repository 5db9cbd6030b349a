//! Dispatch: waiting expirations handed to the subscribers with room, least loaded first,
//! each delivery then in flight until it is acknowledged or its deadline passes.

use std::sync::Arc;

use super::journal;
use super::state::Delivery;
use crate::domain::Delivered;
use crate::local::delivery::queue::{InFlight, Waiting};

impl Delivery {
    /// Hands waiting expirations to subscribers with room, least loaded first.
    ///
    /// With a log, a delivery that awaits an ack leaves only once its attempt is written
    /// (see [`journal::Outgoing`]): a restart or crash after the subscriber has it brings it
    /// back with the attempt counted, so one that crashes tickd at each delivery ends dead.
    pub(super) fn dispatch(&mut self, namespace: &Arc<str>) {
        let now = self.now();
        let mut settled_on_send = Vec::new();
        let mut outgoing = journal::Outgoing::default();
        let logged = self.store.is_some();
        let Some(queue) = self.namespaces.get_mut(namespace) else {
            return;
        };
        while !queue.waiting.is_empty() {
            let Some(index) = queue.least_loaded() else {
                break;
            };
            let waiting = queue.waiting.pop_front().expect("checked non-empty");
            self.metrics.delivery_buffered.dec();
            let (delivery_id, new_boot) = self.ids.next();
            outgoing.boot(new_boot);
            let delivered = Delivered {
                delivery_id,
                expiration: waiting.expiration.clone(),
                attempt: waiting.attempts + 1,
            };
            let subscriber = &mut queue.subscribers[index];
            // Sent (Some), and if it waits for its attempt's write, the flag that says it left.
            let sent = if subscriber.auto_ack || !logged {
                subscriber.sender.try_send(delivered).ok().map(|()| None)
            } else {
                outgoing
                    .send_once_written(&subscriber.sender, delivered)
                    .ok()
                    .map(Some)
            };
            let Some(left) = sent else {
                // `least_loaded` saw room, so the stream has closed: its Unsubscribe is on
                // the way and will hand back its in-flight deliveries.
                queue.waiting.push_front(waiting);
                self.metrics.delivery_buffered.inc();
                queue.subscribers.remove(index);
                continue;
            };
            if waiting.attempts == 0 {
                self.metrics.expirations_delivered.inc();
            } else {
                self.metrics.expirations_redelivered.inc();
            }
            subscriber.unacked += 1;
            if subscriber.auto_ack {
                // At most once: handed over counts as done, for good (also after a restart).
                settled_on_send.push(waiting.expiration);
                continue;
            }
            let deadline = now.saturating_add(subscriber.ack_timeout.as_nanos() as u64);
            let ack_deadline = self
                .ack_deadlines
                .insert(deadline, (namespace.clone(), delivery_id))
                .expect("the ack deadline wheel has no limit");
            let in_flight = InFlight {
                waiting: Waiting {
                    expiration: waiting.expiration,
                    attempts: waiting.attempts + 1,
                },
                subscriber: Some(subscriber.id),
                ack_deadline,
                left,
            };
            outgoing.attempted(&in_flight.waiting);
            queue.in_flight.insert(delivery_id, in_flight);
            self.metrics.delivery_unacked.inc();
        }
        self.budget.let_go(settled_on_send.len());
        self.journal_settled(&settled_on_send, None);
        self.send_outgoing(outgoing);
    }
}
