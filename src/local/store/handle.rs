//! The way to the store thread: [`StoreHandle`], cheap to clone, sends it [`Request`]s over
//! a channel, so that nobody but that thread touches the files. A handle also reads what
//! the thread shares back: whether the log failed, whether a snapshot is under way, the
//! disk budget, and the frame buffers it has written out.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;

use super::batch::Batch;
use super::disk_budget::DiskBudget;
use super::frame_buffers::FrameBuffers;

/// What the store thread is sent, handled in order.
pub(crate) enum Request {
    Append(Batch),
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

    /// Appends a batch; its callbacks run once it is on disk (per the sync mode). If the
    /// store has stopped, nothing runs: the callers' reply channels close, which they report
    /// as unavailable.
    pub fn append(&self, batch: Batch) {
        self.budget.queued(batch.frames.len() as u64);
        let _ = self.sender.send(Request::Append(batch));
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
