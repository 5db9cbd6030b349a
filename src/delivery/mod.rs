//! Delivery: fired expirations reach subscribers, are acknowledged, or are delivered again.
//!
//! One task owns every namespace's [`queue::NamespaceQueue`]; the worker thread, the API
//! and the subscriber streams talk to it through [`DeliveryHandle`] messages, so no lock is
//! held anywhere. The guarantees:
//! - each expiration goes to one sharing subscriber at a time (the least loaded one with
//!   room), and stays in flight until acknowledged;
//! - a delivery not acknowledged within its subscriber's ack timeout, or whose subscriber
//!   went away, is delivered again (to any subscriber) with the next attempt number; after
//!   `max_attempts` deliveries it is kept as dead and listed by Pending;
//! - expirations with no subscriber to take them wait in a per-namespace buffer of bounded
//!   size; when it is full, newly fired expirations go to the dead list (logged and counted);
//! - observers receive a best-effort copy of every expiration and take no part in acks.
//!
//! Ack deadlines are timers in this task's own [`Wheel`], driven by a tokio sleep until
//! its next expiration.

pub mod queue;

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;
use tokio::sync::{mpsc, oneshot};
use tracing::warn;

use crate::metrics::Metrics;
use crate::store::records::{record::Kind, Record, Settled};
use crate::store::{Batch, StoreHandle};
use crate::wheel::Wheel;
use crate::worker::table::Expiration;
use queue::{Dead, Delivered, InFlight, NamespaceQueue, Subscriber, Waiting};

#[derive(Debug, Clone, Copy)]
pub struct DeliveryConfig {
    /// Expirations that may wait for a subscriber, per namespace.
    pub buffer_capacity: usize,
    /// Dead expirations kept per namespace.
    pub dead_capacity: usize,
    pub default_ack_timeout: Duration,
    pub default_max_unacked: usize,
    /// The largest `max_unacked` a subscriber may ask for.
    pub max_unacked_limit: usize,
    /// Deliveries of one expiration before it is declared dead.
    pub max_attempts: u32,
}

impl Default for DeliveryConfig {
    fn default() -> Self {
        Self {
            buffer_capacity: 100_000,
            dead_capacity: 10_000,
            default_ack_timeout: Duration::from_secs(30),
            default_max_unacked: 1_000,
            max_unacked_limit: 100_000,
            max_attempts: 5,
        }
    }
}

#[derive(Debug, Clone)]
pub struct SubscribeOptions {
    pub namespace: String,
    pub observer: bool,
    pub ack_timeout: Option<Duration>,
    pub max_unacked: Option<usize>,
    pub auto_ack: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AckOutcome {
    pub acknowledged: u32,
    pub unknown: Vec<u64>,
}

#[derive(Debug, Clone, Default)]
pub struct DeadList {
    pub count: u64,
    pub dead: Vec<Dead>,
}

enum Request {
    Fired(Vec<Expiration>),
    Subscribe {
        options: SubscribeOptions,
        id: u64,
        sender: mpsc::Sender<Delivered>,
    },
    Unsubscribe {
        namespace: Arc<str>,
        id: u64,
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
    Dead {
        namespace: String,
        reply: oneshot::Sender<DeadList>,
    },
    Shutdown,
    /// Stops journaling (the store is closing) and confirms.
    Close(oneshot::Sender<()>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("delivery has stopped")]
pub struct DeliveryStopped;

/// The way into the delivery task; cheap to clone.
#[derive(Clone)]
pub struct DeliveryHandle {
    sender: mpsc::UnboundedSender<Request>,
    next_subscriber_id: Arc<AtomicU64>,
    config: DeliveryConfig,
}

impl DeliveryHandle {
    /// Starts the delivery task on the current tokio runtime. With a store, acks are
    /// journaled before they are answered; `recovered` are expirations fired before a
    /// restart and never settled, delivered again first.
    pub fn spawn(
        config: DeliveryConfig,
        store: Option<StoreHandle>,
        recovered: Vec<Expiration>,
        metrics: Arc<Metrics>,
    ) -> Self {
        let (sender, receiver) = mpsc::unbounded_channel();
        let mut delivery = Delivery::new(config, store, metrics);
        delivery.enqueue_fired(recovered);
        tokio::spawn(delivery.run(receiver));
        Self {
            sender,
            next_subscriber_id: Arc::new(AtomicU64::new(1)),
            config,
        }
    }

    /// Hands one fired batch to the delivery task.
    pub fn fired(&self, batch: Vec<Expiration>) {
        // After shutdown nobody is left to deliver to; the batch is dropped with the task.
        let _ = self.sender.send(Request::Fired(batch));
    }

    /// False once the delivery task has ended (after `close`, or by a panic).
    pub fn is_running(&self) -> bool {
        !self.sender.is_closed()
    }

    /// A sink for the worker thread: hands each fired batch to the delivery task.
    pub fn fired_sink(&self) -> impl FnMut(Vec<Expiration>) + Send + 'static {
        let sender = self.sender.clone();
        move |batch| {
            // After shutdown nobody is left to deliver to; the batch is dropped with the task.
            let _ = sender.send(Request::Fired(batch));
        }
    }

    pub fn subscribe(&self, options: SubscribeOptions) -> Result<Subscription, DeliveryStopped> {
        let id = self.next_subscriber_id.fetch_add(1, Ordering::Relaxed);
        let capacity = options
            .max_unacked
            .unwrap_or(self.config.default_max_unacked)
            .clamp(1, self.config.max_unacked_limit);
        let (sender, receiver) = mpsc::channel(capacity);
        let namespace: Arc<str> = Arc::from(options.namespace.as_str());
        self.sender
            .send(Request::Subscribe {
                options,
                id,
                sender,
            })
            .map_err(|_| DeliveryStopped)?;
        Ok(Subscription {
            receiver,
            namespace,
            id,
            delivery: self.sender.clone(),
        })
    }

    pub async fn ack(
        &self,
        namespace: String,
        delivery_ids: Vec<u64>,
    ) -> Result<AckOutcome, DeliveryStopped> {
        let (reply, answer) = oneshot::channel();
        self.sender
            .send(Request::Ack {
                namespace,
                delivery_ids,
                reply,
            })
            .map_err(|_| DeliveryStopped)?;
        answer.await.map_err(|_| DeliveryStopped)
    }

    pub async fn dead(&self, namespace: String) -> Result<DeadList, DeliveryStopped> {
        let (reply, answer) = oneshot::channel();
        self.sender
            .send(Request::Dead { namespace, reply })
            .map_err(|_| DeliveryStopped)?;
        answer.await.map_err(|_| DeliveryStopped)
    }

    /// Ends every subscription stream; used by graceful shutdown.
    pub fn shutdown(&self) {
        let _ = self.sender.send(Request::Shutdown);
    }

    /// Lets go of the store, so that it can finish; acks after this are not journaled.
    pub async fn close(&self) {
        let (done, closed) = oneshot::channel();
        if self.sender.send(Request::Close(done)).is_ok() {
            let _ = closed.await;
        }
    }
}

/// A subscriber's stream of deliveries. Dropping it (the client went away) hands its
/// unacknowledged deliveries back for redelivery.
pub struct Subscription {
    receiver: mpsc::Receiver<Delivered>,
    namespace: Arc<str>,
    id: u64,
    delivery: mpsc::UnboundedSender<Request>,
}

impl tokio_stream::Stream for Subscription {
    type Item = Delivered;
    fn poll_next(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Option<Delivered>> {
        let polled = self.receiver.poll_recv(context);
        if let Poll::Ready(Some(_)) = &polled {
            let _ = self.delivery.send(Request::Pulled {
                namespace: self.namespace.clone(),
                id: self.id,
            });
        }
        polled
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let _ = self.delivery.send(Request::Unsubscribe {
            namespace: self.namespace.clone(),
            id: self.id,
        });
    }
}

/// The task's state.
struct Delivery {
    config: DeliveryConfig,
    namespaces: FxHashMap<Arc<str>, NamespaceQueue>,
    ack_deadlines: Wheel<(Arc<str>, u64)>,
    origin: Instant,
    next_delivery_id: u64,
    store: Option<StoreHandle>,
    metrics: Arc<Metrics>,
    /// After `Close`, an ack could no longer be journaled: it is refused instead.
    closed: bool,
}

/// How many queued requests are handled before ack deadlines are looked at again.
const REQUEST_BATCH: usize = 256;

impl Delivery {
    fn new(config: DeliveryConfig, store: Option<StoreHandle>, metrics: Arc<Metrics>) -> Self {
        Self {
            config,
            namespaces: FxHashMap::default(),
            ack_deadlines: Wheel::new(1_000_000, usize::MAX),
            origin: Instant::now(),
            next_delivery_id: 1,
            store,
            metrics,
            closed: false,
        }
    }

    async fn run(mut self, mut requests: mpsc::UnboundedReceiver<Request>) {
        let mut batch = Vec::with_capacity(REQUEST_BATCH);
        loop {
            let next_deadline = self
                .ack_deadlines
                .next_expiration()
                .map(|at| self.origin + Duration::from_nanos(at));
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
        self.origin.elapsed().as_nanos() as u64
    }

    fn handle(&mut self, request: Request) {
        match request {
            Request::Fired(batch) => {
                crate::faults::panic_if_injected("delivery");
                self.enqueue_fired(batch)
            }
            Request::Subscribe {
                options,
                id,
                sender,
            } => self.subscribe(options, id, sender),
            Request::Unsubscribe { namespace, id } => self.unsubscribe(&namespace, id),
            Request::Pulled { namespace, id } => self.pulled(&namespace, id),
            Request::Ack {
                namespace,
                delivery_ids,
                reply,
            } => self.ack(&namespace, delivery_ids, reply),
            Request::Dead { namespace, reply } => {
                let _ = reply.send(self.dead(&namespace));
            }
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

    fn queue(&mut self, namespace: &Arc<str>) -> &mut NamespaceQueue {
        self.namespaces.entry(namespace.clone()).or_default()
    }

    fn enqueue_fired(&mut self, batch: Vec<Expiration>) {
        let mut touched: Vec<Arc<str>> = Vec::new();
        let mut overflowed = 0u64;
        let mut dropped = Vec::new();
        for expiration in batch {
            let namespace = expiration.namespace.clone();
            if touched.last() != Some(&namespace) && !touched.contains(&namespace) {
                touched.push(namespace.clone());
            }
            let expiration = Arc::new(expiration);
            let copy = Delivered {
                delivery_id: 0,
                expiration: expiration.clone(),
                attempt: 1,
            };
            let capacity = self.config.buffer_capacity;
            if self.queue(&namespace).waiting.len() >= capacity {
                self.dispatch(&namespace);
            }
            let (dead_capacity, queue) = (self.config.dead_capacity, self.queue(&namespace));
            queue.copy_to_observers(&copy);
            if queue.waiting.len() >= capacity {
                overflowed += 1;
                let dead = Dead {
                    expiration,
                    attempts: 0,
                    reason: "delivery buffer full",
                };
                dropped.extend(queue.bury(dead, dead_capacity).map(|dead| dead.expiration));
                self.metrics.expirations_dead.inc();
            } else {
                queue.waiting.push_back(Waiting {
                    expiration,
                    attempts: 0,
                });
                self.metrics.delivery_buffered.inc();
            }
        }
        if overflowed > 0 {
            warn!(
                overflowed,
                buffer_capacity = self.config.buffer_capacity,
                "delivery buffer full: expirations moved to the dead list"
            );
        }
        self.journal_settled(&dropped, None);
        for namespace in touched {
            self.dispatch(&namespace);
        }
    }

    fn subscribe(&mut self, options: SubscribeOptions, id: u64, sender: mpsc::Sender<Delivered>) {
        let namespace: Arc<str> = Arc::from(options.namespace.as_str());
        let max_unacked = sender.max_capacity();
        let ack_timeout = options
            .ack_timeout
            .unwrap_or(self.config.default_ack_timeout);
        let queue = self.queue(&namespace);
        if options.observer {
            queue.observers.push((id, sender));
            return;
        }
        queue.subscribers.push(Subscriber {
            id,
            sender,
            unacked: 0,
            max_unacked,
            ack_timeout,
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
        self.dispatch(&namespace);
        self.forget_if_idle(&namespace);
        self.journal_settled(
            &settled,
            Some(Box::new(move || {
                let _ = reply.send(outcome);
            })),
        );
    }

    /// Records that these expirations are done with (acknowledged, or dropped for good), so a
    /// restart does not deliver them again; then runs `after`.
    fn journal_settled(
        &self,
        expirations: &[Arc<Expiration>],
        after: Option<crate::store::OnDurable>,
    ) {
        let Some(store) = self.store.as_ref().filter(|_| !expirations.is_empty()) else {
            if let Some(after) = after {
                after();
            }
            return;
        };
        let mut batch = Batch::default();
        for expiration in expirations {
            batch.record(&Record {
                kind: Some(Kind::Settled(Settled {
                    id: expiration.id.0,
                    fired_count: expiration.fired_count,
                })),
            });
        }
        if let Some(after) = after {
            batch.on_durable(after);
        }
        store.append(batch);
    }

    fn dead(&self, namespace: &str) -> DeadList {
        self.namespaces
            .get(namespace)
            .map(|queue| DeadList {
                count: queue.dead.len() as u64 + queue.dead_dropped,
                dead: queue.dead.iter().cloned().collect(),
            })
            .unwrap_or_default()
    }

    /// Ends an in-flight delivery: cancels its ack deadline and frees its subscriber's room.
    fn settle(&mut self, namespace: &Arc<str>, delivery_id: u64) -> Option<Waiting> {
        let queue = self.namespaces.get_mut(namespace)?;
        let in_flight = queue.in_flight.remove(&delivery_id)?;
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
        let (max_attempts, dead_capacity) = (self.config.max_attempts, self.config.dead_capacity);
        let metrics = self.metrics.clone();
        let queue = self.queue(namespace);
        if waiting.attempts >= max_attempts {
            let dead = Dead {
                attempts: waiting.attempts,
                expiration: waiting.expiration,
                reason: "max delivery attempts reached without an ack",
            };
            metrics.expirations_dead.inc();
            if let Some(dropped) = queue.bury(dead, dead_capacity) {
                self.journal_settled(&[dropped.expiration], None);
            }
        } else {
            queue.waiting.push_front(waiting);
            metrics.delivery_buffered.inc();
        }
    }

    fn expire_ack_deadlines(&mut self) {
        let mut expired = Vec::new();
        self.ack_deadlines.advance(self.now(), &mut expired);
        if expired.is_empty() {
            return;
        }
        let mut touched: Vec<Arc<str>> = Vec::new();
        for entry in expired {
            // The fired entry's handle is stale now, so settling it cancels nothing.
            let (namespace, delivery_id) = entry.value;
            self.take_back(&namespace, delivery_id);
            if !touched.contains(&namespace) {
                touched.push(namespace);
            }
        }
        for namespace in touched {
            self.dispatch(&namespace);
        }
    }

    /// Hands waiting expirations to subscribers with room, least loaded first.
    fn dispatch(&mut self, namespace: &Arc<str>) {
        let now = self.now();
        let mut settled_on_send = Vec::new();
        let Some(queue) = self.namespaces.get_mut(namespace) else {
            return;
        };
        while !queue.waiting.is_empty() {
            let Some(index) = queue.least_loaded() else {
                break;
            };
            let waiting = queue.waiting.pop_front().expect("checked non-empty");
            self.metrics.delivery_buffered.dec();
            let delivered = Delivered {
                delivery_id: self.next_delivery_id,
                expiration: waiting.expiration.clone(),
                attempt: waiting.attempts + 1,
            };
            let subscriber = &mut queue.subscribers[index];
            if subscriber.sender.try_send(delivered).is_err() {
                // `least_loaded` saw room, so the stream has closed: its Unsubscribe is on the
                // way and will hand back its in-flight deliveries.
                queue.waiting.push_front(waiting);
                self.metrics.delivery_buffered.inc();
                queue.subscribers.remove(index);
                continue;
            }
            if waiting.attempts == 0 {
                self.metrics.expirations_delivered.inc();
            } else {
                self.metrics.expirations_redelivered.inc();
            }
            let delivery_id = self.next_delivery_id;
            self.next_delivery_id += 1;
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
            };
            queue.in_flight.insert(delivery_id, in_flight);
        }
        self.journal_settled(&settled_on_send, None);
    }

    fn forget_if_idle(&mut self, namespace: &Arc<str>) {
        if self
            .namespaces
            .get(namespace)
            .is_some_and(NamespaceQueue::is_idle)
        {
            self.namespaces.remove(namespace);
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline.into()).await,
        None => std::future::pending().await,
    }
}
