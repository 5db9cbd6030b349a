//! The work of writing one snapshot, the same whether it runs on the snapshot thread or is
//! stepped by the simulation ([`super::snapshot_writer`]): the partial file and its
//! chunks, flushed at an even pace; the seal, which makes the snapshot durable and renames
//! it into place; then the deletion of the files it replaces, a few megabytes at a time.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::disk::{Disk, DiskFile};
use super::error::{io_error, StoreError};
use super::files::{file_sequence, snapshot_path, sync_dir};
use super::frame;
use super::handle::QueuedChunk;

/// Snapshot bytes written between two flushes: small, because the log's fsync waits for
/// the disk to take whatever is in flight. At 8 MiB a flush held a concurrent log fsync
/// for about 5 ms; at 1 MiB, hardly at all.
pub(super) const FLUSH_EVERY: u64 = 1 << 20;

/// What the snapshot thread is sent, in order.
pub(super) enum Job {
    Chunk(QueuedChunk),
    /// The last frames (the fired expirations not yet settled); then seal.
    Seal(Vec<u8>),
}

/// What a sealed snapshot changed in the directory.
pub(super) struct Sealed {
    pub(super) path: PathBuf,
    /// Files deleted because the snapshot replaces them, and their bytes.
    pub(super) removed_files: usize,
    pub(super) removed_bytes: u64,
    /// From the seal's start to the last deletion.
    pub(super) sealing: Duration,
}

/// The snapshot thread's state.
pub(super) struct SnapshotTask {
    pub(super) disk: Arc<dyn Disk>,
    pub(super) dir: PathBuf,
    pub(super) sequence: u64,
}

impl SnapshotTask {
    pub(super) fn partial_path(&self) -> PathBuf {
        snapshot_path(&self.dir, self.sequence).with_extension("partial")
    }

    pub(super) fn run(self, jobs: Receiver<Job>) -> Result<Sealed, StoreError> {
        // Recovery ignores a partial snapshot, but it must not take up the disk: it goes
        // unless sealed, after an error or a panic alike.
        let mut partial = RemovedUnlessSealed(self.disk.as_ref(), Some(self.partial_path()));
        let sealed = self.write_and_seal(jobs)?;
        partial.1 = None;
        Ok(sealed)
    }

    fn write_and_seal(&self, jobs: Receiver<Job>) -> Result<Sealed, StoreError> {
        let mut file = self.create_partial()?;
        let mut unflushed = 0;
        for job in jobs {
            match job {
                Job::Chunk(chunk) => self.write_chunk(file.as_mut(), chunk, &mut unflushed)?,
                Job::Seal(last_frames) => return self.seal(file, &last_frames),
            }
        }
        Err(self.abandoned())
    }

    /// The partial file, created with its header.
    pub(super) fn create_partial(&self) -> Result<Box<dyn DiskFile>, StoreError> {
        let partial = self.partial_path();
        let mut file = self.disk.create(&partial).map_err(io_error(&partial))?;
        file.append(&frame::FILE_HEADER)
            .map_err(io_error(&partial))?;
        Ok(file)
    }

    /// Appends one chunk, flushing every [`FLUSH_EVERY`] bytes (`unflushed` counts them).
    pub(super) fn write_chunk(
        &self,
        file: &mut dyn DiskFile,
        chunk: QueuedChunk,
        unflushed: &mut u64,
    ) -> Result<(), StoreError> {
        crate::faults::panic_if_injected("snapshot");
        // The file's name is made only on an error: this runs once per chunk.
        let failed = |source| StoreError::Io {
            path: self.partial_path(),
            source,
        };
        file.append(&chunk.frames).map_err(failed)?;
        *unflushed += chunk.frames.len() as u64;
        // Dropping the chunk tells the worker it may send more.
        drop(chunk);
        if *unflushed >= FLUSH_EVERY {
            file.sync_data().map_err(failed)?;
            *unflushed = 0;
        }
        Ok(())
    }

    /// The outcome of a snapshot given up before its seal.
    pub(super) fn abandoned(&self) -> StoreError {
        StoreError::Io {
            path: self.partial_path(),
            source: io::Error::other("snapshot abandoned before its seal"),
        }
    }

    /// Makes the snapshot the one recovery starts from, then deletes what it replaces.
    pub(super) fn seal(
        &self,
        mut file: Box<dyn DiskFile>,
        last_frames: &[u8],
    ) -> Result<Sealed, StoreError> {
        let started = Instant::now();
        let partial = self.partial_path();
        let path = snapshot_path(&self.dir, self.sequence);
        file.append(last_frames).map_err(io_error(&partial))?;
        file.sync_all().map_err(io_error(&partial))?;
        self.disk.rename(&partial, &path).map_err(io_error(&path))?;
        sync_dir(self.disk.as_ref(), &self.dir)?;
        let (removed_files, removed_bytes) =
            remove_older_than(self.disk.as_ref(), &self.dir, self.sequence)?;
        Ok(Sealed {
            path,
            removed_files,
            removed_bytes,
            sealing: started.elapsed(),
        })
    }
}

/// A partial snapshot's path, deleted on drop unless taken out.
struct RemovedUnlessSealed<'disk>(&'disk dyn Disk, Option<PathBuf>);

impl Drop for RemovedUnlessSealed<'_> {
    fn drop(&mut self) {
        if let Some(path) = &self.1 {
            let _ = self.0.remove(path);
        }
    }
}

/// Deletes segments and snapshots (and stray partial snapshots) numbered below `sequence`;
/// how many, and their bytes.
pub(super) fn remove_older_than(
    disk: &dyn Disk,
    dir: &Path,
    sequence: u64,
) -> Result<(usize, u64), StoreError> {
    let (mut files, mut bytes) = (0, 0);
    for (path, length) in disk.list(dir).map_err(io_error(dir))? {
        if file_sequence(&path).is_some_and(|(number, _)| number < sequence) {
            remove_gradually(disk, &path, length)?;
            files += 1;
            bytes += length;
        }
    }
    Ok((files, bytes))
}

/// Bytes a replaced file shrinks by at a time before it is deleted.
pub(super) const REMOVE_STEP_BYTES: u64 = 8 << 20;
/// The pause between two steps.
const REMOVE_STEP_PAUSE: Duration = Duration::from_millis(1);

/// Deletes a replaced file a few megabytes at a time. Why: freeing a file's blocks is
/// filesystem journal work, and the log's next fsync waits for the journal; freeing a
/// segment of 200 MB at once held it for 10 to 20 ms, and every firing behind it. The
/// file is already obsolete (recovery starts from the newer snapshot and deletes what is
/// left of it), so a crash half way through loses nothing. The shrinking is only a
/// courtesy to the log: a file that cannot be opened for writing (say, made read-only by
/// hand) is simply unlinked, and only the unlink's failure is an error.
fn remove_gradually(disk: &dyn Disk, path: &Path, mut length: u64) -> Result<(), StoreError> {
    if length > REMOVE_STEP_BYTES {
        if let Ok(mut file) = disk.open(path) {
            while length > REMOVE_STEP_BYTES {
                length -= REMOVE_STEP_BYTES;
                if file.set_len(length).is_err() {
                    break;
                }
                std::thread::sleep(REMOVE_STEP_PAUSE);
            }
        }
    }
    disk.remove(path).map_err(io_error(path))
}
