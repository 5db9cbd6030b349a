//! Puts a snapshot on disk while it is being written, off the store thread.
//!
//! Why: a snapshot of a million timers is tens of megabytes. Written into the page cache
//! and synced once at the end, that one fsync held the store thread (and every group
//! commit behind it: registrations' answers, firings waiting for the log) for 200 ms and
//! more. Here every [`FLUSH_EVERY`] bytes a short-lived thread fdatasyncs the file (through
//! a clone of its descriptor), so the final sync finds little left to write.
//!
//! The hidden contract: a clone shares the open file, and with it the kernel's record of a
//! failed write-back, which only the first fsync to see it is told about. So a background
//! flush's error is never dropped: [`SnapshotFlusher::finish`] joins every flush and
//! reports the first error, and the snapshot is sealed only if there was none.

use std::fs::File;
use std::io;
use std::thread::JoinHandle;

/// Snapshot bytes written between two background flushes.
const FLUSH_EVERY: u64 = 8 << 20;

#[derive(Default)]
pub(super) struct SnapshotFlusher {
    unflushed: u64,
    flushes: Vec<JoinHandle<io::Result<()>>>,
}

impl SnapshotFlusher {
    /// Counts `bytes` just written to `file`; past [`FLUSH_EVERY`], starts a flush.
    pub(super) fn wrote(&mut self, file: &File, bytes: u64) -> io::Result<()> {
        self.unflushed += bytes;
        if self.unflushed < FLUSH_EVERY {
            return Ok(());
        }
        self.unflushed = 0;
        let clone = file.try_clone()?;
        let flush = std::thread::Builder::new()
            .name("tickd-snapshot-flush".into())
            .spawn(move || clone.sync_data())?;
        self.flushes.push(flush);
        Ok(())
    }

    /// Waits for every flush started; the first error, if any.
    pub(super) fn finish(self) -> io::Result<()> {
        let mut outcome = Ok(());
        for flush in self.flushes {
            let flushed = flush
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("a snapshot flush thread panicked")));
            if outcome.is_ok() {
                outcome = flushed;
            }
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_flush_starts_every_few_megabytes_and_finish_waits_for_all() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut file = File::create(dir.path().join("snapshot")).expect("create");
        let mut flusher = SnapshotFlusher::default();
        let chunk = vec![7u8; 1 << 20];
        for _ in 0..((2 * FLUSH_EVERY) >> 20) + 1 {
            file.write_all(&chunk).expect("write");
            flusher
                .wrote(&file, chunk.len() as u64)
                .expect("flush started");
        }
        assert_eq!(flusher.flushes.len(), 2);
        flusher.finish().expect("every flush succeeded");
    }
}
