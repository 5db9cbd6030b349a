//! The store thread's side of a snapshot: a new segment begun and the snapshot's writer
//! started, chunks passed on and counted against the disk budget, the last frames and the
//! seal handed over, and the outcome taken in once the files it replaces are gone.

use std::sync::atomic::Ordering;

use tracing::info;

use super::state::Writer;
use crate::local::store::error::{io_error, StoreError};
use crate::local::store::files::{create_segment, segment_path};
use crate::local::store::frame;
use crate::local::store::handle::QueuedChunk;
use crate::local::store::snapshot_writer::SnapshotWriter;

impl Writer {
    pub(super) fn begin_snapshot(&mut self) -> Result<(), StoreError> {
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

    /// From now on snapshots are written on the thread that steps this writer, each chunk
    /// and the seal as the store handles them, so that a simulated run stays a function of
    /// its seed (crashes and disk faults hit a snapshot at the same point every time).
    #[cfg(any(test, feature = "sim"))]
    pub(crate) fn write_snapshots_stepped(&mut self) {
        self.snapshots_stepped = true;
    }

    /// Passes a chunk on to the snapshot thread, counting it as on disk already (the disk
    /// budget would rather count it early than late).
    pub(super) fn write_snapshot(&mut self, chunk: QueuedChunk) -> Result<(), StoreError> {
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
    pub(super) fn end_snapshot(&mut self) {
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

    pub(super) fn is_sealing(&self) -> bool {
        self.snapshot
            .as_ref()
            .is_some_and(SnapshotWriter::is_sealing)
    }

    /// Abandons a snapshot still being written, if any: its thread deletes the partial
    /// file, and recovery starts from the snapshot before it.
    pub(super) fn abandon_snapshot(&mut self) {
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
    pub(super) fn reap_sealed_snapshot(&mut self, wait: bool) -> Result<(), StoreError> {
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
