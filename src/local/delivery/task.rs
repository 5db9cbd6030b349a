//! The delivery task: one tokio task owns every namespace's
//! [`NamespaceQueue`](super::queue::NamespaceQueue) and the bounds across them
//! ([`Budget`](super::budget::Budget)), and handles the [`Request`]s its handle sends.
//!
//! Here are its loop and the requests' routing. Its state is in [`state`]; fired
//! expirations come in through [`intake`], and those that cannot be delivered are kept in
//! [`dead`] (and sent back by [`redrive`]). [`subscribers`] come and go, [`dispatch`] hands
//! them what waits, and [`acks`] settle it or, past their deadline, take it back; what
//! must outlive a restart is written by [`journal`], and what waits for the log to pass it
//! is held in `log_waits`, released by [`awaiting`] as the store's marks move.

mod acks;
mod awaiting;
mod dead;
mod dispatch;
mod intake;
mod journal;
mod redrive;
mod state;
mod subscribers;

use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::request::Request;
use crate::local::store::watermark::{Marks, StoreEnded};
pub(super) use state::Delivery;

/// How many queued requests are handled before ack deadlines are looked at again.
const REQUEST_BATCH: usize = 256;

impl Delivery {
    pub(super) async fn run(mut self, mut requests: mpsc::UnboundedReceiver<Request>) {
        let mut batch = Vec::with_capacity(REQUEST_BATCH);
        // Cleared once the store thread has ended: its last marks are final.
        let mut marks = self.marks.clone();
        loop {
            let next_deadline = self
                .ack_deadlines
                .next_expiration()
                .map(|at| Instant::now() + Duration::from_nanos(at.saturating_sub(self.now())));
            tokio::select! {
                received = requests.recv_many(&mut batch, REQUEST_BATCH) => {
                    if received == 0 {
                        break;
                    }
                    for request in batch.drain(..) {
                        self.handle(request);
                    }
                }
                // Woken by the marks only while something waits for them.
                moved = marks_changed(&mut marks), if self.awaits_the_log() => {
                    if moved.is_err() {
                        marks = None;
                    }
                }
                _ = sleep_until(next_deadline) => {}
            }
            self.release_passed();
            if marks.is_none() && self.awaits_the_log() {
                // The store thread ended (a panic, say) without a failure to publish: its
                // last marks are final, and what they have not passed never will be.
                self.store_ended();
            }
            self.expire_ack_deadlines();
        }
        // Every handle is gone: what waits for the store's last commit is still answered.
        while let Some(moving) = marks.as_mut().filter(|_| self.awaits_the_log()) {
            if moving.moved().await.is_err() {
                marks = None;
            }
            self.release_passed();
        }
    }

    /// The earliest ack deadline, on the clock's monotonic time.
    #[cfg(any(test, feature = "sim"))]
    pub(super) fn next_ack_deadline(&self) -> Option<u64> {
        self.ack_deadlines.next_expiration()
    }

    pub(super) fn handle(&mut self, request: Request) {
        match request {
            Request::Fired(rounds) => {
                crate::faults::panic_if_injected("delivery");
                self.fired(rounds)
            }
            Request::Subscribe {
                options,
                rules,
                id,
                sender,
            } => self.subscribe(options, rules, id, sender),
            Request::Unsubscribe {
                namespace,
                id,
                never_taken,
            } => self.unsubscribe(&namespace, id, &never_taken),
            Request::Pulled { namespace, id } => self.pulled(&namespace, id),
            Request::Ack {
                namespace,
                delivery_ids,
                reply,
            } => self.ack(&namespace, delivery_ids, reply),
            Request::RetryLater {
                namespace,
                delivery_id,
                after,
                hold,
                reply,
            } => {
                let _ = reply.send(self.retry_later(&namespace, delivery_id, after, hold));
            }
            Request::GiveBack {
                namespace,
                delivery_id,
                when,
                reply,
            } => {
                let namespace: std::sync::Arc<str> = namespace.as_str().into();
                let _ = reply.send(self.give_back(&namespace, delivery_id, when));
            }
            Request::Dead { namespace, reply } => {
                let _ = reply.send(self.dead(namespace.as_deref()));
            }
            Request::Redrive {
                namespace,
                ids,
                reply,
            } => self.redrive(&namespace, ids, reply),
            Request::Recorded(reply) => self.after_written(reply),
            Request::Waiting { namespaces, reply } => {
                let waiting = namespaces.iter().map(|namespace| {
                    self.namespaces
                        .get(namespace.as_str())
                        .map_or(0, |queue| queue.waiting.len() as u64)
                });
                let _ = reply.send(waiting.collect());
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
}

/// The store's marks moving (Err: the store thread ended); never, without a store.
async fn marks_changed(marks: &mut Option<Marks>) -> Result<(), StoreEnded> {
    match marks {
        Some(marks) => marks.moved().await,
        None => std::future::pending().await,
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
