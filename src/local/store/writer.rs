//! The store thread ("tickd-store"): it owns the current segment, writes each group commit
//! and fsyncs it as the sync mode asks, publishing after each step how far the log is
//! written and durable ([`super::watermark`]), passes snapshot chunks
//! on to the snapshot thread ([`super::snapshot_writer`]), and after any I/O error stops
//! for good, cutting the log back to what was acknowledged.
//!
//! Here is the thread's loop; its state is in [`state`], one group commit and the stop
//! after an error in [`commit`], and its side of a snapshot in [`snapshots`].

mod commit;
mod snapshots;
mod state;

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

use super::batch::Batch;
use super::handle::Request;
use super::sync_mode::SYNC_INTERVAL;
pub(crate) use state::{Parts, Writer};

/// The store thread's name.
pub(crate) const STORE_THREAD: &str = "tickd-store";

/// How often the store thread looks whether a snapshot sealing in the background is done.
const SEAL_POLL: Duration = Duration::from_millis(5);

impl Writer {
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
    /// sync mode asks), publishes the marks, and takes in a snapshot done sealing.
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
}
