//! The store thread's state, and its start: the segment it continues, the unsettled
//! firings every snapshot carries again, how far the segment is written and how far
//! acknowledged, and what the directory holds on disk.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::clock::Clock;
use crate::config::SyncMode;
use crate::local::store::disk::{Disk, DiskFile};
use crate::local::store::disk_budget::{self, DiskBudget};
use crate::local::store::error::{io_error, StoreError};
use crate::local::store::files::{create_segment, segment_path};
use crate::local::store::frame;
use crate::local::store::frame_buffers::FrameBuffers;
use crate::local::store::scan::KeptFrames;
use crate::local::store::snapshot_writer::SnapshotWriter;
use crate::local::store::watermark::MarksPublisher;
use crate::metrics::Metrics;

/// Fired expirations not yet settled: their frames, by (timer id, fired count).
pub(super) type Unsettled = FxHashMap<(u64, u64), KeptFrames>;

/// What a writer works with, besides the log it continues.
pub(crate) struct Parts {
    pub(crate) disk: Arc<dyn Disk>,
    /// Read for `--sync interval`'s fsyncs.
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) dir: PathBuf,
    pub(crate) sync: SyncMode,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) failed_flag: Arc<AtomicBool>,
    pub(crate) budget: Arc<DiskBudget>,
    pub(crate) marks: MarksPublisher,
}

/// The store thread's state.
pub(crate) struct Writer {
    pub(super) disk: Arc<dyn Disk>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) dir: PathBuf,
    pub(super) sync: SyncMode,
    pub(super) segment: Box<dyn DiskFile>,
    pub(super) segment_sequence: u64,
    /// The snapshot being written or sealed, on its own thread (see
    /// [`crate::local::store::snapshot_writer`]).
    pub(super) snapshot: Option<SnapshotWriter>,
    pub(super) unsettled: Unsettled,
    /// The frame of the latest boot record, which every snapshot carries so that the boot
    /// count outlives the segment that recorded it.
    pub(super) boot_frame: Vec<u8>,
    pub(super) unsynced: bool,
    /// When the segment was last synced, on `clock`'s monotonic time.
    pub(super) last_sync: u64,
    pub(super) metrics: Arc<Metrics>,
    /// Set by the first I/O error; see [`Writer::stop_on_error`].
    pub(super) failed: bool,
    /// The same, for the rest of the process to see.
    pub(super) failed_flag: Arc<AtomicBool>,
    /// Length of the current segment as written, and as far as callers have been answered:
    /// after a failure the segment is cut back to the latter (see `stop_on_error`).
    pub(super) written_bytes: u64,
    pub(super) acknowledged_bytes: u64,
    /// The number of the last batch handled: what the marks say once this group commit is
    /// written, then synced.
    pub(super) last_handled: u64,
    pub(super) marks: MarksPublisher,
    /// The attempt records of deliveries that leave once written (see
    /// [`crate::local::store::Batch::leaves_once_written`]) in the group commit being made,
    /// and whether they may have left (its written mark was published): see
    /// [`Writer::stop_on_error`].
    pub(super) attempts_in_commit: Vec<u8>,
    pub(super) attempts_left: bool,
    /// Bytes of every file in the directory, and of the snapshot being written among them
    /// (see [`disk_budget`]).
    pub(super) on_disk: u64,
    pub(super) snapshot_bytes: u64,
    pub(super) budget: Arc<DiskBudget>,
    /// Where written-out append buffers go back to the worker.
    pub(crate) buffers: FrameBuffers,
    /// True from a snapshot's start until its thread is reaped (sealed and the files it
    /// replaces deleted, or abandoned): the worker starts no snapshot meanwhile, since
    /// the next one's start would wait here, holding every group commit, for the
    /// removal to end. The worker sets it too, when it asks for a snapshot.
    pub(crate) compacting: Arc<AtomicBool>,
    /// See [`Writer::write_snapshots_stepped`].
    #[cfg(any(test, feature = "sim"))]
    pub(super) snapshots_stepped: bool,
}

impl Writer {
    /// Starts segment `sequence` with `boot_frame` (this boot's record), durable before
    /// anything else is written, so no delivery id of this boot is handed out unrecorded.
    pub(crate) fn start(
        parts: Parts,
        sequence: u64,
        unsettled: Unsettled,
        boot_frame: Vec<u8>,
    ) -> Result<Self, StoreError> {
        let Parts {
            disk,
            clock,
            dir,
            sync,
            metrics,
            failed_flag,
            budget,
            marks,
        } = parts;
        let mut segment = create_segment(disk.as_ref(), &dir, sequence)?;
        let path = segment_path(&dir, sequence);
        segment
            .append(&boot_frame)
            .and_then(|()| segment.sync_data())
            .map_err(io_error(&path))?;
        let length = (frame::FILE_HEADER.len() + boot_frame.len()) as u64;
        let on_disk = disk_budget::directory_bytes(disk.as_ref(), &dir)?;
        budget.set_on_disk(on_disk, 0);
        let last_sync = clock.monotonic();
        Ok(Self {
            disk,
            clock,
            dir,
            sync,
            segment,
            segment_sequence: sequence,
            snapshot: None,
            unsettled,
            boot_frame,
            unsynced: false,
            last_sync,
            metrics,
            failed: false,
            failed_flag,
            written_bytes: length,
            acknowledged_bytes: length,
            last_handled: 0,
            marks,
            attempts_in_commit: Vec::new(),
            attempts_left: false,
            on_disk,
            snapshot_bytes: 0,
            budget,
            buffers: FrameBuffers::default(),
            compacting: Arc::default(),
            #[cfg(any(test, feature = "sim"))]
            snapshots_stepped: false,
        })
    }
}
