//! The store's only way to the file system: every open, append, fsync, cut, rename,
//! removal, listing and read of the data directory goes through a [`Disk`].
//!
//! Why a seam here: what a crash keeps of the log is decided by which of these calls ran
//! and which had reached the disk. The service runs on [`RealDisk`] (plain `std::fs`, the
//! calls it always made); the deterministic simulation (the `sim` feature) runs the same
//! store on a disk that keeps synced and unsynced bytes apart, so that it can crash the
//! process or the machine between any two calls and inject a failure into any one.
//!
//! The contract every implementation keeps, the one the store's durability rests on:
//! - bytes appended to a file are durable once [`DiskFile::sync_data`] returns Ok;
//! - a file's creation, rename or removal is durable once [`Disk::sync_dir`] of its
//!   directory returns Ok;
//! - after an error from `sync_data`, nothing is known about what reached the disk.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// The file-system calls the store makes.
pub trait Disk: Send + Sync + 'static {
    /// Creates `dir` and its parents if missing.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// The regular files directly in `dir`, each with its length, in no particular order.
    fn list(&self, dir: &Path) -> io::Result<Vec<(PathBuf, u64)>>;
    /// Whether anything exists at `path`.
    fn exists(&self, path: &Path) -> bool;
    /// The file's bytes from `offset` on.
    fn read_from(&self, path: &Path, offset: u64) -> io::Result<Box<dyn Read + Send>>;
    /// A new, empty file to append to; fails if `path` exists.
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn DiskFile>>;
    /// An empty file to append to, truncating one that exists.
    fn create(&self, path: &Path) -> io::Result<Box<dyn DiskFile>>;
    /// An existing file, to append to or cut.
    fn open(&self, path: &Path) -> io::Result<Box<dyn DiskFile>>;
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Makes the creations, renames and removals in `dir` durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
}

/// One open file of the store, always written at its end.
pub trait DiskFile: Send {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()>;
    /// Makes the file's bytes (and the length they need) durable.
    fn sync_data(&mut self) -> io::Result<()>;
    /// Makes the file's bytes and all its metadata durable.
    fn sync_all(&mut self) -> io::Result<()>;
    /// Cuts (or extends) the file to `length` bytes; appends continue from there.
    fn set_len(&mut self, length: u64) -> io::Result<()>;
}

/// The service's disk: `std::fs`, call for call.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealDisk;

impl Disk for RealDisk {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        fs::create_dir_all(dir)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<(PathBuf, u64)>> {
        let mut files = Vec::new();
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            let metadata = entry.metadata()?;
            if metadata.is_file() {
                files.push((entry.path(), metadata.len()));
            }
        }
        Ok(files)
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn read_from(&self, path: &Path, offset: u64) -> io::Result<Box<dyn Read + Send>> {
        let mut file = File::open(path)?;
        if offset > 0 {
            file.seek(SeekFrom::Start(offset))?;
        }
        Ok(Box::new(file))
    }

    fn create_new(&self, path: &Path) -> io::Result<Box<dyn DiskFile>> {
        let file = OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(path)?;
        Ok(Box::new(RealFile(file)))
    }

    fn create(&self, path: &Path) -> io::Result<Box<dyn DiskFile>> {
        Ok(Box::new(RealFile(File::create(path)?)))
    }

    fn open(&self, path: &Path) -> io::Result<Box<dyn DiskFile>> {
        let file = OpenOptions::new().append(true).open(path)?;
        Ok(Box::new(RealFile(file)))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
}

/// A `std::fs::File` as a [`DiskFile`].
struct RealFile(File);

impl DiskFile for RealFile {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.0.write_all(bytes)
    }

    fn sync_data(&mut self) -> io::Result<()> {
        self.0.sync_data()
    }

    fn sync_all(&mut self) -> io::Result<()> {
        self.0.sync_all()
    }

    fn set_len(&mut self, length: u64) -> io::Result<()> {
        self.0.set_len(length)
    }
}
