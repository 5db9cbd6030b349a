//! The simulated disk: an in-memory [`Disk`] that keeps apart what the process sees and
//! what a power loss is sure to keep, so that the simulation can crash the process or the
//! machine between any two calls of the store and inject a failure into any one.
//!
//! The model, per the contract in [`crate::local::store::disk`]:
//! - a file (an inode) has the bytes the process sees, of which a prefix is durable (made
//!   so by the file's last successful sync); appends after it, and a cut by `set_len`
//!   below it, are owed to the disk until the next sync;
//! - a directory's entries (name to inode) change at once for the process, but each
//!   creation, rename and removal is owed to the disk until `sync_dir` of that directory;
//! - a process crash loses nothing the process saw (the page cache survives) and makes
//!   every open handle fail; a machine crash decides, by the seeded [`Rng`], what of each
//!   owed change reached the disk (see `disk/crash.rs`).
//!
//! Directories themselves are durable as soon as they are created: the store creates its
//! directory once, before any file, and the simulation does not look for that fault.
//!
//! Everything is deterministic: one [`Rng`], ordered maps, no clock. All clones of a
//! [`SimDisk`] share one state behind a mutex; the simulation calls from one thread, so
//! the order of calls, and with it every random choice, is the seed's.

mod crash;
mod file;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Cursor, ErrorKind, Read};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::rng::Rng;
use crate::local::store::disk::{Disk, DiskFile};
use file::{Inode, SimFile};

/// A simulated disk; clones share it (the harness keeps one, the store gets another).
#[derive(Clone)]
pub struct SimDisk {
    state: Arc<Mutex<State>>,
}

/// A summary: the state holds every file's bytes, too many to print.
impl std::fmt::Debug for SimDisk {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        formatter
            .debug_struct("SimDisk")
            .field("files", &state.names.len())
            .field("calls", &state.calls)
            .field("generation", &state.generation)
            .field("crashed", &state.faults.crashed)
            .finish()
    }
}

type InodeId = u64;

/// A change to a directory's entries not yet made durable by `sync_dir`.
#[derive(Debug, Clone)]
enum Change {
    /// A creation (or a file renamed in from another directory).
    Link { name: PathBuf, inode: InodeId },
    Rename {
        from: PathBuf,
        to: PathBuf,
        inode: InodeId,
    },
    /// A removal (or a file renamed out to another directory).
    Unlink { name: PathBuf, inode: InodeId },
}

impl Change {
    /// Applies the change to durable entries. A rename or removal of a name that no
    /// longer holds the inode (its creation was lost in a crash) does nothing: the file is
    /// gone already.
    fn apply(&self, names: &mut BTreeMap<PathBuf, InodeId>) {
        match self {
            Change::Link { name, inode } => {
                names.insert(name.clone(), *inode);
            }
            Change::Rename { from, to, inode } => {
                if names.get(from) == Some(inode) {
                    names.remove(from);
                    names.insert(to.clone(), *inode);
                }
            }
            Change::Unlink { name, inode } => {
                if names.get(name) == Some(inode) {
                    names.remove(name);
                }
            }
        }
    }

    fn inode(&self) -> InodeId {
        match self {
            Change::Link { inode, .. }
            | Change::Rename { inode, .. }
            | Change::Unlink { inode, .. } => *inode,
        }
    }
}

/// Faults the harness armed; each I/O fault fires once, on the next call of its kind.
#[derive(Debug, Default)]
struct Faults {
    read: bool,
    append: bool,
    enospc: bool,
    sync: bool,
    set_len: bool,
    /// The number of the call (as counted by `calls`) that does not happen.
    crash_at: Option<u64>,
    /// Set by that call: every call fails until the harness crashes the process or machine.
    crashed: bool,
}

#[derive(Debug)]
struct State {
    rng: Rng,
    /// Directories, all durable.
    dirs: BTreeSet<PathBuf>,
    /// Entries as the process sees them.
    names: BTreeMap<PathBuf, InodeId>,
    /// Entries as the disk has them.
    durable_names: BTreeMap<PathBuf, InodeId>,
    /// Changes owed to the disk, by directory, in the order made.
    pending: BTreeMap<PathBuf, Vec<Change>>,
    inodes: BTreeMap<InodeId, Inode>,
    next_inode: InodeId,
    /// Bumped by every crash; a handle of an older generation fails.
    generation: u64,
    calls: u64,
    faults: Faults,
    garbled: bool,
}

fn eio(what: &str, path: &Path) -> io::Error {
    io::Error::other(format!(
        "simulated I/O error (EIO) on {what} of {}",
        path.display()
    ))
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        ErrorKind::NotFound,
        format!(
            "simulated disk: no such file or directory: {}",
            path.display()
        ),
    )
}

/// The directory an entry is in (`""` for a bare name: the current directory, which
/// always exists).
fn parent_of(path: &Path) -> PathBuf {
    path.parent().map(Path::to_path_buf).unwrap_or_default()
}

impl State {
    /// Counts a call, and fails it if the harness's crash is due or has happened.
    fn begin(&mut self, what: &str) -> io::Result<()> {
        self.calls += 1;
        if self.faults.crash_at == Some(self.calls) {
            self.faults.crash_at = None;
            self.faults.crashed = true;
            return Err(io::Error::other(format!(
                "simulated crash: disk call {} ({what}) did not happen",
                self.calls
            )));
        }
        if self.faults.crashed {
            return Err(io::Error::other(format!(
                "simulated crash: disk call {} ({what}) after the crash",
                self.calls
            )));
        }
        Ok(())
    }

    /// [`State::begin`] for a handle, which also fails if a crash came after its opening.
    fn begin_handle(&mut self, generation: u64, what: &str) -> io::Result<()> {
        self.begin(what)?;
        if generation != self.generation {
            return Err(io::Error::other(format!(
                "simulated disk: {what} on a handle opened before a crash"
            )));
        }
        Ok(())
    }

    fn dir_exists(&self, dir: &Path) -> bool {
        dir.as_os_str().is_empty() || self.dirs.contains(dir)
    }

    fn inode_at(&self, path: &Path) -> io::Result<InodeId> {
        self.names.get(path).copied().ok_or_else(|| not_found(path))
    }

    /// Checks that `path` can name a new file: its directory exists, it is not one.
    fn check_new_name(&self, path: &Path) -> io::Result<()> {
        if !self.dir_exists(&parent_of(path)) {
            return Err(not_found(path));
        }
        if self.dirs.contains(path) {
            return Err(io::Error::new(
                ErrorKind::AlreadyExists,
                format!("simulated disk: {} is a directory", path.display()),
            ));
        }
        Ok(())
    }

    fn owe(&mut self, dir: PathBuf, change: Change) {
        self.pending.entry(dir).or_default().push(change);
    }

    /// A new empty file at `path` (which must be free), open.
    fn create_file(&mut self, path: &Path) -> InodeId {
        let inode = self.next_inode;
        self.next_inode += 1;
        self.inodes.insert(inode, Inode::default());
        self.names.insert(path.to_path_buf(), inode);
        let link = Change::Link {
            name: path.to_path_buf(),
            inode,
        };
        self.owe(parent_of(path), link);
        inode
    }

    fn handle(&mut self, inode: InodeId, disk: &SimDisk) -> Box<dyn DiskFile> {
        if let Some(file) = self.inodes.get_mut(&inode) {
            file.open += 1;
        }
        Box::new(SimFile {
            disk: disk.clone(),
            inode,
            generation: self.generation,
        })
    }

    /// Forgets inodes nothing can reach any more: no name seen or durable, no change owed
    /// (a lost removal could bring one back), no open handle.
    fn collect_garbage(&mut self) {
        let mut live: BTreeSet<InodeId> = self.names.values().copied().collect();
        live.extend(self.durable_names.values().copied());
        live.extend(self.pending.values().flatten().map(Change::inode));
        self.inodes
            .retain(|inode, file| file.open > 0 || live.contains(inode));
    }

    /// Makes `count` of the changes owed in `dir` durable, the oldest first.
    fn settle_dir(&mut self, dir: &Path, count: usize) {
        if let Some(changes) = self.pending.get_mut(dir) {
            let count = count.min(changes.len());
            for change in changes.drain(..count) {
                change.apply(&mut self.durable_names);
            }
            if changes.is_empty() {
                self.pending.remove(dir);
            }
        }
        self.collect_garbage();
    }

    /// What any crash does to the process: its handles are gone, its next calls succeed.
    fn end_process(&mut self) {
        self.generation += 1;
        self.faults.crashed = false;
        self.faults.crash_at = None;
        for file in self.inodes.values_mut() {
            file.open = 0;
        }
        self.collect_garbage();
    }
}

impl SimDisk {
    /// An empty disk (no directory, no file) whose every random choice comes from `rng`.
    pub fn new(rng: Rng) -> Self {
        let state = State {
            rng,
            dirs: BTreeSet::new(),
            names: BTreeMap::new(),
            durable_names: BTreeMap::new(),
            pending: BTreeMap::new(),
            inodes: BTreeMap::new(),
            next_inode: 1,
            generation: 0,
            calls: 0,
            faults: Faults::default(),
            garbled: false,
        };
        Self {
            state: Arc::new(Mutex::new(state)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere (an injected one) must not make the disk unusable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The process dies: everything it saw stays (the kernel still has it), nothing owed
    /// to the disk is paid, and every handle open before fails from now on.
    pub fn crash_process(&self) {
        self.lock().end_process();
    }

    /// The machine loses power: of every change owed to the disk, the seeded generator
    /// decides what had reached it (see `disk/crash.rs`); handles fail from now on.
    pub fn crash_machine(&self) {
        let mut state = self.lock();
        state.lose_power();
        state.end_process();
    }

    /// The next `read_from` fails with EIO.
    pub fn fail_read_next(&self) {
        self.lock().faults.read = true;
    }

    /// The next append fails with EIO, writing nothing.
    pub fn fail_append_next(&self) {
        self.lock().faults.append = true;
    }

    /// The next append writes a prefix of its bytes (its length by the generator, maybe
    /// none) and fails with `StorageFull`.
    pub fn enospc_next_append(&self) {
        self.lock().faults.enospc = true;
    }

    /// The next `sync_data`, `sync_all` or `sync_dir` fails with EIO; what it was to make
    /// durable may or may not have become so (the generator decides).
    pub fn fail_sync_next(&self) {
        self.lock().faults.sync = true;
    }

    /// The next `set_len` fails with EIO, changing nothing.
    pub fn fail_set_len_next(&self) {
        self.lock().faults.set_len = true;
    }

    /// The `n`-th disk call from now (1 is the next; every trait method counts) does not
    /// happen and fails, and so does every call after it, until the harness calls
    /// [`SimDisk::crash_process`] or [`SimDisk::crash_machine`] (which also disarm it).
    pub fn crash_at_call(&self, n: u64) {
        let mut state = self.lock();
        state.faults.crash_at = Some(state.calls + n.max(1));
    }

    /// Every armed fault off (a crash that happened stays, for the harness to carry out).
    pub fn disarm(&self) {
        let mut state = self.lock();
        let crashed = state.faults.crashed;
        state.faults = Faults {
            crashed,
            ..Faults::default()
        };
    }

    /// Whether the last machine crash left garbage in bytes that were never synced.
    pub fn garbled_on_power_loss(&self) -> bool {
        self.lock().garbled
    }

    /// Whether a [`SimDisk::crash_at_call`] crash has happened and awaits the harness.
    pub fn crashed(&self) -> bool {
        self.lock().faults.crashed
    }

    /// Flips bit `bit` (bit `bit % 8` of byte `bit / 8`) of a file: damage at rest, in the
    /// bytes the process sees and, where they are durable, on the disk.
    pub fn flip_bit_at_rest(&self, path: &Path, bit: u64) -> io::Result<()> {
        let mut state = self.lock();
        let inode = state.inode_at(path)?;
        let file = state.inodes.get_mut(&inode).expect("a named inode exists");
        let byte = usize::try_from(bit / 8)
            .ok()
            .filter(|&byte| byte < file.content.len())
            .ok_or_else(|| {
                io::Error::new(
                    ErrorKind::InvalidInput,
                    format!("bit {bit} is beyond the end of {}", path.display()),
                )
            })?;
        file.content[byte] ^= 1 << (bit % 8);
        Ok(())
    }

    /// How many disk calls (trait methods, of the disk or of its files) have been made.
    pub fn calls(&self) -> u64 {
        self.lock().calls
    }

    /// Every file the process sees, with its length, by path.
    pub fn files(&self) -> Vec<(PathBuf, u64)> {
        let state = self.lock();
        state
            .names
            .iter()
            .map(|(path, inode)| (path.clone(), state.inodes[inode].content.len() as u64))
            .collect()
    }

    /// A file's bytes as the process sees them (not counted as a call, never faulted).
    pub fn read_all(&self, path: &Path) -> io::Result<Vec<u8>> {
        let state = self.lock();
        let inode = state.inode_at(path)?;
        Ok(state.inodes[&inode].content.clone())
    }

    /// A hash (64-bit FNV-1a) of what the process sees: directories, then each file's path
    /// and bytes, in path order. Equal runs give equal fingerprints.
    pub fn fingerprint(&self) -> u64 {
        let state = self.lock();
        let mut hash = Fnv::default();
        for dir in &state.dirs {
            hash.write(b"d");
            hash.write(dir.as_os_str().as_encoded_bytes());
            hash.write(&[0]);
        }
        for (path, inode) in &state.names {
            let content = &state.inodes[inode].content;
            hash.write(b"f");
            hash.write(path.as_os_str().as_encoded_bytes());
            hash.write(&[0]);
            hash.write(&(content.len() as u64).to_le_bytes());
            hash.write(content);
        }
        hash.0
    }
}

/// 64-bit FNV-1a.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 ^= u64::from(byte);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

impl Disk for SimDisk {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut state = self.lock();
        state.begin("create_dir_all")?;
        let missing: Vec<PathBuf> = dir
            .ancestors()
            .filter(|ancestor| !ancestor.as_os_str().is_empty())
            .map(Path::to_path_buf)
            .collect();
        if let Some(file) = missing.iter().find(|path| state.names.contains_key(*path)) {
            return Err(io::Error::new(
                ErrorKind::AlreadyExists,
                format!("simulated disk: {} is a file", file.display()),
            ));
        }
        state.dirs.extend(missing);
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<(PathBuf, u64)>> {
        let mut state = self.lock();
        state.begin("list")?;
        if !state.dir_exists(dir) {
            return Err(not_found(dir));
        }
        Ok(state
            .names
            .iter()
            .filter(|(path, _)| parent_of(path) == dir)
            .map(|(path, inode)| (path.clone(), state.inodes[inode].content.len() as u64))
            .collect())
    }

    /// A crashed disk answers false: this call cannot report an error.
    fn exists(&self, path: &Path) -> bool {
        let mut state = self.lock();
        state.begin("exists").is_ok()
            && (state.names.contains_key(path) || state.dirs.contains(path))
    }

    fn read_from(&self, path: &Path, offset: u64) -> io::Result<Box<dyn Read + Send>> {
        let mut state = self.lock();
        state.begin("read_from")?;
        let inode = state.inode_at(path)?;
        if std::mem::take(&mut state.faults.read) {
            return Err(eio("read", path));
        }
        let content = &state.inodes[&inode].content;
        let start = usize::try_from(offset).map_or(content.len(), |at| at.min(content.len()));
        Ok(Box::new(Cursor::new(content[start..].to_vec())))
    }

    fn create_new(&self, path: &Path) -> io::Result<Box<dyn DiskFile>> {
        let mut state = self.lock();
        state.begin("create_new")?;
        state.check_new_name(path)?;
        if state.names.contains_key(path) {
            return Err(io::Error::new(
                ErrorKind::AlreadyExists,
                format!("simulated disk: {} exists", path.display()),
            ));
        }
        let inode = state.create_file(path);
        Ok(state.handle(inode, self))
    }

    /// An existing file is truncated in place (the same inode, its entry unchanged): the
    /// cut is owed to the disk until the file's next sync, like any `set_len`.
    fn create(&self, path: &Path) -> io::Result<Box<dyn DiskFile>> {
        let mut state = self.lock();
        state.begin("create")?;
        state.check_new_name(path)?;
        let inode = match state.names.get(path).copied() {
            Some(inode) => {
                state.inodes.get_mut(&inode).expect("named").set_len(0);
                inode
            }
            None => state.create_file(path),
        };
        Ok(state.handle(inode, self))
    }

    fn open(&self, path: &Path) -> io::Result<Box<dyn DiskFile>> {
        let mut state = self.lock();
        state.begin("open")?;
        let inode = state.inode_at(path)?;
        Ok(state.handle(inode, self))
    }

    /// Replaces a file at `to`. A rename within one directory is one change owed to it;
    /// across directories, a removal owed to one and a creation owed to the other.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut state = self.lock();
        state.begin("rename")?;
        let inode = state.inode_at(from)?;
        state.check_new_name(to)?;
        if from == to {
            return Ok(());
        }
        state.names.remove(from);
        state.names.insert(to.to_path_buf(), inode);
        let (from_dir, to_dir) = (parent_of(from), parent_of(to));
        let (from, to) = (from.to_path_buf(), to.to_path_buf());
        if from_dir == to_dir {
            state.owe(from_dir, Change::Rename { from, to, inode });
        } else {
            state.owe(from_dir, Change::Unlink { name: from, inode });
            state.owe(to_dir, Change::Link { name: to, inode });
        }
        state.collect_garbage();
        Ok(())
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut state = self.lock();
        state.begin("remove")?;
        let inode = state.inode_at(path)?;
        state.names.remove(path);
        let unlink = Change::Unlink {
            name: path.to_path_buf(),
            inode,
        };
        state.owe(parent_of(path), unlink);
        state.collect_garbage();
        Ok(())
    }

    /// A failed sync may have made any oldest part of what the directory owed durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut state = self.lock();
        state.begin("sync_dir")?;
        if !state.dir_exists(dir) {
            return Err(not_found(dir));
        }
        if std::mem::take(&mut state.faults.sync) {
            let owed = state.pending.get(dir).map_or(0, Vec::len);
            let reached = state.rng.below_usize(owed + 1);
            state.settle_dir(dir, reached);
            return Err(eio("sync_dir", dir));
        }
        state.settle_dir(dir, usize::MAX);
        Ok(())
    }
}
