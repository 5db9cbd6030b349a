//! The store run by hand, one group commit per step (the `sim` feature): the simulation
//! drives the same [`Writer`] the store thread runs, on a simulated disk and clock, at the
//! points it chooses, so that every interleaving it explores replays from its seed. Its
//! snapshots are written on the same thread, each chunk and the seal as a step handles them.

use std::path::Path;
use std::sync::mpsc::Receiver;
use std::sync::Arc;

use super::batch::Batch;
use super::disk::Disk;
use super::error::StoreError;
use super::handle::{Request, StoreHandle};
use super::open::{Opened, RecoveredFiring};
use super::records::Record;
use super::writer::Writer;
use crate::clock::Clock;
use crate::config::SyncMode;
use crate::metrics::Metrics;

/// A store whose writer runs only when [`SteppedStore::step`] is called.
pub(crate) struct SteppedStore {
    writer: Writer,
    requests: Receiver<Request>,
    pending: Batch,
    handle: StoreHandle,
    boot: u64,
    recovered_snapshot_bytes: u64,
}

impl SteppedStore {
    /// Opens and recovers `dir` on `disk` as [`super::open::Store::open`] does; returns the store,
    /// and the fired expirations never settled.
    pub(crate) fn open(
        disk: Arc<dyn Disk>,
        clock: Arc<dyn Clock>,
        dir: &Path,
        sync: SyncMode,
        metrics: Arc<Metrics>,
        replay: impl FnMut(Record),
    ) -> Result<(Self, Vec<RecoveredFiring>), StoreError> {
        let mut opened = Opened::open(disk, clock, dir, sync, metrics, 0, replay)?;
        // Snapshots too are written when this store is stepped, never on a thread.
        opened.writer.write_snapshots_stepped();
        let store = Self {
            writer: opened.writer,
            requests: opened.requests,
            pending: Batch::default(),
            handle: opened.handle,
            boot: opened.boot,
            recovered_snapshot_bytes: opened.recovered_snapshot_bytes,
        };
        Ok((store, opened.unsettled))
    }

    pub(crate) fn handle(&self) -> &StoreHandle {
        &self.handle
    }

    pub(crate) fn boot(&self) -> u64 {
        self.boot
    }

    pub(crate) fn recovered_snapshot_bytes(&self) -> usize {
        usize::try_from(self.recovered_snapshot_bytes).unwrap_or(usize::MAX)
    }

    /// See [`Writer::interval_sync_due`].
    pub(crate) fn interval_sync_due(&self) -> Option<u64> {
        self.writer.interval_sync_due()
    }

    /// One group commit of everything queued (and, with nothing queued, the interval
    /// sync the store thread would make when it wakes). True if anything was queued.
    pub(crate) fn step(&mut self) -> bool {
        let queued: Vec<Request> = self.requests.try_iter().collect();
        let any = !queued.is_empty();
        self.writer.round(queued.into_iter(), &mut self.pending);
        any
    }

    /// A clean stop, as when the last handle goes: the last commit and sync.
    pub(crate) fn finish(mut self) {
        let queued: Vec<Request> = self.requests.try_iter().collect();
        self.writer.round(queued.into_iter(), &mut self.pending);
        self.writer.finish(&mut self.pending);
    }
}
