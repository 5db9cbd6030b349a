//! [`SimDisk`] as the store's [`Disk`]: the calls made by path (directories and their
//! entries, opening and creating files, reading one from an offset). Each entry change
//! is seen at once and owed to its directory until `sync_dir`. The calls on an open file
//! are [`SimFile`](super::file::SimFile)'s.

use std::io::{self, Cursor, ErrorKind, Read};
use std::path::{Path, PathBuf};

use super::state::{eio, not_found, parent_of, Change, SimDisk};
use crate::local::store::disk::{Disk, DiskFile};

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
