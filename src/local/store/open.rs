//! Opening a data directory: it is recovered, this boot is recorded durably, and the
//! writer is started over the segment that follows; then [`Store`] runs the writer on the
//! store thread, or the simulation steps it by hand ([`Opened`], see [`super::stepped`]).

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;

use super::disk::{Disk, RealDisk};
use super::disk_budget::DiskBudget;
use super::error::{io_error, StoreError};
use super::handle::{Request, StoreHandle};
use super::records::{self, Record};
use super::watermark::MarksPublisher;
use super::writer::{self, Writer};
use super::{frame, recovery};
use crate::clock::{Clock, SystemClock};
use crate::config::SyncMode;
use crate::metrics::Metrics;

/// A fired expiration never settled, as recovery found it: its record, and the deliveries
/// it had (its latest `Attempted` record; 0 if none).
pub type RecoveredFiring = (records::Fired, u32);

/// The store thread; dropping every [`StoreHandle`] lets it finish, and `join` waits.
pub struct Store {
    thread: std::thread::JoinHandle<()>,
    recovered_snapshot_bytes: u64,
    boot: u64,
}

impl Store {
    /// Opens (creating if needed) the data directory and replays it: `replay` sees every
    /// snapshot and log record in order. Returns the running store and the fired expirations
    /// that were never settled, each with the deliveries it had, to be delivered again.
    /// This boot is recorded (durably) before it returns: see [`Store::boot`].
    /// `max_disk`: `--max-disk` (0: none), counted against the directory.
    pub fn open(
        dir: &Path,
        sync: SyncMode,
        metrics: Arc<Metrics>,
        max_disk: u64,
        replay: impl FnMut(Record),
    ) -> Result<(Store, StoreHandle, Vec<RecoveredFiring>), StoreError> {
        let opened = Opened::open(
            Arc::new(RealDisk),
            Arc::new(SystemClock::new()),
            dir,
            sync,
            metrics,
            max_disk,
            replay,
        )?;
        let Opened {
            writer,
            requests,
            handle,
            unsettled,
            recovered_snapshot_bytes,
            boot,
        } = opened;
        let thread = std::thread::Builder::new()
            .name(writer::STORE_THREAD.into())
            .spawn(move || writer.run(requests))
            .map_err(io_error(dir))?;
        let store = Store {
            thread,
            recovered_snapshot_bytes,
            boot,
        };
        Ok((store, handle, unsettled))
    }

    /// Size of the snapshot the store recovered from: what the next snapshot will be
    /// about as large as, which sets when it is worth taking.
    pub(crate) fn recovered_snapshot_bytes(&self) -> usize {
        usize::try_from(self.recovered_snapshot_bytes).unwrap_or(usize::MAX)
    }

    /// This boot's number: one more than the highest the directory recorded, so never one
    /// an earlier process of this directory had.
    pub(crate) fn boot(&self) -> u64 {
        self.boot
    }

    /// False once the store thread has ended: it ends only when every handle is dropped,
    /// or by a panic.
    pub(crate) fn is_running(&self) -> bool {
        !self.thread.is_finished()
    }

    pub fn join(self) {
        let _ = self.thread.join();
    }
}

/// A store recovered and ready to write, before anything runs it: [`Store::open`] hands
/// the writer to its thread; the simulation steps it by hand.
pub(crate) struct Opened {
    pub(crate) writer: Writer,
    pub(crate) requests: Receiver<Request>,
    pub(crate) handle: StoreHandle,
    pub(crate) unsettled: Vec<RecoveredFiring>,
    pub(crate) recovered_snapshot_bytes: u64,
    pub(crate) boot: u64,
}

impl Opened {
    /// Opens (creating if needed) the data directory on `disk` and replays it, recording
    /// this boot durably: see [`Store::open`].
    pub(crate) fn open(
        disk: Arc<dyn Disk>,
        clock: Arc<dyn Clock>,
        dir: &Path,
        sync: SyncMode,
        metrics: Arc<Metrics>,
        max_disk: u64,
        replay: impl FnMut(Record),
    ) -> Result<Self, StoreError> {
        let budget = DiskBudget::new(max_disk, metrics.clone());
        disk.create_dir_all(dir).map_err(io_error(dir))?;
        let recovered = recovery::recover(disk.as_ref(), dir, replay)?;
        let next_segment = recovered.last_segment + 1;
        let (frames, unsettled) = recovered
            .unsettled
            .into_iter()
            .map(|(key, firing)| ((key, firing.frames), (firing.fired, firing.attempts)))
            .unzip();
        let boot = recovered.boot + 1;
        let mut boot_frame = Vec::new();
        frame::encode(
            &Record {
                kind: Some(records::record::Kind::Boot(boot)),
            },
            &mut boot_frame,
        );
        let failed = Arc::new(AtomicBool::new(false));
        let (marks_publisher, marks) = MarksPublisher::new();
        let writer = Writer::start(
            writer::Parts {
                disk,
                clock,
                dir: dir.to_owned(),
                sync,
                metrics,
                failed_flag: failed.clone(),
                budget: budget.clone(),
                marks: marks_publisher,
            },
            next_segment,
            frames,
            boot_frame,
        )?;
        let (sender, requests) = mpsc::channel();
        let handle = StoreHandle {
            sender,
            appended: Arc::default(),
            marks,
            failed,
            snapshot_backlog: Arc::default(),
            compacting: writer.compacting.clone(),
            budget,
            buffers: writer.buffers.clone(),
        };
        Ok(Self {
            writer,
            requests,
            handle,
            unsettled,
            recovered_snapshot_bytes: recovered.snapshot_bytes,
            boot,
        })
    }
}
