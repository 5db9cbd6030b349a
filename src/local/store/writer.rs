//! The store thread ("tickd-store"): it owns the current segment, writes each group commit
//! and fsyncs it as the sync mode asks before running its callbacks, passes snapshot chunks
//! on to the snapshot thread ([`super::snapshot_writer`]), and after any I/O error stops
//! for good, cutting the log back to what was acknowledged.

/// How often the store thread looks whether a snapshot sealing in the background is done.
const SEAL_POLL: Duration = Duration::from_millis(5);

use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;
use tracing::{error, info};

use super::disk::{Disk, DiskFile};
use super::disk_budget::{self, DiskBudget};
use super::frame_buffers::FrameBuffers;
use super::scan::KeptFrames;
use super::snapshot_writer::SnapshotWriter;
use super::{
    create_segment, frame, io_error, segment_path, Batch, QueuedChunk, Request, StoreError,
    SyncMode, SYNC_INTERVAL,
};
use crate::clock::Clock;
use crate::metrics::Metrics;

/// Capacity the store keeps for the next group commit's frames after writing one.
const PENDING_KEPT_BYTES: usize = 1 << 20;

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
}

/// The store thread's state.
pub(crate) struct Writer {
    disk: Arc<dyn Disk>,
    clock: Arc<dyn Clock>,
    dir: PathBuf,
    sync: SyncMode,
    segment: Box<dyn DiskFile>,
    segment_sequence: u64,
    /// The snapshot being written or sealed, on its own thread (see [`super::snapshot_writer`]).
    snapshot: Option<SnapshotWriter>,
    unsettled: Unsettled,
    /// The frame of the latest boot record, which every snapshot carries so that the boot
    /// count outlives the segment that recorded it.
    boot_frame: Vec<u8>,
    unsynced: bool,
    /// When the segment was last synced, on `clock`'s monotonic time.
    last_sync: u64,
    metrics: Arc<Metrics>,
    /// Set by the first I/O error; see [`Writer::stop_on_error`].
    failed: bool,
    /// The same, for the rest of the process to see.
    failed_flag: Arc<AtomicBool>,
    /// Length of the current segment as written, and as far as callers have been answered:
    /// after a failure the segment is cut back to the latter (see `stop_on_error`).
    written_bytes: u64,
    acknowledged_bytes: u64,
    /// The attempt records in the group commit being made, and whether its deliveries have
    /// left (its `on_written` callbacks ran): see [`Writer::stop_on_error`].
    attempts_in_commit: Vec<u8>,
    attempts_left: bool,
    /// Bytes of every file in the directory, and of the snapshot being written among them
    /// (see [`disk_budget`]).
    on_disk: u64,
    snapshot_bytes: u64,
    budget: Arc<DiskBudget>,
    /// Where written-out append buffers go back to the worker.
    pub(super) buffers: FrameBuffers,
    /// True from a snapshot's start until its thread is reaped (sealed and the files it
    /// replaces deleted, or abandoned): the worker starts no snapshot meanwhile, since
    /// the next one's start would wait here, holding every group commit, for the
    /// removal to end. The worker sets it too, when it asks for a snapshot.
    pub(super) compacting: Arc<AtomicBool>,
    /// See [`Writer::write_snapshots_stepped`].
    #[cfg(any(test, feature = "sim"))]
    snapshots_stepped: bool,
}

impl Writer {
    /// Starts segment `sequence` with `boot_frame` (this boot's record), durable before
    /// anything else is written, so no delivery id of this boot is handed out unrecorded.
    pub(super) fn start(
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

    pub(super) fn run(mut self, requests: Receiver<Request>) {
        let mut pending = Batch::default();
        loop {
            // A snapshot sealing in the background is looked at every `SEAL_POLL`, so that
            // the space it gives back counts soon even when no append comes.
            let wait = match (self.unsynced, self.is_sealing()) {
                (true, _) => Some(SYNC_INTERVAL),
                (false, true) => Some(SEAL_POLL),
                (false, false) => None,
            };
            let first = match wait {
                Some(wait) => match requests.recv_timeout(wait) {
                    Ok(request) => Some(request),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => break,
                },
                None => match requests.recv() {
                    Ok(request) => Some(request),
                    Err(_) => break,
                },
            };
            // Everything queued meanwhile joins this group commit.
            self.round(first.into_iter().chain(requests.try_iter()), &mut pending);
        }
        self.finish(&mut pending);
    }

    /// One group commit: handles `requests`, writes and syncs what they appended (as the
    /// sync mode asks), runs their callbacks, and takes in a snapshot done sealing.
    pub(crate) fn round(&mut self, requests: impl Iterator<Item = Request>, pending: &mut Batch) {
        for request in requests {
            let handled = self.handle(request, pending);
            self.stop_on_error(handled, pending);
        }
        let committed = self.commit(pending);
        self.stop_on_error(committed, pending);
        let reaped = self.reap_sealed_snapshot(false);
        self.stop_on_error(reaped, pending);
    }

    /// The last commit once every handle is gone, then the snapshot's end and a last sync.
    pub(crate) fn finish(&mut self, pending: &mut Batch) {
        let committed = self.commit(pending);
        self.stop_on_error(committed, pending);
        // A snapshot still being written is abandoned (the next start recovers from the
        // one before); one sealing is waited for.
        self.abandon_snapshot();
        let reaped = self.reap_sealed_snapshot(true);
        self.stop_on_error(reaped, pending);
        if !self.failed {
            let _ = self.segment.sync_data();
        }
    }

    /// After any write or fsync error the store stops for good: what is on disk may end in
    /// a partial frame, which recovery can only cut off while it is the last thing written,
    /// and after a failed fsync a later one proves nothing. Pending replies are dropped
    /// unsent, so their callers see the store as unavailable rather than a false
    /// acknowledgement; so are all later ones.
    fn stop_on_error(&mut self, result: Result<(), StoreError>, pending: &mut Batch) {
        if let Err(error) = result {
            error!(error = %error, "the log failed: refusing every call and stopping");
            self.failed = true;
            self.failed_flag.store(true, Ordering::Release);
            // Records written after the last answer belong to calls now refused: cut them
            // off, so that a restart does not bring back what its callers were told failed.
            // Shortening a file frees space, so this works on a full disk too.
            let cut = self
                .segment
                .set_len(self.acknowledged_bytes)
                .and_then(|()| self.segment.sync_data());
            match cut {
                Ok(()) => error!(
                    segment = %segment_path(&self.dir, self.segment_sequence).display(),
                    length = self.acknowledged_bytes,
                    "cut the log back to what was acknowledged"
                ),
                Err(error) => error!(%error, "could not cut the log back to what was acknowledged"),
            }
            self.keep_attempts_that_left();
            // One already sealing holds only what was acknowledged, and may finish.
            self.abandon_snapshot();
        }
        if self.failed {
            *pending = Batch::default();
        }
    }

    /// After the cut: the attempt records of deliveries that already left go back in. Why:
    /// a subscriber may hold those deliveries, so their attempts happened, and were they
    /// cut with the refused calls around them, an expiration whose every delivery ends in
    /// a failed fsync would come back at the same attempt forever instead of going dead.
    /// (Found by the simulation: a poison expiration redelivered at its last attempt.)
    fn keep_attempts_that_left(&mut self) {
        if !std::mem::take(&mut self.attempts_left) || self.attempts_in_commit.is_empty() {
            return;
        }
        let frames = std::mem::take(&mut self.attempts_in_commit);
        let kept = self
            .segment
            .append(&frames)
            .and_then(|()| self.segment.sync_data());
        match kept {
            Ok(()) => error!(
                bytes = frames.len(),
                "kept the attempts of deliveries that had left"
            ),
            Err(error) => error!(%error, "could not keep the attempts of deliveries that had left"),
        }
    }

    fn handle(&mut self, request: Request, pending: &mut Batch) -> Result<(), StoreError> {
        if self.failed {
            return Ok(());
        }
        match request {
            Request::Append(batch) => {
                crate::faults::panic_if_injected("store");
                for (key, fired) in batch.fired {
                    let kept = KeptFrames {
                        fired,
                        attempted: Vec::new(),
                    };
                    self.unsettled.insert(key, kept);
                }
                // Attempts before settlements: a batch that records both settles.
                for (key, attempted) in batch.attempted {
                    self.attempts_in_commit.extend_from_slice(&attempted);
                    if let Some(kept) = self.unsettled.get_mut(&key) {
                        kept.attempted = attempted;
                    }
                }
                for key in &batch.settled {
                    self.unsettled.remove(key);
                }
                if let Some(boot) = batch.boot {
                    self.boot_frame = boot;
                }
                pending.on_written.extend(batch.on_written);
                // The first batch of a group commit lends its buffer to it; the buffer it
                // replaces, or the batch's copied from, goes back to the worker.
                let mut frames = batch.frames;
                if pending.frames.is_empty() {
                    std::mem::swap(&mut pending.frames, &mut frames);
                } else {
                    pending.frames.extend_from_slice(&frames);
                }
                self.buffers.give_back(frames);
                pending.on_durable.extend(batch.on_durable);
                pending.held.extend(batch.held);
            }
            Request::BeginSnapshot => {
                self.commit(pending)?;
                self.begin_snapshot()?;
            }
            Request::SnapshotChunk(chunk) => self.write_snapshot(chunk)?,
            Request::EndSnapshot => {
                // What the snapshot holds must be durable before it is sealed.
                self.commit(pending)?;
                self.end_snapshot();
            }
        }
        Ok(())
    }

    /// Writes what is pending, syncs as the mode asks, then runs the callbacks.
    fn commit(&mut self, pending: &mut Batch) -> Result<(), StoreError> {
        if self.failed {
            return Ok(());
        }
        if !pending.frames.is_empty() {
            self.segment
                .append(&pending.frames)
                .map_err(|source| self.segment_error(source))?;
            let written = pending.frames.len() as u64;
            self.written_bytes += written;
            self.on_disk += written;
            self.budget
                .written(written, self.on_disk, self.snapshot_bytes);
            pending.frames.clear();
            // A burst's group commit must not stay allocated after it.
            pending.frames.shrink_to(PENDING_KEPT_BYTES);
            self.unsynced = true;
        }
        for callback in pending.on_written.drain(..) {
            callback();
            self.attempts_left = true;
        }
        let sync_now = match self.sync {
            SyncMode::Always => self.unsynced,
            SyncMode::Interval => {
                let since = self.clock.monotonic().saturating_sub(self.last_sync);
                self.unsynced && since >= SYNC_INTERVAL.as_nanos() as u64
            }
            SyncMode::None => false,
        };
        // Planted bugs: answers before the sync, or no sync at all.
        if crate::faults::planted("ack-before-durable") {
            for callback in pending.on_durable.drain(..) {
                callback();
            }
        }
        if sync_now && !crate::faults::planted("skip-fsync") {
            let started = Instant::now();
            self.segment
                .sync_data()
                .map_err(|source| self.segment_error(source))?;
            self.metrics
                .log_fsync_seconds
                .observe(started.elapsed().as_secs_f64());
            self.unsynced = false;
            self.last_sync = self.clock.monotonic();
        }
        self.acknowledged_bytes = self.written_bytes;
        self.attempts_in_commit.clear();
        self.attempts_left = false;
        for callback in pending.on_durable.drain(..) {
            callback();
        }
        pending.held.clear();
        Ok(())
    }

    /// The error of a failed write or sync of the open segment. Its path is made only then:
    /// a commit is the store's hot path, and naming the file costs a formatted string.
    fn segment_error(&self, source: io::Error) -> StoreError {
        io_error(&segment_path(&self.dir, self.segment_sequence))(source)
    }

    fn begin_snapshot(&mut self) -> Result<(), StoreError> {
        // One snapshot at a time: the last one's seal must be done. The worker waits for
        // `compacting` to clear before it asks, so there is normally none left here.
        self.abandon_snapshot();
        self.reap_sealed_snapshot(true)?;
        // Recovery only forgives a torn record at the end of the newest segment, so the
        // segment being closed must be whole on disk first (`--sync interval` may owe it).
        let closing = segment_path(&self.dir, self.segment_sequence);
        self.segment.sync_data().map_err(io_error(&closing))?;
        self.unsynced = false;
        let segment = create_segment(self.disk.as_ref(), &self.dir, self.segment_sequence + 1)?;
        self.segment_sequence += 1;
        self.segment = segment;
        // A new segment holds its header only (create_segment made it, new).
        self.written_bytes = frame::FILE_HEADER.len() as u64;
        self.acknowledged_bytes = self.written_bytes;
        self.snapshot = Some(self.start_snapshot_writer()?);
        // Reaping the previous snapshot above cleared what the worker set for this one.
        self.compacting.store(true, Ordering::Release);
        // The new segment's header and the snapshot's.
        self.snapshot_bytes = frame::FILE_HEADER.len() as u64;
        self.grew(2 * frame::FILE_HEADER.len() as u64);
        Ok(())
    }

    /// The snapshot's writer: on a thread of its own, or (the simulation, see
    /// [`Writer::write_snapshots_stepped`]) on this one.
    fn start_snapshot_writer(&self) -> Result<SnapshotWriter, StoreError> {
        #[cfg(any(test, feature = "sim"))]
        if self.snapshots_stepped {
            return Ok(SnapshotWriter::start_stepped(
                self.disk.clone(),
                &self.dir,
                self.segment_sequence,
            ));
        }
        SnapshotWriter::start(self.disk.clone(), &self.dir, self.segment_sequence)
    }

    /// When `--sync interval` owes an fsync: the monotonic time the store thread wakes at
    /// to make what it wrote durable (None: nothing unsynced, or another sync mode). The
    /// simulation steps the store at that time, as the thread would wake.
    #[cfg(any(test, feature = "sim"))]
    pub(crate) fn interval_sync_due(&self) -> Option<u64> {
        (self.sync == SyncMode::Interval && self.unsynced && !self.failed)
            .then(|| self.last_sync + SYNC_INTERVAL.as_nanos() as u64)
    }

    /// From now on snapshots are written on the thread that steps this writer, each chunk
    /// and the seal as the store handles them, so that a simulated run stays a function of
    /// its seed (crashes and disk faults hit a snapshot at the same point every time).
    #[cfg(any(test, feature = "sim"))]
    pub(crate) fn write_snapshots_stepped(&mut self) {
        self.snapshots_stepped = true;
    }

    /// Passes a chunk on to the snapshot thread, counting it as on disk already (the disk
    /// budget would rather count it early than late).
    fn write_snapshot(&mut self, chunk: QueuedChunk) -> Result<(), StoreError> {
        let Some(snapshot) = &mut self.snapshot else {
            return Ok(());
        };
        let bytes = chunk.frames.len() as u64;
        if !snapshot.write(chunk) {
            // The thread stopped on an error: that error is the store's.
            let failed = self.snapshot.take().map(SnapshotWriter::join);
            return failed.map_or(Ok(()), |outcome| outcome.map(drop));
        }
        self.grew_snapshot(bytes);
        Ok(())
    }

    /// Counts bytes of the snapshot being written as on disk.
    fn grew_snapshot(&mut self, bytes: u64) {
        self.snapshot_bytes += bytes;
        self.grew(bytes);
    }

    /// Counts bytes written besides appends (file headers, snapshots).
    fn grew(&mut self, bytes: u64) {
        self.on_disk += bytes;
        self.budget.set_on_disk(self.on_disk, self.snapshot_bytes);
    }

    /// Hands the snapshot its last frames (the unsettled expirations) and the seal, which
    /// its thread carries out while group commits go on.
    fn end_snapshot(&mut self) {
        let Some(snapshot) = &mut self.snapshot else {
            return;
        };
        let mut last_frames = self.boot_frame.clone();
        for kept in self.unsettled.values() {
            last_frames.extend_from_slice(&kept.fired);
            last_frames.extend_from_slice(&kept.attempted);
        }
        let bytes = last_frames.len() as u64;
        snapshot.seal(last_frames);
        self.grew_snapshot(bytes);
    }

    fn is_sealing(&self) -> bool {
        self.snapshot
            .as_ref()
            .is_some_and(SnapshotWriter::is_sealing)
    }

    /// Abandons a snapshot still being written, if any: its thread deletes the partial
    /// file, and recovery starts from the snapshot before it.
    fn abandon_snapshot(&mut self) {
        if let Some(snapshot) = self.snapshot.take_if(|snapshot| !snapshot.is_sealing()) {
            let _ = snapshot.join();
            self.compacting.store(false, Ordering::Release);
            self.on_disk = self.on_disk.saturating_sub(self.snapshot_bytes);
            self.snapshot_bytes = 0;
            self.budget.set_on_disk(self.on_disk, 0);
        }
    }

    /// Takes in the outcome of a snapshot whose thread has ended (or, with `wait`, of one
    /// sealing): the files it replaced are gone, and the disk budget counts what that gave
    /// back. A failed snapshot is the store's failure.
    fn reap_sealed_snapshot(&mut self, wait: bool) -> Result<(), StoreError> {
        let done =
            |snapshot: &SnapshotWriter| snapshot.is_finished() || (wait && snapshot.is_sealing());
        let Some(snapshot) = self.snapshot.take_if(|snapshot| done(snapshot)) else {
            return Ok(());
        };
        let sealed = snapshot.join();
        self.compacting.store(false, Ordering::Release);
        self.snapshot_bytes = 0;
        let sealed = sealed?;
        self.on_disk = self.on_disk.saturating_sub(sealed.removed_bytes);
        self.budget.set_on_disk(self.on_disk, 0);
        self.budget.compacted();
        info!(
            snapshot = %sealed.path.display(),
            removed_files = sealed.removed_files,
            disk_used = self.on_disk,
            elapsed_ms = sealed.sealing.as_millis() as u64,
            "snapshot written, log compacted"
        );
        Ok(())
    }
}
