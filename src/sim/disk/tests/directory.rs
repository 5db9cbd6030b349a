//! The calls made by path: a creation, rename or removal is seen at once and durable only
//! after `sync_dir`, files are named only in directories that exist, and a reader sees
//! the bytes as they were at its call.

use super::*;

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
