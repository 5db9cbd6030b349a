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

/// What one delivery costs beyond its payload, key and namespace: the expiration, the
/// delivery around it and their reference counts.
const DELIVERY_OVERHEAD: usize = 256;

/// The bytes a delivery holds, as charged to the memory budget.
pub(super) fn delivery_bytes(delivered: &Delivered) -> u64 {
    let expiration = &delivered.expiration;
    let key = expiration.key.as_ref().map_or(0, String::len);
    (expiration.payload.len() + key + expiration.namespace.len() + DELIVERY_OVERHEAD) as u64
}

/// Puts `delivered` in a subscriber's stream, charged; false (nothing charged) if the
/// stream is full or gone.
pub(super) fn send_charged(
    sender: &mpsc::Sender<Delivered>,
    memory: &MemoryBudget,
    delivered: Delivered,
) -> bool {
    let bytes = delivery_bytes(&delivered);
    memory.charge(bytes);
    if sender.try_send(delivered).is_err() {
        memory.release(bytes);
        return false;
    }
    true
}

/// A subscriber's stream: gives back each delivery's bytes as it is taken, and those of
/// the ones still inside when dropped.
pub(super) struct ChargedStream {
    receiver: mpsc::Receiver<Delivered>,
    memory: Arc<MemoryBudget>,
}

impl ChargedStream {
    pub(super) fn new(receiver: mpsc::Receiver<Delivered>, memory: Arc<MemoryBudget>) -> Self {
        Self { receiver, memory }
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
        // Closed first, so that nothing more is sent (and charged) while draining.
        self.receiver.close();
        while let Ok(delivered) = self.receiver.try_recv() {
            self.memory.release(delivery_bytes(&delivered));
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
        let mut stream = ChargedStream::new(receiver, memory.clone());
        assert!(send_charged(&sender, &memory, delivered(b"one")));
        assert!(send_charged(&sender, &memory, delivered(b"two")));
        assert!(!send_charged(&sender, &memory, delivered(b"full")));
        assert_eq!(memory.used(), 2 * delivery_bytes(&delivered(b"one")));
        stream.next().await.expect("a delivery");
        assert_eq!(memory.used(), delivery_bytes(&delivered(b"two")));
        drop(stream);
        assert_eq!(memory.used(), 0);
        assert!(!send_charged(&sender, &memory, delivered(b"gone")));
        assert_eq!(memory.used(), 0);
    }
}
