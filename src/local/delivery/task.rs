//! The delivery task: one tokio task owns every namespace's [`NamespaceQueue`] and the
//! bounds across them ([`Budget`]), and handles the [`Request`]s its handle sends.
//!
//! A namespace's queue exists while it holds anything (waiting, in-flight or dead
//! expirations, subscribers, observers) and is forgotten as soon as it holds nothing; while
//! it exists the task has a hold on the namespace in the live set (see
//! [`crate::local::live_namespaces`]). The worker's holds reach the task with its expirations
//! ([`Handoff::Forgotten`]) and are let go here too.

mod journal;
mod redrive;

use std::sync::Arc;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;
use tokio::sync::{mpsc, oneshot};
use tracing::warn;

use super::budget::Budget;
use super::ids::DeliveryIds;
use super::queue::{dead_list, Buried, InFlight, NamespaceQueue, Subscriber, Waiting};
use super::{DeliveryConfig, Request};
use crate::clock::Clock;
use crate::domain::{
    AckOutcome, Dead, DeadList, Delivered, Expiration, Handoff, SubscribeOptions, SubscriberRules,
};
use crate::local::live_namespaces::LiveNamespaces;
use crate::local::store::StoreHandle;
use crate::metrics::Metrics;
use crate::wheel::Wheel;

/// The task's state.
pub(super) struct Delivery {
    config: DeliveryConfig,
    namespaces: FxHashMap<Arc<str>, NamespaceQueue>,
    /// The process's live namespaces: a queue holds its namespace there, and the table's
    /// holds come over with its handoffs, for this task to let go.
    live: Arc<LiveNamespaces>,
    budget: Budget,
    ack_deadlines: Wheel<(Arc<str>, u64)>,
    /// Ack deadlines are on this clock's monotonic time.
    clock: Arc<dyn Clock>,
    ids: DeliveryIds,
    store: Option<StoreHandle>,
    metrics: Arc<Metrics>,
    /// After `Close`, an ack could no longer be journaled: it is refused instead.
    closed: bool,
}

/// Why an expiration out of attempts is dead.
const OUT_OF_ATTEMPTS: &str = "max delivery attempts reached without an ack";

/// How many queued requests are handled before ack deadlines are looked at again.
const REQUEST_BATCH: usize = 256;

impl Delivery {
    /// `boot`: the data directory's boot this process recorded (see [`super::ids`]).
    pub(super) fn new(
        config: DeliveryConfig,
        store: Option<StoreHandle>,
        boot: u64,
        (metrics, live, clock): (Arc<Metrics>, Arc<LiveNamespaces>, Arc<dyn Clock>),
    ) -> Self {
        let ids = DeliveryIds::new(boot);
        Self {
            live,
            config,
            namespaces: FxHashMap::default(),
            budget: Budget::new(
                config.buffered_total,
                config.dead_total,
                ids.first_dead_seq(),
            ),
            ack_deadlines: Wheel::new(1_000_000, usize::MAX),
            clock,
            ids,
            store,
            metrics,
            closed: false,
        }
    }

    pub(super) async fn run(mut self, mut requests: mpsc::UnboundedReceiver<Request>) {
        let mut batch = Vec::with_capacity(REQUEST_BATCH);
        loop {
            let next_deadline = self
                .ack_deadlines
                .next_expiration()
                .map(|at| Instant::now() + Duration::from_nanos(at.saturating_sub(self.now())));
            tokio::select! {
                received = requests.recv_many(&mut batch, REQUEST_BATCH) => {
                    if received == 0 {
                        return;
                    }
                    for request in batch.drain(..) {
                        self.handle(request);
                    }
                }
                _ = sleep_until(next_deadline) => {}
            }
            self.expire_ack_deadlines();
        }
    }

    fn now(&self) -> u64 {
        self.clock.monotonic()
    }

    /// The earliest ack deadline, on the clock's monotonic time.
    #[cfg(any(test, feature = "sim"))]
    pub(super) fn next_ack_deadline(&self) -> Option<u64> {
        self.ack_deadlines.next_expiration()
    }

    pub(super) fn handle(&mut self, request: Request) {
        match request {
            Request::Fired(batch) => {
                crate::faults::panic_if_injected("delivery");
                self.handoff(batch)
            }
            Request::Subscribe {
                options,
                rules,
                id,
                sender,
            } => self.subscribe(options, rules, id, sender),
            Request::Unsubscribe { namespace, id } => self.unsubscribe(&namespace, id),
            Request::Pulled { namespace, id } => self.pulled(&namespace, id),
            Request::Ack {
                namespace,
                delivery_ids,
                reply,
            } => self.ack(&namespace, delivery_ids, reply),
            Request::Dead { namespace, reply } => {
                let _ = reply.send(self.dead(namespace.as_deref()));
            }
            Request::Redrive {
                namespace,
                ids,
                reply,
            } => self.redrive(&namespace, ids, reply),
            Request::Shutdown => {
                for queue in self.namespaces.values_mut() {
                    queue.subscribers.clear();
                    queue.observers.clear();
                }
            }
            Request::Close(done) => {
                self.store = None;
                self.closed = true;
                let _ = done.send(());
            }
        }
    }

    /// The namespace's queue, created (with a hold on the live namespace) if need be.
    fn queue(&mut self, namespace: &Arc<str>) -> &mut NamespaceQueue {
        let live = &self.live;
        self.namespaces.entry(namespace.clone()).or_insert_with(|| {
            live.hold(namespace);
            NamespaceQueue::default()
        })
    }

    fn forget_if_idle(&mut self, namespace: &Arc<str>) {
        if self
            .namespaces
            .get(namespace)
            .is_some_and(NamespaceQueue::is_idle)
        {
            self.namespaces.remove(namespace);
            self.live.release(namespace);
        }
    }

    /// What the worker sent, in its order: expirations, and namespaces it forgot after them.
    fn handoff(&mut self, batch: Vec<Handoff>) {
        let mut fired = Vec::with_capacity(batch.len());
        for item in batch {
            match item {
                Handoff::Fired(expiration) => fired.push((expiration, 0)),
                Handoff::Forgotten(namespace) => {
                    self.enqueue_fired(std::mem::take(&mut fired));
                    self.live.release(&namespace);
                }
            }
        }
        self.enqueue_fired(fired);
    }

    /// Takes in fired expirations, each with the deliveries it already had (0 when it just
    /// fired; recovered ones count those made before a restart): they wait for a
    /// subscriber, or are dead if the buffer is full or they are out of attempts.
    pub(super) fn enqueue_fired(&mut self, batch: Vec<(Expiration, u32)>) {
        if batch.is_empty() {
            return;
        }
        let mut touched: Vec<Arc<str>> = Vec::new();
        let mut overflowed = 0u64;
        let mut dropped = Vec::new();
        for (expiration, attempts) in batch {
            let namespace = expiration.namespace.clone();
            if touched.last() != Some(&namespace) && !touched.contains(&namespace) {
                touched.push(namespace.clone());
            }
            let over_memory_budget = expiration.over_memory_budget;
            let expiration = Arc::new(expiration);
            let copy = Delivered {
                delivery_id: 0,
                expiration: expiration.clone(),
                attempt: 1,
            };
            if self.buffer_full(&namespace) {
                // Subscribers with room may make some (auto-ack ones settle as they take).
                self.dispatch(&namespace);
            }
            let full = self.buffer_full(&namespace);
            let out_of_attempts = attempts >= self.config.max_attempts;
            let queue = self.queue(&namespace);
            queue.copy_to_observers(&copy);
            if out_of_attempts {
                // Delivered that often before a restart (or a crash at each delivery).
                let dead = Dead {
                    id: 0,
                    attempts,
                    expiration,
                    reason: OUT_OF_ATTEMPTS,
                };
                self.bury(&namespace, dead, &mut dropped);
            } else if full || over_memory_budget {
                overflowed += 1;
                let dead = Dead {
                    id: 0,
                    expiration,
                    attempts: 0,
                    reason: if full {
                        "delivery buffer full"
                    } else {
                        "memory budget full"
                    },
                };
                self.bury(&namespace, dead, &mut dropped);
            } else {
                queue.waiting.push_back(Waiting {
                    expiration,
                    attempts,
                });
                self.budget.hold();
                self.metrics.delivery_buffered.inc();
            }
        }
        if overflowed > 0 {
            warn!(
                overflowed,
                max_buffered = self.config.buffer_capacity,
                max_buffered_total = self.config.buffered_total,
                buffered_total = self.budget.held(),
                "delivery buffer full: expirations moved to the dead list"
            );
        }
        self.journal_settled(&dropped, None);
        for namespace in touched {
            self.dispatch(&namespace);
        }
    }

    /// No room for one more waiting expiration: in the namespace's buffer, or across all.
    fn buffer_full(&self, namespace: &str) -> bool {
        let waiting = self
            .namespaces
            .get(namespace)
            .map_or(0, |queue| queue.waiting.len());
        waiting >= self.config.buffer_capacity || !self.budget.has_room()
    }

    /// Keeps a dead expiration listed, within `--max-dead` for its namespace and
    /// `--max-dead-total` across all; beyond either the oldest are dropped and go to
    /// `dropped`, to be settled for good in the journal.
    /// Its number in that order also names it for Redrive.
    fn bury(&mut self, namespace: &Arc<str>, dead: Dead, dropped: &mut Vec<Arc<Expiration>>) {
        self.metrics.expirations_dead.inc();
        let seq = self.budget.bury(namespace);
        let capacity = self.config.dead_capacity;
        let queue = self.queue(namespace);
        let dead = Dead { id: seq, ..dead };
        queue.dead.push_back(Buried { seq, dead });
        let oldest = (queue.dead.len() > capacity).then(|| queue.dead.pop_front());
        if let Some(Some(oldest)) = oldest {
            self.budget.unbury(oldest.seq);
            dropped.push(oldest.dead.expiration);
            self.metrics.expirations_dead_dropped.inc();
        }
        while let Some((seq, namespace)) = self.budget.oldest_beyond_bound() {
            let queue = self
                .namespaces
                .get_mut(&namespace)
                .expect("kept dead expirations have a queue");
            let oldest = queue.dead.pop_front().expect("counted dead are kept");
            debug_assert_eq!(oldest.seq, seq, "the oldest overall is first in its list");
            dropped.push(oldest.dead.expiration);
            self.metrics.expirations_dead_dropped.inc();
            self.forget_if_idle(&namespace);
        }
        self.forget_if_idle(namespace);
        self.metrics.delivery_dead.set(self.budget.dead() as i64);
    }

    fn subscribe(
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
        });
        self.dispatch(&namespace);
    }

    fn unsubscribe(&mut self, namespace: &Arc<str>, id: u64) {
        let Some(queue) = self.namespaces.get_mut(namespace) else {
            return;
        };
        queue.observers.retain(|(observer, _)| *observer != id);
        queue.subscribers.retain(|subscriber| subscriber.id != id);
        let orphaned: Vec<u64> = queue
            .in_flight
            .iter()
            .filter(|(_, in_flight)| in_flight.subscriber == id)
            .map(|(&delivery_id, _)| delivery_id)
            .collect();
        // Planted bug: a lost subscriber's deliveries wait for their ack timeouts.
        let orphaned = if crate::faults::planted("no-redeliver-on-unsubscribe") {
            Vec::new()
        } else {
            orphaned
        };
        for delivery_id in orphaned {
            self.take_back(namespace, delivery_id);
        }
        self.dispatch(namespace);
        self.forget_if_idle(namespace);
    }

    fn pulled(&mut self, namespace: &Arc<str>, id: u64) {
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

    /// Settles acknowledged deliveries; the answer waits until the settlement is durable.
    fn ack(&mut self, namespace: &str, delivery_ids: Vec<u64>, reply: oneshot::Sender<AckOutcome>) {
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
        self.journal_settled(
            &settled,
            Some(Box::new(move || {
                let _ = reply.send(outcome);
            })),
        );
    }

    /// The dead expirations kept, oldest first: one namespace's, or (None) every one's.
    fn dead(&self, namespace: Option<&str>) -> DeadList {
        match namespace {
            Some(namespace) => dead_list(self.namespaces.get(namespace).into_iter()),
            None => dead_list(self.namespaces.values()),
        }
    }

    /// Ends an in-flight delivery: cancels its ack deadline and frees its subscriber's room.
    fn settle(&mut self, namespace: &Arc<str>, delivery_id: u64) -> Option<Waiting> {
        let queue = self.namespaces.get_mut(namespace)?;
        let in_flight = queue.in_flight.remove(&delivery_id)?;
        self.metrics.delivery_unacked.dec();
        self.ack_deadlines.cancel(in_flight.ack_deadline);
        if let Some(subscriber) = queue.subscriber_mut(in_flight.subscriber) {
            subscriber.unacked -= 1;
        }
        Some(in_flight.waiting)
    }

    /// Puts an unacknowledged delivery back in line, or buries it once it has used up its
    /// attempts.
    fn take_back(&mut self, namespace: &Arc<str>, delivery_id: u64) {
        let Some(waiting) = self.settle(namespace, delivery_id) else {
            return;
        };
        if waiting.attempts >= self.config.max_attempts {
            let dead = Dead {
                id: 0,
                attempts: waiting.attempts,
                expiration: waiting.expiration,
                reason: OUT_OF_ATTEMPTS,
            };
            self.budget.let_go(1);
            let mut dropped = Vec::new();
            self.bury(namespace, dead, &mut dropped);
            self.journal_settled(&dropped, None);
        } else {
            self.queue(namespace).waiting.push_front(waiting);
            self.metrics.delivery_buffered.inc();
        }
    }

    pub(super) fn expire_ack_deadlines(&mut self) {
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
    fn restart_unsent(&mut self, namespace: &Arc<str>, delivery_id: u64) -> bool {
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
        let subscriber = in_flight.subscriber;
        let Some(ack_timeout) = queue
            .subscriber_mut(subscriber)
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

    /// Hands waiting expirations to subscribers with room, least loaded first.
    ///
    /// With a log, a delivery that awaits an ack leaves only once its attempt is written
    /// (see [`journal::Outgoing`]): a restart or crash after the subscriber has it brings it
    /// back with the attempt counted, so one that crashes tickd at each delivery ends dead.
    fn dispatch(&mut self, namespace: &Arc<str>) {
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
                subscriber: subscriber.id,
                ack_deadline,
                left,
            };
            outgoing.attempted(&in_flight.waiting);
            queue.in_flight.insert(delivery_id, in_flight);
            self.metrics.delivery_unacked.inc();
        }
        self.budget.let_go(settled_on_send.len());
        self.journal_settled(&settled_on_send, None);
        outgoing.send(self.store.as_ref());
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline.into()).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
#[path = "task_tests.rs"]
mod tests;
