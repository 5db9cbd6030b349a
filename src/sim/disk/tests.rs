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

#[test]
fn synced_bytes_survive_a_machine_crash() {
    for seed in 0..64 {
        let (disk, path) = with_file(seed, "1.log", &pattern(3000, 1), b"");
        disk.crash_machine();
        assert_eq!(
            disk.read_all(&path).unwrap(),
            pattern(3000, 1),
            "seed {seed}"
        );
    }
}

#[test]
fn unsynced_appends_survive_a_process_crash() {
    let (disk, path) = with_file(7, "1.log", b"synced", b" and not");
    let before = disk.fingerprint();
    disk.crash_process();
    assert_eq!(disk.read_all(&path).unwrap(), b"synced and not");
    assert_eq!(disk.fingerprint(), before);
    // Still owed to the disk: a machine crash after the process's may lose it.
    let lost = (0..64).any(|seed| {
        let (disk, path) = with_file(seed, "1.log", b"synced", b" and not");
        disk.crash_process();
        disk.crash_machine();
        disk.read_all(&path).unwrap() != b"synced and not"
    });
    assert!(
        lost,
        "no seed lost an unsynced append after a process crash"
    );
}

#[test]
fn a_machine_crash_keeps_drops_tears_or_corrupts_the_unsynced_tail() {
    let (synced, unsynced) = (pattern(1000, 3), pattern(2000, 5));
    let whole = [synced.clone(), unsynced.clone()].concat();
    let (mut kept, mut dropped, mut torn, mut corrupted) = (0, 0, 0, 0);
    for seed in 0..200 {
        let (disk, path) = with_file(seed, "1.log", &synced, &unsynced);
        disk.crash_machine();
        let after = disk.read_all(&path).unwrap();
        assert_eq!(
            after[..synced.len()],
            synced[..],
            "seed {seed}: durable bytes"
        );
        assert!(after.len() <= whole.len(), "seed {seed}: grew");
        if after == whole {
            kept += 1;
        } else if after.len() == synced.len() {
            dropped += 1;
        } else if after.len() < whole.len() {
            assert_eq!(
                after[..],
                whole[..after.len()],
                "seed {seed}: a torn tail is a prefix"
            );
            torn += 1;
        } else {
            // One sector's worth of bytes differs, all of them in the tail.
            let differing: Vec<usize> = (0..whole.len())
                .filter(|&index| after[index] != whole[index])
                .collect();
            let (first, last) = (differing[0], differing[differing.len() - 1]);
            assert!(
                first >= synced.len() && first / 512 == last / 512,
                "seed {seed}"
            );
            corrupted += 1;
        }
        // After the crash everything the process sees is durable.
        assert_eq!(synced_len(&disk, &path), after.len());
    }
    assert!(
        kept > 0 && dropped > 0 && torn > 0 && corrupted > 0,
        "kept {kept}, dropped {dropped}, torn {torn}, corrupted {corrupted}"
    );
}

#[test]
fn a_creation_is_durable_only_after_sync_dir() {
    let mut vanished = 0;
    for seed in 0..64 {
        let disk = disk(seed);
        disk.create_dir_all(&dir()).unwrap();
        let (unsynced, synced) = (dir().join("1.log"), dir().join("2.log"));
        for path in [&unsynced, &synced] {
            let mut file = disk.create_new(path).unwrap();
            file.append(b"bytes").unwrap();
            file.sync_data().unwrap();
            if path == &synced {
                disk.sync_dir(&dir()).unwrap();
            }
        }
        disk.crash_machine();
        // `sync_dir` made both creations durable (it syncs the directory, not one name).
        assert!(disk.exists(&synced), "seed {seed}");
        assert!(disk.exists(&unsynced), "seed {seed}");
        let disk = self::disk(seed);
        disk.create_dir_all(&dir()).unwrap();
        let mut file = disk.create_new(&unsynced).unwrap();
        file.append(b"bytes").unwrap();
        file.sync_all().unwrap();
        disk.crash_machine();
        if !disk.exists(&unsynced) {
            vanished += 1;
            assert!(disk.list(&dir()).unwrap().is_empty());
        }
    }
    assert!(vanished > 0, "no unsynced creation vanished");
}

#[test]
fn a_rename_is_durable_only_after_sync_dir_and_replaces_its_target() {
    let (mut lost, mut kept) = (0, 0);
    for seed in 0..64 {
        let (disk, partial) = with_file(seed, "2.partial", b"new", b"");
        let snapshot = dir().join("2.snapshot");
        let mut old = disk.create_new(&snapshot).unwrap();
        old.append(b"old").unwrap();
        old.sync_data().unwrap();
        disk.sync_dir(&dir()).unwrap();
        disk.rename(&partial, &snapshot).unwrap();
        assert_eq!(disk.read_all(&snapshot).unwrap(), b"new");
        assert!(!disk.exists(&partial));
        disk.crash_machine();
        let files: Vec<PathBuf> = disk.files().into_iter().map(|(path, _)| path).collect();
        if disk.read_all(&snapshot).unwrap() == b"new" {
            assert_eq!(files, std::slice::from_ref(&snapshot), "seed {seed}");
            kept += 1;
        } else {
            assert_eq!(disk.read_all(&snapshot).unwrap(), b"old", "seed {seed}");
            assert_eq!(disk.read_all(&partial).unwrap(), b"new", "seed {seed}");
            lost += 1;
        }
        // Synced, the rename always holds.
        disk.rename(&partial, &snapshot).ok();
        disk.sync_dir(&dir()).unwrap();
        disk.crash_machine();
        assert_eq!(disk.read_all(&snapshot).unwrap(), b"new", "seed {seed}");
        assert_eq!(disk.files().len(), 1, "seed {seed}");
    }
    assert!(lost > 0 && kept > 0, "lost {lost}, kept {kept}");
}

#[test]
fn a_removal_is_durable_only_after_sync_dir_and_open_handles_keep_working() {
    let mut back = 0;
    for seed in 0..64 {
        let (disk, path) = with_file(seed, "1.log", b"abc", b"");
        let mut handle = disk.open(&path).unwrap();
        disk.remove(&path).unwrap();
        assert!(!disk.exists(&path));
        assert!(disk.list(&dir()).unwrap().is_empty());
        // Unlinked, the file lives on for its handle.
        handle.append(b"def").unwrap();
        handle.sync_data().unwrap();
        drop(handle);
        disk.crash_machine();
        if disk.exists(&path) {
            assert_eq!(disk.read_all(&path).unwrap(), b"abcdef", "seed {seed}");
            back += 1;
        }
        disk.remove(&path).ok();
        disk.sync_dir(&dir()).unwrap();
        disk.crash_machine();
        assert!(!disk.exists(&path), "seed {seed}");
        // Nothing can reach the file: the disk forgot it.
        assert!(disk.lock().inodes.is_empty(), "seed {seed}");
    }
    assert!(back > 0, "no lost removal brought a file back");
}

#[test]
fn handles_from_before_a_crash_fail() {
    for machine in [false, true] {
        let (disk, path) = with_file(1, "1.log", b"abc", b"");
        let mut stale = disk.open(&path).unwrap();
        if machine {
            disk.crash_machine();
        } else {
            disk.crash_process();
        }
        assert!(stale.append(b"x").is_err());
        assert!(stale.sync_data().is_err());
        assert!(stale.set_len(0).is_err());
        assert_eq!(disk.read_all(&path).unwrap(), b"abc");
        let mut fresh = disk.open(&path).unwrap();
        fresh.append(b"d").unwrap();
        drop(stale);
        fresh.append(b"e").unwrap();
        assert_eq!(disk.read_all(&path).unwrap(), b"abcde");
    }
}

#[test]
fn set_len_is_seen_at_once_and_durable_after_a_sync() {
    let (mut undone, mut held) = (0, 0);
    for seed in 0..64 {
        let (disk, path) = with_file(seed, "1.log", b"acknowledged+refused", b"");
        let mut file = disk.open(&path).unwrap();
        file.set_len(12).unwrap();
        assert_eq!(disk.read_all(&path).unwrap(), b"acknowledged");
        file.append(b"!").unwrap();
        disk.crash_machine();
        match disk.read_all(&path).unwrap().as_slice() {
            b"acknowledged+refused" => undone += 1,
            // The cut held; the one byte after it is kept, dropped or garbled.
            kept if kept.starts_with(b"acknowledged") && kept.len() <= 13 => held += 1,
            other => panic!("seed {seed}: {:?}", String::from_utf8_lossy(other)),
        }
        let mut file = disk.open(&path).unwrap();
        file.set_len(3).unwrap();
        file.sync_data().unwrap();
        disk.crash_machine();
        assert_eq!(disk.read_all(&path).unwrap(), b"ack", "seed {seed}");
    }
    assert!(undone > 0 && held > 0, "undone {undone}, held {held}");
}

#[test]
fn files_are_named_in_directories_that_exist() {
    let disk = disk(0);
    let missing = dir().join("1.log");
    assert_eq!(
        disk.create_new(&missing).err().unwrap().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        disk.create(&missing).err().unwrap().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(disk.list(&dir()).unwrap_err().kind(), ErrorKind::NotFound);
    disk.create_dir_all(&dir().join("sub")).unwrap();
    assert!(disk.exists(&dir()) && disk.exists(Path::new("/data")));
    disk.create_new(&missing).unwrap().append(b"first").unwrap();
    let error = disk.create_new(&missing).err().unwrap();
    assert_eq!(error.kind(), ErrorKind::AlreadyExists);
    disk.create_new(&dir().join("sub/2.log")).unwrap();
    // Only the directory's own files, not its subdirectory's.
    assert_eq!(disk.list(&dir()).unwrap(), [(missing.clone(), 5)]);
    // `create` truncates the file in place.
    disk.create(&missing).unwrap().append(b"2nd").unwrap();
    assert_eq!(disk.read_all(&missing).unwrap(), b"2nd");
    assert_eq!(read(&disk, &missing, 1).unwrap(), b"nd");
    assert_eq!(read(&disk, &missing, 9).unwrap(), b"");
    let gone = dir().join("9.log");
    assert_eq!(disk.open(&gone).err().unwrap().kind(), ErrorKind::NotFound);
    assert_eq!(disk.remove(&gone).unwrap_err().kind(), ErrorKind::NotFound);
    assert_eq!(
        read(&disk, &gone, 0).unwrap_err().kind(),
        ErrorKind::NotFound
    );
}

#[test]
fn a_reader_sees_the_bytes_of_its_call() {
    let (disk, path) = with_file(0, "1.log", b"before", b"");
    let mut reader = disk.read_from(&path, 0).unwrap();
    disk.open(&path).unwrap().append(b" after").unwrap();
    let mut bytes = Vec::new();
    reader.read_to_end(&mut bytes).unwrap();
    assert_eq!(bytes, b"before");
}

#[test]
fn read_and_append_faults_fire_once() {
    let (disk, path) = with_file(0, "1.log", b"abc", b"");
    disk.fail_read_next();
    assert!(read(&disk, &path, 0).is_err());
    assert_eq!(read(&disk, &path, 0).unwrap(), b"abc");
    let mut file = disk.open(&path).unwrap();
    disk.fail_append_next();
    assert!(file.append(b"lost").is_err());
    assert_eq!(disk.read_all(&path).unwrap(), b"abc");
    file.append(b"d").unwrap();
    assert_eq!(disk.read_all(&path).unwrap(), b"abcd");
}

#[test]
fn a_full_disk_writes_a_prefix_then_fails() {
    let (mut none, mut some) = (0, 0);
    for seed in 0..64 {
        let (disk, path) = with_file(seed, "1.log", b"abc", b"");
        let mut file = disk.open(&path).unwrap();
        disk.enospc_next_append();
        let error = file.append(b"0123456789").unwrap_err();
        assert_eq!(error.kind(), ErrorKind::StorageFull);
        let after = disk.read_all(&path).unwrap();
        assert!(after.len() <= 13 && after[..] == b"abc0123456789"[..after.len()]);
        if after.len() == 3 {
            none += 1;
        } else if after.len() < 13 {
            some += 1;
        }
        file.append(b"!").unwrap();
        assert_eq!(disk.read_all(&path).unwrap().len(), after.len() + 1);
    }
    assert!(none > 0 && some > 0, "none {none}, some {some}");
}

#[test]
fn a_failed_sync_may_or_may_not_have_made_data_durable() {
    let (mut durable, mut not) = (0, 0);
    for seed in 0..64 {
        let (disk, path) = with_file(seed, "1.log", b"abc", b"def");
        let mut file = disk.open(&path).unwrap();
        disk.fail_sync_next();
        assert!(if seed % 2 == 0 {
            file.sync_data()
        } else {
            file.sync_all()
        }
        .is_err());
        match synced_len(&disk, &path) {
            6 => durable += 1,
            3 => not += 1,
            other => panic!("seed {seed}: {other}"),
        }
        // One-shot: the next sync works.
        file.sync_data().unwrap();
        assert_eq!(synced_len(&disk, &path), 6);
    }
    assert!(durable > 0 && not > 0, "durable {durable}, not {not}");
}

#[test]
fn a_failed_sync_dir_may_have_made_some_changes_durable() {
    let mut reached = [0; 3];
    for seed in 0..64 {
        let disk = disk(seed);
        disk.create_dir_all(&dir()).unwrap();
        disk.create_new(&dir().join("1.log")).unwrap();
        disk.create_new(&dir().join("2.log")).unwrap();
        fail_sync_dir_then_count(&disk, &mut reached);
        disk.sync_dir(&dir()).unwrap();
        assert!(disk.lock().pending.is_empty());
    }
    assert!(reached.iter().all(|&count| count > 0), "{reached:?}");
}

/// Fails a `sync_dir` and counts how many of the directory's changes it made durable.
fn fail_sync_dir_then_count(disk: &SimDisk, reached: &mut [usize; 3]) {
    disk.fail_sync_next();
    assert!(disk.sync_dir(&dir()).is_err());
    let durable = disk.lock().durable_names.len();
    reached[durable] += 1;
}

#[test]
fn a_failed_set_len_changes_nothing() {
    let (disk, path) = with_file(0, "1.log", b"abcdef", b"");
    let mut file = disk.open(&path).unwrap();
    disk.fail_set_len_next();
    assert!(file.set_len(2).is_err());
    assert_eq!(disk.read_all(&path).unwrap(), b"abcdef");
    file.set_len(2).unwrap();
    assert_eq!(disk.read_all(&path).unwrap(), b"ab");
}

#[test]
fn crash_at_call_counts_every_call() {
    let disk = disk(0);
    assert_eq!(disk.calls(), 0);
    disk.create_dir_all(&dir()).unwrap();
    let path = dir().join("1.log");
    let mut file = disk.create_new(&path).unwrap();
    assert!(!disk.exists(&dir().join("2.log")));
    assert_eq!(disk.calls(), 3);
    // Introspection is not a call.
    let _ = (disk.files(), disk.read_all(&path), disk.fingerprint());
    assert_eq!(disk.calls(), 3);
    disk.crash_at_call(3);
    file.append(b"a").unwrap();
    file.sync_data().unwrap();
    assert!(!disk.crashed());
    // The third call does not happen.
    assert!(file.append(b"b").is_err());
    assert!(disk.crashed());
    assert_eq!(disk.read_all(&path).unwrap(), b"a");
    // Nor does any after it, of the disk or of a file.
    assert!(disk.create_new(&dir().join("2.log")).is_err());
    assert!(!disk.exists(&path));
    assert!(file.sync_data().is_err());
    assert_eq!(disk.calls(), 9);
    disk.crash_process();
    assert!(!disk.crashed());
    assert!(disk.exists(&path));
    assert!(file.append(b"c").is_err(), "a handle from before the crash");
    disk.open(&path).unwrap().append(b"c").unwrap();
    assert_eq!(disk.read_all(&path).unwrap(), b"ac");
}

#[test]
fn a_bit_flipped_at_rest_survives_crashes() {
    let (disk, path) = with_file(0, "1.log", &[0; 8], b"");
    disk.flip_bit_at_rest(&path, 8 * 5 + 2).unwrap();
    disk.crash_machine();
    assert_eq!(disk.read_all(&path).unwrap(), [0, 0, 0, 0, 0, 4, 0, 0]);
    assert!(disk.flip_bit_at_rest(&path, 64).is_err());
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

/// What the store acknowledged to its callers while writing the way it does.
#[derive(Default)]
struct Acknowledged {
    /// Records 1..=records were in a file whose `sync_data` returned Ok.
    records: u64,
}

mod store_like;
