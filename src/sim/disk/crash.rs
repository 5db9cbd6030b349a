//! What a machine crash keeps of the simulated disk: every change the disk was owed (a
//! directory's entry changes since its last `sync_dir`, a file's bytes and cut since its
//! last sync) is kept or lost by the seeded generator, so that a seed replays one outcome
//! and many seeds cover them all.

use std::collections::BTreeSet;

use super::state::{Inode, InodeId, State};
use crate::sim::rng::Rng;

/// The size of a disk sector: a corrupted unsynced tail has one sector's worth of garbage.
const SECTOR: usize = 512;

impl State {
    /// Replaces what the process saw with what the disk kept. Entry changes first
    /// (directories in path order, each one's changes in the order made, each kept or
    /// lost on its own), then the bytes of each file that still has a name, by inode.
    pub(super) fn lose_power(&mut self) {
        let mut names = self.durable_names.clone();
        for change in std::mem::take(&mut self.pending).into_values().flatten() {
            if self.rng.chance(1, 2) {
                change.apply(&mut names);
            }
        }
        self.durable_names = names.clone();
        self.names = names;
        let named: BTreeSet<InodeId> = self.names.values().copied().collect();
        self.inodes.retain(|inode, _| named.contains(inode));
        self.garbled = false;
        for file in self.inodes.values_mut() {
            self.garbled |= file.lose_unsynced(&mut self.rng);
        }
    }
}

impl Inode {
    /// Settles what was owed to the disk for this file. A cut not yet synced may be undone
    /// (the old bytes come back, and what was appended after the cut is lost); otherwise
    /// the unsynced tail is kept whole, dropped, torn at any byte, or kept with one sector
    /// of it overwritten with random bytes (a write the disk garbled on power loss).
    /// True if it garbled the tail.
    fn lose_unsynced(&mut self, rng: &mut Rng) -> bool {
        if let Some(hidden) = self.cut.take() {
            if rng.chance(1, 2) {
                self.content.truncate(self.synced);
                self.content.extend(hidden);
                self.make_durable();
                return false;
            }
        }
        let tail = self.content.len() - self.synced;
        let mut garbled = false;
        if tail > 0 {
            match rng.below(4) {
                0 => {}
                1 => self.content.truncate(self.synced),
                2 => self.content.truncate(self.synced + rng.below_usize(tail)),
                _ => {
                    self.corrupt_sector_of_tail(rng);
                    garbled = true;
                }
            }
        }
        self.make_durable();
        garbled
    }

    /// Overwrites with random bytes the unsynced part of one sector the tail touches
    /// (never a durable byte), making sure at least one byte changes.
    fn corrupt_sector_of_tail(&mut self, rng: &mut Rng) {
        let end = self.content.len();
        let first = self.synced / SECTOR;
        let last = (end - 1) / SECTOR;
        let sector = first + rng.below_usize(last - first + 1);
        let start = (sector * SECTOR).max(self.synced);
        let stop = ((sector + 1) * SECTOR).min(end);
        let before = self.content[start..stop].to_vec();
        for byte in &mut self.content[start..stop] {
            *byte = rng.next() as u8;
        }
        if self.content[start..stop] == before[..] {
            self.content[start] ^= 1;
        }
    }
}
