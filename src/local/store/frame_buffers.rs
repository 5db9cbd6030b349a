//! Frame buffers passed back from the store thread to the worker for its next batch.
//!
//! Why: a batch's frames grow from nothing by doubling, and a burst's batches are
//! hundreds of kilobytes, which the allocator takes fresh from the kernel each time: the
//! worker spent a good part of a burst of registrations on reallocations, their copies and
//! the page faults of first touch. A buffer the store has written out keeps its capacity
//! and comes back here instead of being freed.
//!
//! Bounded: at most [`KEPT_BUFFERS`] buffers of at most [`KEPT_CAPACITY`] bytes wait here,
//! so the pool holds a few megabytes at most whatever the traffic.

use std::sync::{Arc, Mutex};

/// Buffers kept for reuse.
const KEPT_BUFFERS: usize = 2;
/// A larger buffer (a rare burst's) is freed rather than kept.
const KEPT_CAPACITY: usize = 4 << 20;

#[derive(Clone, Default)]
pub(crate) struct FrameBuffers(Arc<Mutex<Vec<Vec<u8>>>>);

impl FrameBuffers {
    /// An empty buffer, with the capacity of one written out before if there is one.
    pub(crate) fn take(&self) -> Vec<u8> {
        let mut kept = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        kept.pop().unwrap_or_default()
    }

    /// Keeps `buffer` (emptied) for a later batch, if there is room for it.
    pub(crate) fn give_back(&self, mut buffer: Vec<u8>) {
        if buffer.capacity() == 0 || buffer.capacity() > KEPT_CAPACITY {
            return;
        }
        buffer.clear();
        let mut kept = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if kept.len() < KEPT_BUFFERS {
            kept.push(buffer);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_given_back_comes_back_empty_with_its_capacity_and_the_pool_is_bounded() {
        let buffers = FrameBuffers::default();
        assert_eq!(buffers.take().capacity(), 0);
        for _ in 0..2 * KEPT_BUFFERS {
            let mut buffer = Vec::with_capacity(1 << 16);
            buffer.extend_from_slice(b"frames");
            buffers.give_back(buffer);
        }
        buffers.give_back(Vec::with_capacity(KEPT_CAPACITY + 1));
        for _ in 0..KEPT_BUFFERS {
            let buffer = buffers.take();
            assert!(buffer.is_empty());
            assert_eq!(buffer.capacity(), 1 << 16);
        }
        assert_eq!(buffers.take().capacity(), 0);
    }
}
