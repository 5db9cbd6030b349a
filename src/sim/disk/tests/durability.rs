//! What a crash keeps and loses of a file: synced bytes survive anything, unsynced ones
//! a process crash but not always a machine crash (kept, dropped, torn or garbled), a cut
//! by `set_len` is owed to the disk until a sync, handles from before a crash fail, and
//! damage at rest stays.

use super::*;

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
fn a_bit_flipped_at_rest_survives_crashes() {
    let (disk, path) = with_file(0, "1.log", &[0; 8], b"");
    disk.flip_bit_at_rest(&path, 8 * 5 + 2).unwrap();
    disk.crash_machine();
    assert_eq!(disk.read_all(&path).unwrap(), [0, 0, 0, 0, 0, 4, 0, 0]);
    assert!(disk.flip_bit_at_rest(&path, 64).is_err());
}
