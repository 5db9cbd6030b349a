//! The simulated disk's files: an inode's bytes as seen and as durable, and the handle
//! through which the store appends, syncs and cuts them (failing after a crash, or where
//! the harness armed a fault).

use std::io::{self, ErrorKind};

use super::state::{Faults, Inode, InodeId, SimDisk, State};
use crate::local::store::disk::DiskFile;
use crate::sim::rng::Rng;

/// The largest file the simulated disk holds: `set_len` beyond it is a full disk rather
/// than an allocation the test machine cannot make.
const MAX_FILE_BYTES: u64 = 1 << 30;

impl Inode {
    /// The new length is seen at once; what it cuts below the durable prefix stays
    /// durable (in `cut`) until the next sync.
    pub(super) fn set_len(&mut self, length: usize) {
        if length < self.synced {
            let mut hidden = self.content[length..self.synced].to_vec();
            hidden.extend(self.cut.take().unwrap_or_default());
            self.cut = Some(hidden);
            self.synced = length;
        }
        self.content.resize(length, 0);
    }

    pub(super) fn make_durable(&mut self) {
        self.synced = self.content.len();
        self.cut = None;
    }
}

/// An open file of a [`SimDisk`]: its inode, and the process generation it belongs to.
pub(super) struct SimFile {
    pub(super) disk: SimDisk,
    pub(super) inode: InodeId,
    pub(super) generation: u64,
}

impl State {
    /// A new handle on `inode` for this process generation.
    pub(super) fn handle(&mut self, inode: InodeId, disk: &SimDisk) -> Box<dyn DiskFile> {
        if let Some(file) = self.inodes.get_mut(&inode) {
            file.open += 1;
        }
        Box::new(SimFile {
            disk: disk.clone(),
            inode,
            generation: self.generation,
        })
    }
}

impl SimFile {
    /// Runs `call` on the file's inode after counting the call and checking the handle.
    fn with<T>(
        &mut self,
        what: &str,
        call: impl FnOnce(&mut Faults, &mut Rng, &mut Inode) -> io::Result<T>,
    ) -> io::Result<T> {
        let mut state = self.disk.lock();
        state.begin_handle(self.generation, what)?;
        let State {
            faults,
            rng,
            inodes,
            ..
        } = &mut *state;
        let file = inodes.get_mut(&self.inode).expect("an open inode is kept");
        call(faults, rng, file)
    }

    fn sync(&mut self, what: &'static str) -> io::Result<()> {
        self.with(what, |faults, rng, file| {
            if std::mem::take(&mut faults.sync) {
                if rng.chance(1, 2) {
                    file.make_durable();
                }
                return Err(io::Error::other(format!(
                    "simulated I/O error (EIO) on {what}"
                )));
            }
            file.make_durable();
            Ok(())
        })
    }
}

impl DiskFile for SimFile {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.with("append", |faults, rng, file| {
            if std::mem::take(&mut faults.append) {
                return Err(io::Error::other("simulated I/O error (EIO) on append"));
            }
            if std::mem::take(&mut faults.enospc) {
                let written = rng.below_usize(bytes.len() + 1);
                file.content.extend_from_slice(&bytes[..written]);
                return Err(io::Error::new(
                    ErrorKind::StorageFull,
                    format!(
                        "simulated full disk: {written} of {} bytes written",
                        bytes.len()
                    ),
                ));
            }
            file.content.extend_from_slice(bytes);
            Ok(())
        })
    }

    fn sync_data(&mut self) -> io::Result<()> {
        self.sync("sync_data")
    }

    fn sync_all(&mut self) -> io::Result<()> {
        self.sync("sync_all")
    }

    fn set_len(&mut self, length: u64) -> io::Result<()> {
        self.with("set_len", |faults, _, file| {
            if std::mem::take(&mut faults.set_len) {
                return Err(io::Error::other("simulated I/O error (EIO) on set_len"));
            }
            if length > MAX_FILE_BYTES {
                return Err(io::Error::new(
                    ErrorKind::StorageFull,
                    format!("simulated disk: {length} bytes is beyond its files' size"),
                ));
            }
            file.set_len(length as usize);
            Ok(())
        })
    }
}

impl Drop for SimFile {
    /// Closing: a removed file whose last handle this was is gone (unless a crash could
    /// still bring its name back). A handle from before a crash was already forgotten.
    fn drop(&mut self) {
        let mut state = self.disk.lock();
        if state.generation != self.generation {
            return;
        }
        if let Some(file) = state.inodes.get_mut(&self.inode) {
            file.open = file.open.saturating_sub(1);
        }
        state.collect_garbage();
    }
}
