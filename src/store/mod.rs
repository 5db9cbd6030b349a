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
pub(crate) mod disk_budget;
pub mod frame;
mod frame_buffers;
pub(crate) mod recovery;
pub mod repair;
pub mod scan;
mod snapshot_writer;
mod timer_fields;

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use clap::ValueEnum;
use rustc_hash::FxHashMap;
use tracing::{error, info};

use crate::metrics::Metrics;
use disk_budget::DiskBudget;
use frame_buffers::FrameBuffers;
use snapshot_writer::SnapshotWriter;

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

/// Capacity the store keeps for the next group commit's frames after writing one.
const PENDING_KEPT_BYTES: usize = 1 << 20;

/// How often the store thread looks whether a snapshot sealing in the background is done.
const SEAL_POLL: Duration = Duration::from_millis(5);

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

enum Request {
    Append(Batch),
    /// Starts a new segment; what follows until `EndSnapshot` is the snapshot's content.
    BeginSnapshot,
    SnapshotChunk(QueuedChunk),
    EndSnapshot,
}

/// A snapshot chunk on its way to the store thread, counted in the handle's backlog until
/// it is written (or dropped): the worker makes chunks far faster than a disk writes them,
/// and without the count a snapshot would queue a second copy of every live timer.
struct QueuedChunk {
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
        let _ = self.sender.send(Request::BeginSnapshot);
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

/// The store thread; dropping every [`StoreHandle`] lets it finish, and `join` waits.
pub struct Store {
    thread: std::thread::JoinHandle<()>,
    recovered_snapshot_bytes: u64,
}

impl Store {
    /// Opens (creating if needed) the data directory and replays it: `replay` sees every
    /// snapshot and log record in order. Returns the running store and the fired expirations
    /// that were never settled, to be delivered again.
    /// `max_disk`: `--max-disk` (0: none), counted against the directory.
    pub fn open(
        dir: &Path,
        sync: SyncMode,
        metrics: Arc<Metrics>,
        max_disk: u64,
        replay: impl FnMut(Record),
    ) -> Result<(Store, StoreHandle, Vec<records::Fired>), StoreError> {
        let budget = DiskBudget::new(max_disk, metrics.clone());
        fs::create_dir_all(dir).map_err(io_error(dir))?;
        let recovered = recovery::recover(dir, replay)?;
        let recovered_snapshot_bytes = recovered.snapshot_bytes;
        let next_segment = recovered.last_segment + 1;
        let (frames, unsettled) = recovered
            .unsettled
            .into_iter()
            .map(|(key, (frame, fired))| ((key, frame), fired))
            .unzip();
        let failed = Arc::new(AtomicBool::new(false));
        let writer = Writer::start(
            dir.to_owned(),
            next_segment,
            sync,
            frames,
            metrics,
            failed.clone(),
            budget.clone(),
        )?;
        let buffers = writer.buffers.clone();
        let (sender, receiver) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("tickd-store".into())
            .spawn(move || writer.run(receiver))
            .map_err(io_error(dir))?;
        let store = Store {
            thread,
            recovered_snapshot_bytes,
        };
        let handle = StoreHandle {
            sender,
            failed,
            snapshot_backlog: Arc::default(),
            budget,
            buffers,
        };
        Ok((store, handle, unsettled))
    }

    /// Size of the snapshot the store recovered from: what the next snapshot will be
    /// about as large as, which sets when it is worth taking.
    pub(crate) fn recovered_snapshot_bytes(&self) -> usize {
        usize::try_from(self.recovered_snapshot_bytes).unwrap_or(usize::MAX)
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

pub(crate) fn segment_path(dir: &Path, sequence: u64) -> PathBuf {
    dir.join(format!("{sequence:020}.log"))
}

pub(crate) fn snapshot_path(dir: &Path, sequence: u64) -> PathBuf {
    dir.join(format!("{sequence:020}.snapshot"))
}

/// Fired expirations not yet settled: their frames, by (timer id, fired count).
type Unsettled = FxHashMap<(u64, u64), Vec<u8>>;

/// The store thread's state.
struct Writer {
    dir: PathBuf,
    sync: SyncMode,
    segment: File,
    segment_sequence: u64,
    /// The snapshot being written or sealed, on its own thread (see [`snapshot_writer`]).
    snapshot: Option<SnapshotWriter>,
    unsettled: Unsettled,
    unsynced: bool,
    last_sync: Instant,
    metrics: Arc<Metrics>,
    /// Set by the first I/O error; see [`Writer::stop_on_error`].
    failed: bool,
    /// The same, for the rest of the process to see.
    failed_flag: Arc<AtomicBool>,
    /// Length of the current segment as written, and as far as callers have been answered:
    /// after a failure the segment is cut back to the latter (see `stop_on_error`).
    written_bytes: u64,
    acknowledged_bytes: u64,
    /// Bytes of every file in the directory, and of the snapshot being written among them
    /// (see [`disk_budget`]).
    on_disk: u64,
    snapshot_bytes: u64,
    budget: Arc<DiskBudget>,
    /// Where written-out append buffers go back to the worker.
    buffers: FrameBuffers,
}

impl Writer {
    fn start(
        dir: PathBuf,
        sequence: u64,
        sync: SyncMode,
        unsettled: Unsettled,
        metrics: Arc<Metrics>,
        failed_flag: Arc<AtomicBool>,
        budget: Arc<DiskBudget>,
    ) -> Result<Self, StoreError> {
        let segment = create_segment(&dir, sequence)?;
        let length = frame::FILE_HEADER.len() as u64;
        let on_disk = disk_budget::directory_bytes(&dir)?;
        budget.set_on_disk(on_disk, 0);
        Ok(Self {
            dir,
            sync,
            segment,
            segment_sequence: sequence,
            snapshot: None,
            unsettled,
            unsynced: false,
            last_sync: Instant::now(),
            metrics,
            failed: false,
            failed_flag,
            written_bytes: length,
            acknowledged_bytes: length,
            on_disk,
            snapshot_bytes: 0,
            budget,
            buffers: FrameBuffers::default(),
        })
    }

    fn run(mut self, requests: Receiver<Request>) {
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
            for request in first.into_iter().chain(requests.try_iter()) {
                let handled = self.handle(request, &mut pending);
                self.stop_on_error(handled, &mut pending);
            }
            let committed = self.commit(&mut pending);
            self.stop_on_error(committed, &mut pending);
            let reaped = self.reap_sealed_snapshot(false);
            self.stop_on_error(reaped, &mut pending);
        }
        let committed = self.commit(&mut pending);
        self.stop_on_error(committed, &mut pending);
        // A snapshot still being written is abandoned (the next start recovers from the
        // one before); one sealing is waited for.
        self.abandon_snapshot();
        let reaped = self.reap_sealed_snapshot(true);
        self.stop_on_error(reaped, &mut pending);
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
            // One already sealing holds only what was acknowledged, and may finish.
            self.abandon_snapshot();
        }
        if self.failed {
            *pending = Batch::default();
        }
    }

    fn handle(&mut self, request: Request, pending: &mut Batch) -> Result<(), StoreError> {
        if self.failed {
            return Ok(());
        }
        match request {
            Request::Append(batch) => {
                crate::faults::panic_if_injected("store");
                for (key, frame) in batch.fired {
                    self.unsettled.insert(key, frame);
                }
                for key in &batch.settled {
                    self.unsettled.remove(key);
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
        let path = segment_path(&self.dir, self.segment_sequence);
        if !pending.frames.is_empty() {
            self.segment
                .write_all(&pending.frames)
                .map_err(io_error(&path))?;
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
        let sync_now = match self.sync {
            SyncMode::Always => self.unsynced,
            SyncMode::Interval => self.unsynced && self.last_sync.elapsed() >= SYNC_INTERVAL,
            SyncMode::None => false,
        };
        if sync_now {
            let started = Instant::now();
            self.segment.sync_data().map_err(io_error(&path))?;
            self.metrics
                .log_fsync_seconds
                .observe(started.elapsed().as_secs_f64());
            self.unsynced = false;
            self.last_sync = Instant::now();
        }
        self.acknowledged_bytes = self.written_bytes;
        for callback in pending.on_durable.drain(..) {
            callback();
        }
        pending.held.clear();
        Ok(())
    }

    fn begin_snapshot(&mut self) -> Result<(), StoreError> {
        // One snapshot at a time: the last one's seal must be done (the worker rarely
        // starts the next so soon).
        self.abandon_snapshot();
        self.reap_sealed_snapshot(true)?;
        // Recovery only forgives a torn record at the end of the newest segment, so the
        // segment being closed must be whole on disk first (`--sync interval` may owe it).
        let closing = segment_path(&self.dir, self.segment_sequence);
        self.segment.sync_data().map_err(io_error(&closing))?;
        self.unsynced = false;
        let segment = create_segment(&self.dir, self.segment_sequence + 1)?;
        self.segment_sequence += 1;
        self.segment = segment;
        // A new segment holds its header only (create_segment made it, new).
        self.written_bytes = frame::FILE_HEADER.len() as u64;
        self.acknowledged_bytes = self.written_bytes;
        self.snapshot = Some(SnapshotWriter::start(&self.dir, self.segment_sequence)?);
        // The new segment's header and the snapshot's.
        self.snapshot_bytes = frame::FILE_HEADER.len() as u64;
        self.grew(2 * frame::FILE_HEADER.len() as u64);
        Ok(())
    }

    /// Passes a chunk on to the snapshot thread, counting it as on disk already (the disk
    /// budget would rather count it early than late).
    fn write_snapshot(&mut self, chunk: QueuedChunk) -> Result<(), StoreError> {
        let Some(snapshot) = &self.snapshot else {
            return Ok(());
        };
        let bytes = chunk.frames.len() as u64;
        if !snapshot.write(chunk) {
            // The thread stopped on an error: that error is the store's.
            let failed = self.snapshot.take().map(SnapshotWriter::join);
            return failed.map_or(Ok(()), |outcome| outcome.map(drop));
        }
        self.snapshot_bytes += bytes;
        self.grew(bytes);
        Ok(())
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
        let last_frames: Vec<u8> = self.unsettled.values().flatten().copied().collect();
        let bytes = last_frames.len() as u64;
        snapshot.seal(last_frames);
        self.snapshot_bytes += bytes;
        self.grew(bytes);
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

/// A new segment, its file header written (and made durable by the first commit's sync).
fn create_segment(dir: &Path, sequence: u64) -> Result<File, StoreError> {
    let path = segment_path(dir, sequence);
    let mut file = OpenOptions::new()
        .create_new(true)
        .append(true)
        .open(&path)
        .map_err(io_error(&path))?;
    file.write_all(&frame::FILE_HEADER)
        .map_err(io_error(&path))?;
    sync_dir(dir)?;
    Ok(file)
}

/// Makes a file's creation or rename durable.
fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|handle| handle.sync_all())
        .map_err(io_error(dir))
}
