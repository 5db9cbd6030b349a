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
//! - expirations with no subscriber to take them wait in a buffer bounded per namespace and
//!   across all of them; when it is full, newly fired expirations go to the dead list
//!   (logged and counted);
//! - dead expirations are kept within a bound per namespace and one across all of them,
//!   the oldest dropped first;
//! - observers receive a best-effort copy of every expiration and take no part in acks.
//!
//! Ack deadlines are timers in the task's own [`crate::wheel::Wheel`], driven by a tokio
//! sleep until its next expiration. The task itself is in [`task`], its bounds across
//! namespaces in [`budget`].

mod budget;
pub(crate) mod ids;
mod log_waits;
pub(crate) mod queue;
mod request;
mod task;

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::clock::Clock;
use crate::domain::{
    AckOutcome, Answer, DeadList, Delivered, DeliveryConfig, DeliveryStream, Expiration,
    Expirations, FiredRound, GiveBack, Hold, RedriveOutcome, SubscribeOptions, TimerError,
};
use crate::local::live_namespaces::LiveNamespaces;
use crate::local::store::StoreHandle;
use crate::metrics::Metrics;
use request::Request;

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("delivery has stopped")]
pub(crate) struct DeliveryStopped;

/// The way into the delivery task; cheap to clone.
#[derive(Clone)]
pub(crate) struct DeliveryHandle {
    sender: mpsc::UnboundedSender<Request>,
    next_subscriber_id: Arc<AtomicU64>,
    config: DeliveryConfig,
    metrics: Arc<Metrics>,
}

impl DeliveryHandle {
    /// Starts the delivery task on the current tokio runtime. With a store, acks are
    /// journaled before they are answered and attempts before deliveries leave; `boot`
    /// is the one the store recorded (or [`ids::unlogged_boot`] without one). `recovered`
    /// are expirations fired before a restart and never settled, each with the deliveries
    /// it had, delivered again first, in the order they fired (so that the bounds keep the
    /// same ones waiting as before the restart); those out of attempts are dead.
    /// `clock`: the one ack deadlines are measured on.
    pub(crate) fn spawn(
        config: DeliveryConfig,
        store: Option<StoreHandle>,
        boot: u64,
        recovered: Vec<(Expiration, u32)>,
        (metrics, live, clock): (Arc<Metrics>, Arc<LiveNamespaces>, Arc<dyn Clock>),
    ) -> Self {
        let (handle, delivery, receiver) =
            Self::prepare(config, store, boot, recovered, (metrics, live, clock));
        tokio::spawn(delivery.run(receiver));
        handle
    }

    /// The handle and the task it talks to, before the task runs.
    fn prepare(
        config: DeliveryConfig,
        store: Option<StoreHandle>,
        boot: u64,
        mut recovered: Vec<(Expiration, u32)>,
        (metrics, live, clock): (Arc<Metrics>, Arc<LiveNamespaces>, Arc<dyn Clock>),
    ) -> (Self, task::Delivery, mpsc::UnboundedReceiver<Request>) {
        let (sender, receiver) = mpsc::unbounded_channel();
        let mut delivery = task::Delivery::new(config, store, boot, (metrics.clone(), live, clock));
        recovered.sort_unstable_by_key(|(expiration, _)| {
            (
                expiration.fired_unix,
                expiration.deadline_unix,
                expiration.id,
                expiration.fired_count,
            )
        });
        delivery.enqueue_fired(recovered);
        let handle = Self {
            sender,
            next_subscriber_id: Arc::new(AtomicU64::new(1)),
            config,
            metrics,
        };
        (handle, delivery, receiver)
    }

    /// [`Self::spawn`] without a runtime: the task is stepped by hand (the simulation).
    #[cfg(any(test, feature = "sim"))]
    pub(crate) fn stepped(
        config: DeliveryConfig,
        store: Option<StoreHandle>,
        boot: u64,
        recovered: Vec<(Expiration, u32)>,
        parts: (Arc<Metrics>, Arc<LiveNamespaces>, Arc<dyn Clock>),
    ) -> (Self, SteppedDelivery) {
        let (handle, delivery, requests) = Self::prepare(config, store, boot, recovered, parts);
        (handle, SteppedDelivery { delivery, requests })
    }

    /// Hands the worker's fired rounds to the delivery task.
    pub(crate) fn fired(&self, rounds: Vec<FiredRound>) {
        // After shutdown nobody is left to deliver to; the rounds are dropped with the task.
        let _ = self.sender.send(Request::Fired(rounds));
    }

    /// False once the delivery task has ended (after `close`, or by a panic).
    pub(crate) fn is_running(&self) -> bool {
        !self.sender.is_closed()
    }

    pub(crate) fn subscribe(
        &self,
        options: SubscribeOptions,
    ) -> Result<Subscription, DeliveryStopped> {
        let id = self.next_subscriber_id.fetch_add(1, Ordering::Relaxed);
        let rules = options.rules(&self.config.subscriber);
        // The stream's channel holds the window: a delivery is sent only into room.
        let (sender, receiver) = mpsc::channel(rules.max_unacked);
        let namespace: Arc<str> = Arc::from(options.namespace.as_str());
        self.sender
            .send(Request::Subscribe {
                options,
                rules,
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

    pub(crate) async fn ack(
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

    /// The dead expirations of a namespace, or (None) of every namespace.
    pub(crate) async fn dead(
        &self,
        namespace: Option<String>,
    ) -> Result<DeadList, DeliveryStopped> {
        let (reply, answer) = oneshot::channel();
        self.sender
            .send(Request::Dead { namespace, reply })
            .map_err(|_| DeliveryStopped)?;
        answer.await.map_err(|_| DeliveryStopped)
    }

    /// Ends every subscription stream; used by graceful shutdown.
    pub(crate) fn shutdown(&self) {
        let _ = self.sender.send(Request::Shutdown);
    }

    /// Lets go of the store, so that it can finish; acks after this are not journaled.
    pub(crate) async fn close(&self) {
        let (done, closed) = oneshot::channel();
        if self.sender.send(Request::Close(done)).is_ok() {
            let _ = closed.await;
        }
    }
}

/// The delivery task run by hand, one step at a time (the simulation).
#[cfg(any(test, feature = "sim"))]
pub(crate) struct SteppedDelivery {
    delivery: task::Delivery,
    requests: mpsc::UnboundedReceiver<Request>,
}

#[cfg(any(test, feature = "sim"))]
impl SteppedDelivery {
    /// Releases what the store's marks have passed, handles every request queued, then
    /// the ack deadlines passed: what one wake-up of the task does. Returns how many
    /// requests it handled and things it released.
    pub(crate) fn step(&mut self) -> usize {
        let mut handled = self.delivery.release_passed();
        while let Ok(request) = self.requests.try_recv() {
            self.delivery.handle(request);
            handled += 1;
        }
        handled += self.delivery.release_passed();
        self.delivery.expire_ack_deadlines();
        handled
    }

    /// The earliest ack deadline, on the clock's monotonic time.
    pub(crate) fn next_deadline(&self) -> Option<u64> {
        self.delivery.next_ack_deadline()
    }
}

/// A subscriber's stream of deliveries. Dropping it (the client went away) hands its
/// unacknowledged deliveries back for redelivery.
pub(crate) struct Subscription {
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
        // What is still in the buffer never reached a client: it comes back as the same
        // attempt, not the next.
        self.receiver.close();
        let mut never_taken = Vec::new();
        while let Ok(delivered) = self.receiver.try_recv() {
            never_taken.push(delivered.delivery_id);
        }
        let _ = self.delivery.send(Request::Unsubscribe {
            namespace: self.namespace.clone(),
            id: self.id,
            never_taken,
        });
    }
}

impl From<DeliveryStopped> for TimerError {
    fn from(_: DeliveryStopped) -> Self {
        TimerError::stopped()
    }
}

/// The local backend's expirations: the delivery task, seen as the API's [`Expirations`].
impl Expirations for DeliveryHandle {
    fn subscribe(&self, options: SubscribeOptions) -> Result<DeliveryStream, TimerError> {
        let counted = self.metrics.subscribers.count(&options);
        let subscription = DeliveryHandle::subscribe(self, options)?;
        Ok(counted.around(Box::pin(subscription)))
    }

    fn ack(&self, namespace: String, delivery_ids: Vec<u64>) -> Answer<AckOutcome> {
        let delivery = self.clone();
        Answer::work(
            async move { Ok(DeliveryHandle::ack(&delivery, namespace, delivery_ids).await?) },
        )
    }

    fn dead(&self, namespace: Option<String>) -> Answer<DeadList> {
        let delivery = self.clone();
        Answer::work(async move { Ok(DeliveryHandle::dead(&delivery, namespace).await?) })
    }

    fn retry_later(
        &self,
        namespace: String,
        delivery_id: u64,
        after: Duration,
        hold: Hold,
    ) -> Answer<bool> {
        self.ask(|reply| Request::RetryLater {
            namespace,
            delivery_id,
            after,
            hold,
            reply,
        })
    }

    fn give_back(&self, namespace: String, delivery_id: u64, when: GiveBack) -> Answer<bool> {
        self.ask(|reply| Request::GiveBack {
            namespace,
            delivery_id,
            when,
            reply,
        })
    }

    fn recorded(&self) -> Answer<()> {
        self.ask(Request::Recorded)
    }

    fn waiting(&self, namespaces: Vec<String>) -> Answer<Vec<u64>> {
        self.ask(|reply| Request::Waiting { namespaces, reply })
    }

    fn redrive(&self, namespace: String, ids: Option<Vec<u64>>) -> Answer<RedriveOutcome> {
        self.ask(|reply| Request::Redrive {
            namespace,
            ids,
            reply,
        })
    }
}

impl DeliveryHandle {
    /// Sends the task the request `with_reply` makes, and answers what it replies.
    fn ask<T: Send + 'static>(
        &self,
        with_reply: impl FnOnce(oneshot::Sender<T>) -> Request,
    ) -> Answer<T> {
        let (reply, answer) = oneshot::channel();
        let sent = self.sender.send(with_reply(reply));
        Answer::work(async move {
            sent.map_err(|_| DeliveryStopped)?;
            Ok(answer.await.map_err(|_| DeliveryStopped)?)
        })
    }
}
