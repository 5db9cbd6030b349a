//! One group commit on the store thread: the requests handled, their frames written and
//! synced as the sync mode asks, the marks published after each; and after any I/O error,
//! the stop for good that cuts the log back to what was acknowledged.

use std::io;
use std::sync::atomic::Ordering;
use std::time::Instant;

use tracing::error;

use super::state::Writer;
use crate::config::SyncMode;
use crate::local::store::batch::Batch;
use crate::local::store::error::{io_error, StoreError};
use crate::local::store::files::segment_path;
use crate::local::store::handle::Request;
use crate::local::store::scan::KeptFrames;
use crate::local::store::sync_mode::SYNC_INTERVAL;

/// Capacity the store keeps for the next group commit's frames after writing one.
const PENDING_KEPT_BYTES: usize = 1 << 20;

impl Writer {
    /// After any write or fsync error the store stops for good: what is on disk may end in
    /// a partial frame, which recovery can only cut off while it is the last thing written,
    /// and after a failed fsync a later one proves nothing. The marks say it failed, so
    /// whoever waits for a later batch drops what waits unsent: its callers see the store as
    /// unavailable rather than a false acknowledgement; so do all later ones.
    pub(super) fn stop_on_error(&mut self, result: Result<(), StoreError>, pending: &mut Batch) {
        if let Err(error) = result {
            error!(error = %error, "the log failed: refusing every call and stopping");
            self.failed = true;
            self.failed_flag.store(true, Ordering::Release);
            self.marks.failed();
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

    pub(super) fn handle(
        &mut self,
        request: Request,
        pending: &mut Batch,
    ) -> Result<(), StoreError> {
        if self.failed {
            return Ok(());
        }
        match request {
            Request::Append(number, batch) => {
                crate::faults::panic_if_injected("store");
                debug_assert!(number > self.last_handled, "batches come in their order");
                self.last_handled = number;
                for (key, fired) in batch.fired {
                    let kept = KeptFrames {
                        fired,
                        attempted: Vec::new(),
                    };
                    self.unsettled.insert(key, kept);
                }
                // Attempts before settlements: a batch that records both settles.
                for (key, attempted) in batch.attempted {
                    if batch.leaves_once_written {
                        self.attempts_in_commit.extend_from_slice(&attempted);
                    }
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
                // The first batch of a group commit lends its buffer to it; the buffer it
                // replaces, or the batch's copied from, goes back to the worker.
                let mut frames = batch.frames;
                if pending.frames.is_empty() {
                    std::mem::swap(&mut pending.frames, &mut frames);
                } else {
                    pending.frames.extend_from_slice(&frames);
                }
                self.buffers.give_back(frames);
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

    /// Writes what is pending and publishes the written mark, then syncs as the mode asks
    /// and publishes the durable one.
    pub(super) fn commit(&mut self, pending: &mut Batch) -> Result<(), StoreError> {
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
        // From here deliveries may leave (see `Batch::leaves_once_written`).
        self.marks.written(self.last_handled);
        self.attempts_left = !self.attempts_in_commit.is_empty();
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
            self.marks.durable(self.last_handled);
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
        self.marks.durable(self.last_handled);
        pending.held.clear();
        Ok(())
    }

    /// The error of a failed write or sync of the open segment. Its path is made only then:
    /// a commit is the store's hot path, and naming the file costs a formatted string.
    fn segment_error(&self, source: io::Error) -> StoreError {
        io_error(&segment_path(&self.dir, self.segment_sequence))(source)
    }

    /// When `--sync interval` owes an fsync: the monotonic time the store thread wakes at
    /// to make what it wrote durable (None: nothing unsynced, or another sync mode). The
    /// simulation steps the store at that time, as the thread would wake.
    #[cfg(any(test, feature = "sim"))]
    pub(crate) fn interval_sync_due(&self) -> Option<u64> {
        (self.sync == SyncMode::Interval && self.unsynced && !self.failed)
            .then(|| self.last_sync + SYNC_INTERVAL.as_nanos() as u64)
    }
}
