//! The way to the store thread: [`StoreHandle`], cheap to clone, sends it [`Request`]s over
//! a channel, so that nobody but that thread touches the files. A handle also reads what
//! the thread shares back: how far the log is written and durable ([`super::watermark`]),
//! whether it failed, whether a snapshot is under way, the disk budget, and the frame
//! buffers it has written out.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, PoisonError};

use super::batch::Batch;
use super::disk_budget::DiskBudget;
use super::frame_buffers::FrameBuffers;
use super::watermark::Marks;

/// What the store thread is sent, handled in order.
pub(crate) enum Request {
    /// A batch, with the number it was given (see [`StoreHandle::append`]).
    Append(u64, Batch),
    /// Starts a new segment; what follows until `EndSnapshot` is the snapshot's content.
    BeginSnapshot,
    SnapshotChunk(QueuedChunk),
    EndSnapshot,
}

/// A snapshot chunk on its way to the store thread, counted in the handle's backlog until
/// it is written (or dropped): the worker makes chunks far faster than a disk writes them,
/// and without the count a snapshot would queue a second copy of every live timer.
pub(crate) struct QueuedChunk {
    pub(super) frames: Vec<u8>,
    backlog: Arc<AtomicUsize>,
}

impl Drop for QueuedChunk {
    fn drop(&mut self) {
        self.backlog.fetch_sub(self.frames.len(), Ordering::AcqRel);
    }
}

/// The way to the store thread; cheap to clone.
#[derive(Clone)]
pub struct StoreHandle {
    pub(super) sender: Sender<Request>,
    /// The number of the last batch appended, by any handle: batches are numbered in the
    /// order the store thread receives them, so the number and the send share one lock.
    pub(super) appended: Arc<Mutex<u64>>,
    /// The marks the store thread publishes.
    pub(super) marks: Marks,
    pub(super) failed: Arc<AtomicBool>,
    /// Bytes of snapshot chunks sent and not yet written.
    pub(super) snapshot_backlog: Arc<AtomicUsize>,
    /// See [`super::writer::Writer::compacting`].
    pub(super) compacting: Arc<AtomicBool>,
    pub(super) budget: Arc<DiskBudget>,
    pub(super) buffers: FrameBuffers,
}

impl StoreHandle {
    /// True once a write or fsync failed: the store refuses everything from then on, and
    /// tickd must stop (see `server::run`).
    pub(crate) fn has_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// The same answer, readable after every handle is gone (the store's last commit).
    pub(crate) fn failure_flag(&self) -> Arc<AtomicBool> {
        self.failed.clone()
    }

    /// Appends a batch and returns its number: what waits for it is released once the
    /// store's marks ([`Self::marks`]) pass that number. If the store has stopped they never
    /// do: the marks say it failed, or (the thread gone) their channel is closed.
    pub fn append(&self, batch: Batch) -> u64 {
        self.budget.queued(batch.frames.len() as u64);
        let mut appended = self.appended.lock().unwrap_or_else(PoisonError::into_inner);
        *appended += 1;
        let _ = self.sender.send(Request::Append(*appended, batch));
        *appended
    }

    /// The number of the last batch appended by anyone: what must wait for everything
    /// appended so far (an answer that changed nothing must not overtake the records of
    /// earlier calls) waits for this one.
    pub(crate) fn last_appended(&self) -> u64 {
        *self.appended.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The store thread's marks: how far the log is written, durable, and whether it failed.
    pub(crate) fn marks(&self) -> Marks {
        self.marks.clone()
    }

    /// An empty buffer for a batch's frames: one the store has written out, if it has one
    /// to spare (see [`super::frame_buffers`]).
    pub(crate) fn frame_buffer(&self) -> Vec<u8> {
        self.buffers.take()
    }

    /// The disk budget this store counts its files against.
    pub(crate) fn disk_budget(&self) -> &Arc<DiskBudget> {
        &self.budget
    }

    pub(crate) fn begin_snapshot(&self) {
        self.compacting.store(true, Ordering::Release);
        let _ = self.sender.send(Request::BeginSnapshot);
    }

    /// True from [`Self::begin_snapshot`] until the store has sealed that snapshot and
    /// deleted what it replaces (or abandoned it): no next snapshot should start before.
    pub(crate) fn is_compacting(&self) -> bool {
        self.compacting.load(Ordering::Acquire)
    }

    pub(crate) fn snapshot_chunk(&self, frames: Vec<u8>) {
        self.snapshot_backlog
            .fetch_add(frames.len(), Ordering::AcqRel);
        let chunk = QueuedChunk {
            frames,
            backlog: self.snapshot_backlog.clone(),
        };
        let _ = self.sender.send(Request::SnapshotChunk(chunk));
    }

    /// Bytes of snapshot chunks not yet written: the worker waits while there are many.
    pub(crate) fn snapshot_backlog(&self) -> usize {
        self.snapshot_backlog.load(Ordering::Acquire)
    }

    pub(crate) fn end_snapshot(&self) {
        let _ = self.sender.send(Request::EndSnapshot);
    }
}
