//! The simulated disk's own tests: what each crash keeps and loses, what each fault does,
//! that a seed replays a run, and that the store's way of writing files (segments,
//! snapshots sealed by rename, directory syncs) keeps every acknowledged record through a
//! machine crash at any call.

use std::io::{ErrorKind, Read};
use std::path::{Path, PathBuf};

use super::SimDisk;
use crate::sim::rng::Rng;
use crate::store::disk::Disk;
use crate::store::frame::{self, FILE_HEADER};
use crate::store::records::{record::Kind, Record, Settled};

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

fn settled(id: u64) -> Vec<u8> {
    let mut out = Vec::new();
    let record = Record {
        kind: Some(Kind::Settled(Settled { id, fired_count: 1 })),
    };
    frame::encode(&record, &mut out);
    out
}

fn segment(sequence: u64) -> PathBuf {
    dir().join(format!("{sequence:020}.log"))
}

fn snapshot(sequence: u64) -> PathBuf {
    dir().join(format!("{sequence:020}.snapshot"))
}

/// Writes as `src/store` does: a segment created new with its header and a directory
/// sync; group commits of a few records each, every other one synced (as `--sync
/// interval` does); a snapshot of every record (written as `.partial`, synced, renamed,
/// the directory synced) starting a new segment, once the old one is synced whole, after
/// which the old segment is removed; a last commit left unsynced.
fn write_like_the_store(disk: &dyn Disk, acknowledged: &mut Acknowledged) -> std::io::Result<()> {
    disk.create_dir_all(&dir())?;
    let mut sequence = 1;
    let mut log = disk.create_new(&segment(sequence))?;
    log.append(&FILE_HEADER)?;
    disk.sync_dir(&dir())?;
    let mut next = 1;
    for commit in 0..12 {
        if commit == 6 {
            // Recovery forgives a torn tail only in the newest segment.
            log.sync_data()?;
            acknowledged.records = next - 1;
            sequence += 1;
            log = disk.create_new(&segment(sequence))?;
            log.append(&FILE_HEADER)?;
            disk.sync_dir(&dir())?;
            let partial = snapshot(sequence).with_extension("partial");
            let mut file = disk.create(&partial)?;
            file.append(&FILE_HEADER)?;
            for id in 1..next {
                file.append(&settled(id))?;
            }
            file.sync_all()?;
            disk.rename(&partial, &snapshot(sequence))?;
            disk.sync_dir(&dir())?;
            disk.remove(&segment(sequence - 1))?;
        }
        let mut frames = Vec::new();
        for _ in 0..3 {
            frames.extend(settled(next));
            next += 1;
        }
        log.append(&frames)?;
        if commit % 2 == 0 {
            log.sync_data()?;
            acknowledged.records = next - 1;
        }
    }
    Ok(())
}

/// Reads the directory as recovery does (the newest snapshot, then every segment from its
/// number on) and returns the ids of the records found, failing on damage anywhere but at
/// the end of the newest segment.
fn recover_ids(disk: &dyn Disk) -> Result<Vec<u64>, String> {
    let mut files: Vec<PathBuf> = match disk.list(&dir()) {
        Ok(files) => files.into_iter().map(|(path, _)| path).collect(),
        Err(_) => return Ok(Vec::new()),
    };
    files.sort();
    let number = |path: &Path| -> u64 {
        let stem = path.file_stem().unwrap().to_str().unwrap();
        stem.parse().unwrap()
    };
    let newest_snapshot = files
        .iter()
        .filter(|path| path.extension().is_some_and(|ext| ext == "snapshot"))
        .map(|path| number(path))
        .max()
        .unwrap_or(0);
    let mut to_read: Vec<PathBuf> = files
        .iter()
        .filter(|path| path.extension().is_some_and(|ext| ext == "log"))
        .filter(|path| number(path) >= newest_snapshot)
        .cloned()
        .collect();
    if newest_snapshot > 0 {
        to_read.insert(0, snapshot(newest_snapshot));
    }
    let mut ids = Vec::new();
    for (index, path) in to_read.iter().enumerate() {
        let bytes = read(disk, path, 0).map_err(|error| error.to_string())?;
        let decoded = frame::decode_all(&bytes);
        let newest = index + 1 == to_read.len() && path.extension().unwrap() == "log";
        if let Some(damage) = decoded.damage {
            if !newest {
                return Err(format!("{}: {damage}", path.display()));
            }
        }
        for record in decoded.records {
            if let Some(Kind::Settled(settled)) = record.kind {
                ids.push(settled.id);
            }
        }
    }
    Ok(ids)
}

#[test]
fn the_stores_way_of_writing_keeps_every_acknowledged_record_through_any_crash() {
    // How many calls a run without a crash makes, so that crashes land anywhere in it.
    let whole = disk(0);
    write_like_the_store(&whole, &mut Acknowledged::default()).unwrap();
    let calls = whole.calls();
    assert_eq!(recover_ids(&whole).unwrap(), (1..=36).collect::<Vec<_>>());
    let mut lost_unacknowledged = 0;
    for seed in 0..400 {
        let disk = disk(seed);
        let mut rng = Rng::new(seed ^ 0x5eed);
        disk.crash_at_call(1 + rng.below(calls + 1));
        let mut acknowledged = Acknowledged::default();
        let written = write_like_the_store(&disk, &mut acknowledged);
        assert_eq!(written.is_err(), disk.crashed(), "seed {seed}");
        disk.crash_machine();
        let ids = recover_ids(&disk).unwrap_or_else(|damage| panic!("seed {seed}: {damage}"));
        let mut distinct = ids.clone();
        distinct.sort_unstable();
        distinct.dedup();
        // Every acknowledged record, in a prefix of the ids written (no hole).
        let expected: Vec<u64> = (1..=distinct.len() as u64).collect();
        assert_eq!(distinct, expected, "seed {seed}");
        assert!(distinct.len() as u64 >= acknowledged.records, "seed {seed}");
        if (distinct.len() as u64) < next_written(&acknowledged, written.is_ok()) {
            lost_unacknowledged += 1;
        }
    }
    assert!(
        lost_unacknowledged > 0,
        "no crash lost an unacknowledged record"
    );
}

/// How many records a run surely wrote: all 36 when it ran to its end (the last commit
/// unsynced); when it crashed, at least those acknowledged.
fn next_written(acknowledged: &Acknowledged, finished: bool) -> u64 {
    if finished {
        36
    } else {
        acknowledged.records
    }
}
