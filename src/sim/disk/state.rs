//! What the simulated disk holds: every inode, the entries as the process sees them and
//! as the disk has them, the changes owed to the disk in between, and the faults armed;
//! and [`SimDisk`], the shared handle on it. The bookkeeping every call does (counting
//! itself, failing after a crash, owing a change to its directory) is here.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, ErrorKind};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::sim::rng::Rng;

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

pub(super) type InodeId = u64;

/// A change to a directory's entries not yet made durable by `sync_dir`.
#[derive(Debug, Clone)]
pub(super) enum Change {
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
    pub(super) fn apply(&self, names: &mut BTreeMap<PathBuf, InodeId>) {
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

    pub(super) fn inode(&self) -> InodeId {
        match self {
            Change::Link { inode, .. }
            | Change::Rename { inode, .. }
            | Change::Unlink { inode, .. } => *inode,
        }
    }
}

/// Faults the harness armed; each I/O fault fires once, on the next call of its kind.
#[derive(Debug, Default)]
pub(super) struct Faults {
    pub(super) read: bool,
    pub(super) append: bool,
    pub(super) enospc: bool,
    pub(super) sync: bool,
    pub(super) set_len: bool,
    /// The number of the call (as counted by `calls`) that does not happen.
    pub(super) crash_at: Option<u64>,
    /// Set by that call: every call fails until the harness crashes the process or machine.
    pub(super) crashed: bool,
}

/// One file, named or not (a removed file lives on while a handle has it open).
#[derive(Debug, Default)]
pub(super) struct Inode {
    /// The bytes as the process sees them.
    pub(super) content: Vec<u8>,
    /// `content[..synced]` is on the disk for sure.
    pub(super) synced: usize,
    /// Durable bytes from `synced` on that a `set_len` since the last sync cut off: a
    /// machine crash may bring them back, since the cut itself was not yet durable.
    pub(super) cut: Option<Vec<u8>>,
    /// Handles open on it in this process generation.
    pub(super) open: usize,
}

#[derive(Debug)]
pub(super) struct State {
    pub(super) rng: Rng,
    /// Directories, all durable.
    pub(super) dirs: BTreeSet<PathBuf>,
    /// Entries as the process sees them.
    pub(super) names: BTreeMap<PathBuf, InodeId>,
    /// Entries as the disk has them.
    pub(super) durable_names: BTreeMap<PathBuf, InodeId>,
    /// Changes owed to the disk, by directory, in the order made.
    pub(super) pending: BTreeMap<PathBuf, Vec<Change>>,
    pub(super) inodes: BTreeMap<InodeId, Inode>,
    pub(super) next_inode: InodeId,
    /// Bumped by every crash; a handle of an older generation fails.
    pub(super) generation: u64,
    pub(super) calls: u64,
    pub(super) faults: Faults,
    pub(super) garbled: bool,
}

pub(super) fn eio(what: &str, path: &Path) -> io::Error {
    io::Error::other(format!(
        "simulated I/O error (EIO) on {what} of {}",
        path.display()
    ))
}

pub(super) fn not_found(path: &Path) -> io::Error {
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
pub(super) fn parent_of(path: &Path) -> PathBuf {
    path.parent().map(Path::to_path_buf).unwrap_or_default()
}

impl State {
    /// Counts a call, and fails it if the harness's crash is due or has happened.
    pub(super) fn begin(&mut self, what: &str) -> io::Result<()> {
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
    pub(super) fn begin_handle(&mut self, generation: u64, what: &str) -> io::Result<()> {
        self.begin(what)?;
        if generation != self.generation {
            return Err(io::Error::other(format!(
                "simulated disk: {what} on a handle opened before a crash"
            )));
        }
        Ok(())
    }

    pub(super) fn dir_exists(&self, dir: &Path) -> bool {
        dir.as_os_str().is_empty() || self.dirs.contains(dir)
    }

    pub(super) fn inode_at(&self, path: &Path) -> io::Result<InodeId> {
        self.names.get(path).copied().ok_or_else(|| not_found(path))
    }

    /// Checks that `path` can name a new file: its directory exists, it is not one.
    pub(super) fn check_new_name(&self, path: &Path) -> io::Result<()> {
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

    pub(super) fn owe(&mut self, dir: PathBuf, change: Change) {
        self.pending.entry(dir).or_default().push(change);
    }

    /// A new empty file at `path` (which must be free), open.
    pub(super) fn create_file(&mut self, path: &Path) -> InodeId {
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

    /// Forgets inodes nothing can reach any more: no name seen or durable, no change owed
    /// (a lost removal could bring one back), no open handle.
    pub(super) fn collect_garbage(&mut self) {
        let mut live: BTreeSet<InodeId> = self.names.values().copied().collect();
        live.extend(self.durable_names.values().copied());
        live.extend(self.pending.values().flatten().map(Change::inode));
        self.inodes
            .retain(|inode, file| file.open > 0 || live.contains(inode));
    }

    /// Makes `count` of the changes owed in `dir` durable, the oldest first.
    pub(super) fn settle_dir(&mut self, dir: &Path, count: usize) {
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
    pub(super) fn end_process(&mut self) {
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

    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere (an injected one) must not make the disk unusable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
