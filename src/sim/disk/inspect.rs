//! What the harness reads of the simulated disk without it counting as a call: the
//! number of calls made, the files and their bytes, and a fingerprint of everything the
//! process sees, by which two runs of one seed are compared.

use std::io;
use std::path::{Path, PathBuf};

use super::state::SimDisk;

impl SimDisk {
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
