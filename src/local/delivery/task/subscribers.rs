//! Subscribers and observers coming and going: a subscriber's window, the deliveries a
//! lost one held handed back (those it never took with their attempts refunded), and the
//! room a stream makes as it takes one.

use std::sync::Arc;

use tokio::sync::mpsc;

use super::state::Delivery;
use crate::domain::{Delivered, GiveBack, SubscribeOptions, SubscriberRules};
use crate::local::delivery::queue::Subscriber;

impl Delivery {
    pub(super) fn subscribe(
        &mut self,
        options: SubscribeOptions,
        rules: SubscriberRules,
        id: u64,
        sender: mpsc::Sender<Delivered>,
    ) {
        let namespace: Arc<str> = Arc::from(options.namespace.as_str());
        debug_assert_eq!(
            sender.max_capacity(),
            rules.max_unacked,
            "the window's channel"
        );
        let queue = self.queue(&namespace);
        if options.observer {
            queue.observers.push((id, sender));
            return;
        }
        queue.subscribers.push(Subscriber {
            id,
            sender,
            unacked: 0,
            max_unacked: rules.max_unacked,
            ack_timeout: rules.ack_timeout,
            auto_ack: options.auto_ack,
            leaving: false,
        });
        self.dispatch(&namespace);
    }

    /// A stream gone: what it held comes back. The deliveries that never reached it (still
    /// in its buffer, `never_taken`, or waiting for their attempt to be written) come back
    /// as the attempt they were; those it took, as the next.
    pub(super) fn unsubscribe(&mut self, namespace: &Arc<str>, id: u64, never_taken: &[u64]) {
        let Some(queue) = self.namespaces.get_mut(namespace) else {
            return;
        };
        queue.observers.retain(|(observer, _)| *observer != id);
        queue.subscribers.retain(|subscriber| subscriber.id != id);
        let orphaned: Vec<(u64, bool)> = queue
            .in_flight
            .iter()
            .filter(|(_, in_flight)| in_flight.subscriber == Some(id))
            .map(|(&delivery_id, in_flight)| {
                let reached = in_flight.has_left() && !never_taken.contains(&delivery_id);
                (delivery_id, reached)
            })
            .collect();
        // Planted bug: a lost subscriber's deliveries wait for their ack timeouts.
        let orphaned = if crate::faults::planted("no-redeliver-on-unsubscribe") {
            Vec::new()
        } else {
            orphaned
        };
        for (delivery_id, reached) in orphaned {
            if reached {
                self.take_back(namespace, delivery_id);
            } else {
                self.give_back(namespace, delivery_id, GiveBack::Leaving);
            }
        }
        self.dispatch(namespace);
        self.forget_if_idle(namespace);
    }

    pub(super) fn pulled(&mut self, namespace: &Arc<str>, id: u64) {
        let Some(queue) = self.namespaces.get_mut(namespace) else {
            return;
        };
        if let Some(subscriber) = queue.subscriber_mut(id) {
            if subscriber.auto_ack {
                subscriber.unacked -= 1;
            }
        }
        if !queue.waiting.is_empty() {
            self.dispatch(namespace);
        }
    }
}
