//! The faults the harness arms: each fails the next call of its kind once, and leaves
//! behind what that failure may leave on a real disk (a prefix of an append, part of what
//! a failed sync was to make durable); and a crash at a chosen call.

use super::*;

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
