//! The store's way of writing files, checked on the simulated disk through a crash at any
//! call: every acknowledged record is read back as recovery reads it.

use super::*;

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
