//! Deliveries a replica holds for a subscriber, charged to its memory budget: from the
//! moment a claimed expiration is put in the subscriber's stream until the stream hands
//! it to gRPC (or is dropped with it inside). A slow client can leave up to its
//! `max_unacked` deliveries, payloads and all, waiting there.
//!
//! Claims are not refused for memory: a subscriber whose replica has reached its budget
//! simply claims nothing until there is room again, and the expirations wait in the
//! database, which costs the replica nothing.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::mpsc;

use crate::budget::MemoryBudget;
use crate::domain::Delivered;

/// What one delivery costs beyond its payload, key, namespace and trace context: the
/// expiration, the delivery around it and their reference counts.
const DELIVERY_OVERHEAD: usize = 256;

/// The bytes a delivery holds, as charged to the memory budget.
pub(super) fn delivery_bytes(delivered: &Delivered) -> u64 {
    let expiration = &delivered.expiration;
    let key = expiration.key.as_ref().map_or(0, String::len);
    let trace = expiration
        .trace
        .as_ref()
        .map_or(0, |trace| trace.held_bytes());
    (expiration.payload.len() + key + expiration.namespace.len() + DELIVERY_OVERHEAD) as u64 + trace
}

/// Puts `delivered` in a subscriber's stream, charged; handed back (nothing charged) if the
/// stream is full or gone.
pub(super) fn send_charged(
    sender: &mpsc::Sender<Delivered>,
    memory: &MemoryBudget,
    delivered: Delivered,
) -> Result<(), Delivered> {
    let bytes = delivery_bytes(&delivered);
    memory.charge(bytes);
    sender.try_send(delivered).map_err(|refused| {
        memory.release(bytes);
        refused.into_inner()
    })
}

/// How a subscriber's stream ended, shared by the stream and its subscriber's task: the
/// delivery ids a dropped stream still held (no client saw them, so the task gives their
/// claims back as the attempt they were, see `Subscriber::run`), and a count of the
/// streams whose hand-back is under way, which [`super::ClusterDeliveries::recorded`]
/// waits to see at 0. Filled under its lock before the stream closes, so a task that saw
/// the stream closed reads it whole.
pub(super) struct StreamEnd {
    state: std::sync::Mutex<EndState>,
    handing_back: Arc<tokio::sync::watch::Sender<usize>>,
}

enum EndState {
    Open,
    /// Dropped with these inside; its hand-back is counted until the task ends it.
    Dropped(Vec<u64>),
    /// The task is done (it handed back, or the replica is stopping).
    TaskGone,
}

impl StreamEnd {
    pub(super) fn new(handing_back: Arc<tokio::sync::watch::Sender<usize>>) -> Arc<Self> {
        Arc::new(Self {
            state: std::sync::Mutex::new(EndState::Open),
            handing_back,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, EndState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The task's side: what the stream left inside, if it was dropped, with the count's
    /// share of its hand-back, given up when that is dropped (after the hand-back, or
    /// as a task that failed unwinds). Called once, as the task ends.
    pub(super) fn take(&self) -> Option<(Vec<u64>, HandingBack)> {
        match std::mem::replace(&mut *self.lock(), EndState::TaskGone) {
            EndState::Dropped(never_taken) => {
                Some((never_taken, HandingBack(self.handing_back.clone())))
            }
            EndState::Open | EndState::TaskGone => None,
        }
    }
}

/// One dropped stream's hand-back under way, in [`StreamEnd`]'s count until dropped.
pub(super) struct HandingBack(Arc<tokio::sync::watch::Sender<usize>>);

impl Drop for HandingBack {
    fn drop(&mut self) {
        self.0.send_modify(|count| *count -= 1);
    }
}

/// A subscriber's stream: gives back each delivery's bytes as it is taken, and those of
/// the ones still inside when dropped, whose ids it leaves in `end`.
pub(super) struct ChargedStream {
    receiver: mpsc::Receiver<Delivered>,
    memory: Arc<MemoryBudget>,
    end: Arc<StreamEnd>,
}

impl ChargedStream {
    pub(super) fn new(
        receiver: mpsc::Receiver<Delivered>,
        memory: Arc<MemoryBudget>,
        end: Arc<StreamEnd>,
    ) -> Self {
        Self {
            receiver,
            memory,
            end,
        }
    }
}

impl tokio_stream::Stream for ChargedStream {
    type Item = Delivered;

    fn poll_next(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Option<Delivered>> {
        let polled = self.receiver.poll_recv(context);
        if let Poll::Ready(Some(delivered)) = &polled {
            self.memory.release(delivery_bytes(delivered));
        }
        polled
    }
}

impl Drop for ChargedStream {
    fn drop(&mut self) {
        let end = self.end.clone();
        let mut state = end.lock();
        // Closed first, so that nothing more is sent (and charged) while draining.
        self.receiver.close();
        let mut never_taken = Vec::new();
        while let Ok(delivered) = self.receiver.try_recv() {
            self.memory.release(delivery_bytes(&delivered));
            never_taken.push(delivered.delivery_id);
        }
        if matches!(*state, EndState::Open) {
            end.handing_back.send_modify(|count| *count += 1);
            *state = EndState::Dropped(never_taken);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Expiration, TimerId};
    use tokio_stream::StreamExt;

    fn delivered(payload: &'static [u8]) -> Delivered {
        Delivered {
            delivery_id: 1,
            expiration: Arc::new(Expiration {
                trace: None,
                namespace: Arc::from("ns"),
                id: TimerId(1),
                key: None,
                payload: bytes::Bytes::from_static(payload),
                deadline_unix: 0,
                fired_unix: 0,
                repeat: None,
                ttl: None,
                fired_count: 1,
                calendar: None,
                late: false,
                memory: Default::default(),
                over_memory_budget: false,
            }),
            attempt: 1,
        }
    }

    #[tokio::test]
    async fn what_is_taken_or_left_inside_is_given_back() {
        let memory = MemoryBudget::unlimited();
        let (sender, receiver) = mpsc::channel(2);
        let handing_back = Arc::new(tokio::sync::watch::Sender::new(0));
        let end = StreamEnd::new(handing_back.clone());
        let mut stream = ChargedStream::new(receiver, memory.clone(), end.clone());
        assert!(send_charged(&sender, &memory, delivered(b"one")).is_ok());
        assert!(send_charged(&sender, &memory, delivered(b"two")).is_ok());
        assert!(send_charged(&sender, &memory, delivered(b"full")).is_err());
        assert_eq!(memory.used(), 2 * delivery_bytes(&delivered(b"one")));
        stream.next().await.expect("a delivery");
        assert_eq!(memory.used(), delivery_bytes(&delivered(b"two")));
        drop(stream);
        assert_eq!(memory.used(), 0);
        assert_eq!(*handing_back.borrow(), 1, "a hand-back under way");
        let (never_taken, handing) = end.take().expect("dropped");
        assert_eq!(never_taken, [1], "the one left inside");
        drop(handing);
        assert_eq!(*handing_back.borrow(), 0);
        assert!(send_charged(&sender, &memory, delivered(b"gone")).is_err());
        assert_eq!(memory.used(), 0);
    }
}
