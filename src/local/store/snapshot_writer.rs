//! Writes a snapshot on a thread of its own ("tickd-snapshot"), off the store thread.
//!
//! Why: a snapshot of a million timers is about a hundred megabytes. On the store thread,
//! its writes, the fsyncs that put it on disk, its rename and the deletion of the files it
//! replaces all held back the group commits queued behind them: registrations' answers and
//! firings waiting for the log, for 70 ms and more at a time. Here the store thread only
//! passes the chunks on; this thread writes them, fdatasyncs every
//! [`FLUSH_EVERY`](super::snapshot_task::FLUSH_EVERY) bytes so that the disk takes the
//! snapshot at an even pace, and, once told to seal, makes the snapshot durable, renames it
//! into place and deletes what it replaces ([`super::snapshot_task`] does that work).
//!
//! The hidden contracts:
//! - the store commits everything appended before the seal before it sends the seal, so a
//!   sealed snapshot never holds a change whose caller was not yet answered (a failure
//!   after that cuts back only records the snapshot does not reflect);
//! - files numbered below the snapshot are deleted only once its rename is durable;
//! - a failure (or a panic) of this thread is the store's failure: [`SnapshotWriter::join`]
//!   reports it, and the store then stops as it does for a failed append;
//! - a snapshot abandoned before its seal leaves no partial file behind.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use super::disk::Disk;
#[cfg(any(test, feature = "sim"))]
use super::disk::DiskFile;
use super::error::{io_error, StoreError};
use super::handle::QueuedChunk;
use super::snapshot_task::{Job, Sealed, SnapshotTask};

/// The store thread's handle on one snapshot being written or sealed.
pub(super) enum SnapshotWriter {
    /// On its own thread, as tickd runs it.
    Thread {
        /// None once the seal is sent: nothing more goes to the thread.
        jobs: Option<Sender<Job>>,
        thread: JoinHandle<Result<Sealed, StoreError>>,
    },
    /// On the caller's thread, each job done as it is handed over: the deterministic
    /// simulation steps the store by hand, and a thread of its own would make a run depend
    /// on the scheduler. The same [`SnapshotTask`] does the work, through the same disk.
    #[cfg(any(test, feature = "sim"))]
    Stepped(Box<SteppedSnapshot>),
}

/// A snapshot written on the caller's thread (see [`SnapshotWriter::Stepped`]).
#[cfg(any(test, feature = "sim"))]
pub(super) struct SteppedSnapshot {
    task: SnapshotTask,
    /// The partial file while chunks are written; None once sealed or failed.
    file: Option<Box<dyn DiskFile>>,
    unflushed: u64,
    sealing: bool,
    /// Some once the snapshot is done: sealed, or failed (its partial file then deleted).
    outcome: Option<Result<Sealed, StoreError>>,
}

#[cfg(any(test, feature = "sim"))]
impl SteppedSnapshot {
    /// Records the snapshot's end; a failure deletes its partial file, as the thread's
    /// [`super::snapshot_task::RemovedUnlessSealed`] does.
    fn finish(&mut self, outcome: Result<Sealed, StoreError>) {
        self.file = None;
        if outcome.is_err() {
            let _ = self.task.disk.remove(&self.task.partial_path());
        }
        self.outcome = Some(outcome);
    }
}

impl SnapshotWriter {
    /// Starts the thread for snapshot `sequence` of `dir`; it creates the partial file.
    pub(super) fn start(
        disk: Arc<dyn Disk>,
        dir: &Path,
        sequence: u64,
    ) -> Result<Self, StoreError> {
        let (jobs, received) = mpsc::channel();
        let task = SnapshotTask {
            disk,
            dir: dir.to_owned(),
            sequence,
        };
        let thread = std::thread::Builder::new()
            .name("tickd-snapshot".into())
            .spawn(move || task.run(received))
            .map_err(io_error(dir))?;
        Ok(Self::Thread {
            jobs: Some(jobs),
            thread,
        })
    }

    /// Starts snapshot `sequence` of `dir` on the caller's thread: the partial file is
    /// created now, and each later call does its work before it returns.
    #[cfg(any(test, feature = "sim"))]
    pub(super) fn start_stepped(disk: Arc<dyn Disk>, dir: &Path, sequence: u64) -> Self {
        let task = SnapshotTask {
            disk,
            dir: dir.to_owned(),
            sequence,
        };
        let mut stepped = SteppedSnapshot {
            file: None,
            unflushed: 0,
            sealing: false,
            outcome: None,
            task,
        };
        match stepped.task.create_partial() {
            Ok(file) => stepped.file = Some(file),
            Err(error) => stepped.finish(Err(error)),
        }
        Self::Stepped(Box::new(stepped))
    }

    /// Queues a chunk. False if the thread has already stopped (its error comes from
    /// [`Self::join`]).
    pub(super) fn write(&mut self, chunk: QueuedChunk) -> bool {
        match self {
            Self::Thread { jobs, .. } => jobs
                .as_ref()
                .is_some_and(|jobs| jobs.send(Job::Chunk(chunk)).is_ok()),
            #[cfg(any(test, feature = "sim"))]
            Self::Stepped(stepped) => {
                let Some(file) = &mut stepped.file else {
                    return false;
                };
                let written =
                    stepped
                        .task
                        .write_chunk(file.as_mut(), chunk, &mut stepped.unflushed);
                if let Err(error) = written {
                    stepped.finish(Err(error));
                }
                true
            }
        }
    }

    /// Queues the last frames and the seal; the thread then finishes on its own.
    pub(super) fn seal(&mut self, last_frames: Vec<u8>) {
        match self {
            Self::Thread { jobs, .. } => {
                if let Some(jobs) = jobs.take() {
                    let _ = jobs.send(Job::Seal(last_frames));
                }
            }
            #[cfg(any(test, feature = "sim"))]
            Self::Stepped(stepped) => {
                stepped.sealing = true;
                if let Some(file) = stepped.file.take() {
                    let sealed = stepped.task.seal(file, &last_frames);
                    stepped.finish(sealed);
                }
            }
        }
    }

    pub(super) fn is_sealing(&self) -> bool {
        match self {
            Self::Thread { jobs, .. } => jobs.is_none(),
            #[cfg(any(test, feature = "sim"))]
            Self::Stepped(stepped) => stepped.sealing,
        }
    }

    /// True once the thread has ended: [`Self::join`] then does not wait.
    pub(super) fn is_finished(&self) -> bool {
        match self {
            Self::Thread { thread, .. } => thread.is_finished(),
            #[cfg(any(test, feature = "sim"))]
            Self::Stepped(stepped) => stepped.outcome.is_some(),
        }
    }

    /// Waits for the thread. A snapshot not sealed is abandoned: its partial file is
    /// deleted, and the outcome is an error naming it.
    pub(super) fn join(self) -> Result<Sealed, StoreError> {
        match self {
            Self::Thread { jobs, thread } => {
                drop(jobs);
                thread.join().unwrap_or_else(|_| {
                    Err(StoreError::Io {
                        path: PathBuf::from("tickd-snapshot"),
                        source: io::Error::other("the snapshot thread panicked"),
                    })
                })
            }
            #[cfg(any(test, feature = "sim"))]
            Self::Stepped(mut stepped) => {
                if stepped.outcome.is_none() {
                    let abandoned = stepped.task.abandoned();
                    stepped.finish(Err(abandoned));
                }
                stepped.outcome.take().expect("finished above")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{records, Batch, Store, SyncMode};
    use crate::metrics::Metrics;

    fn chunk_of(ids: std::ops::Range<u64>) -> Vec<u8> {
        let mut chunk = Batch::default();
        for id in ids {
            chunk.record(&records::Record {
                kind: Some(records::record::Kind::NextId(id)),
            });
        }
        chunk.into_frames()
    }

    fn files(dir: &std::path::Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// A store stopped while a snapshot is still being written (SIGTERM mid-compaction)
    /// stops cleanly: the snapshot is abandoned, its partial file deleted, nothing failed.
    #[test]
    fn a_store_stopped_mid_snapshot_abandons_it_cleanly() {
        let dir = tempfile::tempdir().unwrap();
        let (store, handle, _) =
            Store::open(dir.path(), SyncMode::Always, Metrics::new(), 0, |_| {}).unwrap();
        let failed = handle.failure_flag();
        handle.begin_snapshot();
        handle.snapshot_chunk(chunk_of(1..100));
        drop(handle);
        store.join();
        assert!(!failed.load(std::sync::atomic::Ordering::Acquire));
        let names = files(dir.path());
        assert!(names.iter().all(|name| name.ends_with(".log")), "{names:?}");
    }

    /// A sealed snapshot replaces the files before it, once the store has taken in the seal.
    #[test]
    fn a_sealed_snapshot_replaces_the_segments_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let (store, handle, _) =
            Store::open(dir.path(), SyncMode::Always, Metrics::new(), 0, |_| {}).unwrap();
        let failed = handle.failure_flag();
        handle.begin_snapshot();
        handle.snapshot_chunk(chunk_of(1..100));
        handle.end_snapshot();
        drop(handle);
        store.join();
        assert!(!failed.load(std::sync::atomic::Ordering::Acquire));
        let names = files(dir.path());
        assert_eq!(
            names,
            ["00000000000000000002.log", "00000000000000000002.snapshot"],
            "{names:?}"
        );
    }

    /// A replaced file larger than one step shrinks step by step and is then gone, its
    /// bytes counted as given back.
    #[test]
    fn a_large_replaced_file_is_removed_in_steps() {
        let dir = tempfile::tempdir().unwrap();
        let old = super::super::files::segment_path(dir.path(), 1);
        let length = 2 * super::super::snapshot_task::REMOVE_STEP_BYTES + 12_345;
        std::fs::File::create(&old)
            .unwrap()
            .set_len(length)
            .unwrap();
        let kept = super::super::files::segment_path(dir.path(), 2);
        std::fs::write(&kept, b"kept").unwrap();
        assert_eq!(
            super::super::snapshot_task::remove_older_than(
                &crate::local::store::disk::RealDisk,
                dir.path(),
                2
            )
            .unwrap(),
            (1, length)
        );
        assert_eq!(files(dir.path()), vec![format!("{:020}.log", 2)]);
    }

    /// A snapshot counts as compacting from the moment it is asked for until the store
    /// has sealed it and deleted what it replaces.
    #[test]
    fn a_snapshot_is_compacting_until_the_store_is_done_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let (store, handle, _) =
            Store::open(dir.path(), SyncMode::Always, Metrics::new(), 0, |_| {}).unwrap();
        let compacting = handle.compacting.clone();
        assert!(!handle.is_compacting());
        handle.begin_snapshot();
        assert!(handle.is_compacting(), "set as it is asked for");
        handle.snapshot_chunk(chunk_of(0..10));
        handle.end_snapshot();
        drop(handle);
        store.join();
        assert!(!compacting.load(std::sync::atomic::Ordering::Acquire));
    }

    /// A crash half way through removing a replaced segment leaves it cut short, mid-frame:
    /// recovery starts from the newer snapshot, never reads it, and deletes it.
    #[test]
    fn a_segment_cut_short_by_a_crash_during_its_removal_is_deleted_on_start() {
        let dir = tempfile::tempdir().unwrap();
        let (store, handle, _) =
            Store::open(dir.path(), SyncMode::Always, Metrics::new(), 0, |_| {}).unwrap();
        handle.begin_snapshot();
        handle.snapshot_chunk(chunk_of(1..100));
        handle.end_snapshot();
        drop(handle);
        store.join();
        // What a crash between two steps leaves: the old segment's first bytes, the last
        // frame cut in half.
        let mut cut = super::super::frame::FILE_HEADER.to_vec();
        cut.extend_from_slice(&chunk_of(1..50));
        cut.truncate(cut.len() - 3);
        let old = super::super::files::segment_path(dir.path(), 1);
        std::fs::write(&old, &cut).unwrap();

        let mut replayed = 0;
        let (store, handle, _) =
            Store::open(dir.path(), SyncMode::Always, Metrics::new(), 0, |_| {
                replayed += 1
            })
            .expect("a cut-short obsolete segment is no damage");
        assert_eq!(
            replayed,
            99 + 1,
            "the snapshot's records (its 99 timers and the boot it carries), none of the old \
             segment's"
        );
        assert!(!old.exists(), "the obsolete segment is deleted");
        drop(handle);
        store.join();
    }

    /// Each open records a boot one past the highest on disk, and attempts follow an
    /// unsettled firing, the latest recorded winning; a snapshot carries both, so the
    /// segments that recorded them can go.
    #[test]
    fn boots_and_attempts_outlive_the_segments_that_recorded_them() {
        use records::record::Kind;
        let dir = tempfile::tempdir().unwrap();
        let open = || Store::open(dir.path(), SyncMode::Always, Metrics::new(), 0, |_| {});
        let attempted = |attempts| records::Record {
            kind: Some(Kind::Attempted(records::Attempted {
                id: 7,
                fired_count: 1,
                attempts,
            })),
        };
        let (store, handle, unsettled) = open().unwrap();
        assert_eq!((store.boot(), unsettled.len()), (1, 0));
        let mut batch = Batch::default();
        batch.record(&records::Record {
            kind: Some(Kind::Fired(records::Fired {
                timer: Some(records::Timer {
                    id: 7,
                    namespace: "ns".into(),
                    fired_count: 1,
                    ..Default::default()
                }),
                ..Default::default()
            })),
        });
        batch.record(&attempted(3));
        handle.append(batch);
        drop(handle);
        store.join();

        let (store, handle, unsettled) = open().unwrap();
        assert_eq!(store.boot(), 2);
        assert_eq!(unsettled.len(), 1);
        assert_eq!(unsettled[0].1, 3, "the attempts recorded");
        // A Redrive records 0; then a snapshot replaces every segment so far.
        let mut batch = Batch::default();
        batch.record(&attempted(0));
        handle.append(batch);
        handle.begin_snapshot();
        handle.snapshot_chunk(chunk_of(1..2));
        handle.end_snapshot();
        drop(handle);
        store.join();
        assert!(
            !files(dir.path()).contains(&"00000000000000000001.log".to_string()),
            "the first boot's segment was compacted away: {:?}",
            files(dir.path())
        );

        let (store, _handle, unsettled) = open().unwrap();
        assert_eq!(store.boot(), 3, "the snapshot carried boot 2");
        assert_eq!(unsettled[0].1, 0, "the latest attempts recorded win");
    }
}
