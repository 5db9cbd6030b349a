//! The simulated disk's own tests: what each crash keeps and loses, what each fault does,
//! that a seed replays a run, and that the store's way of writing files (segments,
//! snapshots sealed by rename, directory syncs) keeps every acknowledged record through a
//! machine crash at any call.

use std::io::{ErrorKind, Read};
use std::path::{Path, PathBuf};

use super::SimDisk;
use crate::local::store::disk::Disk;
use crate::local::store::frame::{self, FILE_HEADER};
use crate::local::store::records::{record::Kind, Record, Settled};
use crate::sim::rng::Rng;

fn disk(seed: u64) -> SimDisk {
    SimDisk::new(Rng::new(seed))
}

fn dir() -> PathBuf {
    PathBuf::from("/data/tickd")
}

/// A disk with the data directory made, and a file at `name` holding `synced` synced
/// bytes (its creation durable) then `unsynced` more bytes not synced.
fn with_file(seed: u64, name: &str, synced: &[u8], unsynced: &[u8]) -> (SimDisk, PathBuf) {
    let disk = disk(seed);
    disk.create_dir_all(&dir()).unwrap();
    let path = dir().join(name);
    let mut file = disk.create_new(&path).unwrap();
    file.append(synced).unwrap();
    file.sync_data().unwrap();
    disk.sync_dir(&dir()).unwrap();
    file.append(unsynced).unwrap();
    (disk, path)
}

/// Bytes that differ from one position to the next, so a torn or shifted copy shows.
fn pattern(length: usize, salt: u8) -> Vec<u8> {
    (0..length)
        .map(|index| (index as u8).wrapping_mul(31) ^ salt)
        .collect()
}

/// The synced length the disk keeps for `path` (white box: the durable prefix).
fn synced_len(disk: &SimDisk, path: &Path) -> usize {
    let state = disk.lock();
    state.inodes[&state.names[path]].synced
}

fn read(disk: &dyn Disk, path: &Path, offset: u64) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    disk.read_from(path, offset)?.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// A run of file calls whose outcome depends on the seed (a machine crash in the middle).
fn scripted_run(seed: u64) -> (u64, u64) {
    let (disk, path) = with_file(seed, "1.log", &pattern(700, 9), &pattern(1500, 2));
    disk.create_new(&dir().join("2.log"))
        .unwrap()
        .append(&pattern(600, 4))
        .unwrap();
    disk.crash_machine();
    let mut file = disk.open(&path).unwrap();
    file.set_len(100).unwrap();
    file.append(&pattern(900, 7)).unwrap();
    disk.crash_machine();
    (disk.fingerprint(), disk.calls())
}

#[test]
fn a_seed_replays_its_run_and_seeds_differ() {
    for seed in 0..16 {
        assert_eq!(scripted_run(seed), scripted_run(seed), "seed {seed}");
    }
    let fingerprints: std::collections::BTreeSet<u64> =
        (0..16).map(|seed| scripted_run(seed).0).collect();
    assert!(fingerprints.len() > 4, "{} outcomes", fingerprints.len());
}

#[test]
fn clones_share_one_disk_across_threads() {
    fn shared<T: Send + Sync + Clone + 'static>() {}
    shared::<SimDisk>();
    let disk = disk(0);
    disk.create_dir_all(&dir()).unwrap();
    let other = disk.clone();
    std::thread::spawn(move || other.create_new(&dir().join("1.log")).map(drop))
        .join()
        .unwrap()
        .unwrap();
    assert_eq!(disk.files().len(), 1);
}

mod directory;
mod durability;
mod faults;
mod store_like;
