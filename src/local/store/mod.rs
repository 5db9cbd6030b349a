//! The durable log: every mutation is appended (checksummed) before its RPC is answered,
//! and replayed into the wheel on start.
//!
//! Layout of the data directory: segments `<first-seq>.log` and snapshots
//! `<seq>.snapshot`, where a snapshot numbered S holds the live state as of the start of
//! segment S, so recovery loads the newest snapshot and replays segments S and later. Both
//! are a file header and checksummed frames ([`frame`]); recovery checks every frame
//! before it changes anything ([`scan`], [`recovery`]), and only the operator's
//! `--recover-truncate` sets damage aside ([`repair`]).
//!
//! One thread ("tickd-store") owns the files. Appends queue up while it is writing or
//! syncing and are then written and synced together (group commit), so concurrent callers
//! share one fsync. Each append carries the replies to send once it is durable.
//!
//! Snapshots are fuzzy: the worker streams the live timers in chunks while it keeps
//! serving, and every mutation meanwhile goes to the new segment. Replay is idempotent per
//! timer (see [`records`]), so snapshot + later segments give the exact state. The store
//! adds the fired-but-unsettled expirations it tracks itself, then deletes what the
//! snapshot replaces: disk use follows the live set, not the history, within
//! `--max-disk` if set ([`disk_budget`]).

mod batch;
pub mod disk;
pub(crate) mod disk_budget;
pub mod frame;
mod frame_buffers;
pub(crate) mod recovery;
pub mod repair;
pub mod scan;
mod snapshot_writer;
#[cfg(any(test, feature = "sim"))]
pub(crate) mod stepped;
mod timer_fields;
mod writer;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender};
use std::time::Duration;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use clap::ValueEnum;

use crate::clock::{Clock, SystemClock};
use crate::metrics::Metrics;
use disk::{Disk, DiskFile, RealDisk};
use disk_budget::DiskBudget;
use frame_buffers::FrameBuffers;
use writer::Writer;

/// The generated record types of `proto/tickd/store/v1/records.proto`.
#[allow(clippy::all, missing_docs)]
pub mod records {
    include!(concat!(env!("OUT_DIR"), "/tickd.store.v1.rs"));
}

pub use batch::Batch;
use records::Record;

/// When an append counts as durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SyncMode {
    /// fsync before answering; concurrent appends share one fsync.
    Always,
    /// Answer once written to the OS; fsync every `SYNC_INTERVAL`. A machine crash loses at
    /// most that window; a process crash loses nothing.
    Interval,
    /// No log at all: timers live in memory only.
    None,
}

/// How often `--sync interval` fsyncs.
pub(crate) const SYNC_INTERVAL: Duration = Duration::from_millis(10);

/// Work to run once an append is durable (typically: send the RPC's reply).
pub(crate) type OnDurable = Box<dyn FnOnce() + Send>;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path}: damaged log at byte offset {offset}: {damage}; refusing to start rather than lose what follows it. Every file is left as it was: `tickd check` reports the damage, and `--recover-truncate` starts from what precedes it, setting the rest aside")]
    Corrupt {
        path: PathBuf,
        offset: u64,
        damage: frame::Damage,
    },
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_owned(),
        source,
    }
}

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
    frames: Vec<u8>,
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
    sender: Sender<Request>,
    failed: Arc<AtomicBool>,
    /// Bytes of snapshot chunks sent and not yet written.
    snapshot_backlog: Arc<AtomicUsize>,
    /// See [`Writer::compacting`].
    compacting: Arc<AtomicBool>,
    budget: Arc<DiskBudget>,
    buffers: FrameBuffers,
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
    /// to spare (see [`frame_buffers`]).
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
            .name("tickd-store".into())
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
        let writer = Writer::start(
            writer::Parts {
                disk,
                clock,
                dir: dir.to_owned(),
                sync,
                metrics,
                failed_flag: failed.clone(),
                budget: budget.clone(),
            },
            next_segment,
            frames,
            boot_frame,
        )?;
        let (sender, requests) = mpsc::channel();
        let handle = StoreHandle {
            sender,
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

pub(crate) fn segment_path(dir: &Path, sequence: u64) -> PathBuf {
    dir.join(format!("{sequence:020}.log"))
}

pub(crate) fn snapshot_path(dir: &Path, sequence: u64) -> PathBuf {
    dir.join(format!("{sequence:020}.snapshot"))
}

/// A new segment, its file header written (and made durable by the first commit's sync).
fn create_segment(
    disk: &dyn Disk,
    dir: &Path,
    sequence: u64,
) -> Result<Box<dyn DiskFile>, StoreError> {
    let path = segment_path(dir, sequence);
    let mut file = disk.create_new(&path).map_err(io_error(&path))?;
    file.append(&frame::FILE_HEADER).map_err(io_error(&path))?;
    sync_dir(disk, dir)?;
    Ok(file)
}

/// Makes a file's creation or rename durable.
fn sync_dir(disk: &dyn Disk, dir: &Path) -> Result<(), StoreError> {
    disk.sync_dir(dir).map_err(io_error(dir))
}
