//! Reading a data directory without changing a byte of it: which files make up the state
//! and in what order, every frame of them checked, and where reading stopped and why.
//!
//! Recovery ([`super::recovery`]), the operator's `--recover-truncate`
//! ([`super::repair`]) and `tickd check` all read through here, so they agree on what is
//! a torn append and what is damage. Each file's frames are read by [`super::file_scan`].

use std::path::{Path, PathBuf};
use std::sync::mpsc;

use rustc_hash::FxHashMap;

use super::disk::{Disk, RealDisk};
use super::error::{io_error, StoreError};
use super::file_scan::read_file;
pub use super::file_scan::{FileScan, Stop};
use super::files::{file_sequence, FileKind};
use super::frame;
use super::records::record::Kind;
use super::records::{Fired, Record};

/// Fired expirations never settled, by (timer id, fired count).
pub(crate) type Unsettled = FxHashMap<(u64, u64), UnsettledFiring>;

/// A fired expiration never settled, as the log left it: its records framed in the current
/// format, to be copied into the next snapshot, and decoded, to be delivered again.
pub(crate) struct UnsettledFiring {
    pub(crate) frames: KeptFrames,
    pub(crate) fired: Fired,
    /// Deliveries made so far, from its latest `Attempted` record (0 if none).
    pub(crate) attempts: u32,
}

/// The frames the store keeps of an unsettled firing, to write again into each snapshot
/// until it is settled: its `Fired` record and its latest `Attempted` one (empty if none).
#[derive(Default)]
pub(crate) struct KeptFrames {
    pub(crate) fired: Vec<u8>,
    pub(crate) attempted: Vec<u8>,
}

/// What reading a data directory found.
pub struct Scan {
    /// The files read, in replay order, up to the one where reading stopped.
    pub files: Vec<FileScan>,
    /// Files after the one where reading stopped, not read.
    pub unread: Vec<PathBuf>,
    /// Intact records replayed.
    pub records: u64,
    /// Set when reading stopped before the end of the files.
    pub stop: Option<Stop>,
    /// The newest snapshot's number, if any.
    pub(crate) snapshot: Option<u64>,
    pub(crate) unsettled: Unsettled,
    /// The highest boot recorded (0 if none: a directory from before boots were recorded,
    /// or a new one).
    pub(crate) boot: u64,
    pub(crate) snapshot_bytes: u64,
    /// Files the newest snapshot replaces, and partial snapshots: deleted once recovery
    /// has succeeded.
    pub(crate) superseded: Vec<PathBuf>,
    /// The highest file number in the directory (0 if none).
    pub(crate) last_sequence: u64,
}

impl Scan {
    /// Fired expirations never settled.
    pub fn unsettled(&self) -> usize {
        self.unsettled.len()
    }
}

/// Reads the newest snapshot and every later segment in order, handing each intact record
/// to `replay`, until the end or the first damage. Writes nothing.
pub fn scan(dir: &Path, replay: impl FnMut(Record)) -> Result<Scan, StoreError> {
    scan_on(&RealDisk, dir, replay)
}

/// [`scan`] on the given disk.
pub(crate) fn scan_on(
    disk: &dyn Disk,
    dir: &Path,
    mut replay: impl FnMut(Record),
) -> Result<Scan, StoreError> {
    let listing = list(disk, dir)?;
    let to_read: u64 = listing.to_read.iter().map(|(_, length, _)| *length).sum();
    let read = if to_read <= DECODE_INLINE_BYTES {
        // A small log: starting a thread would cost more than the overlap saves.
        read_files(disk, &listing.to_read, |chunk| {
            chunk.into_iter().for_each(&mut replay)
        })?
    } else {
        // Reading, checksumming and decoding run on their own thread while this one
        // applies the records: recovery takes the slower of the two, not their sum.
        let (chunks, decoded) = mpsc::sync_channel::<Vec<Record>>(DECODED_CHUNKS_IN_FLIGHT);
        let to_read = &listing.to_read;
        std::thread::scope(|scope| {
            let decoder = std::thread::Builder::new()
                .name("tickd-recovery".into())
                // `chunks` moves into the thread and is dropped when it ends: that ends the
                // loop below, which would otherwise wait for another chunk for ever.
                .spawn_scoped(scope, move || {
                    // A closed channel means the applying side is gone; its error wins.
                    read_files(disk, to_read, move |chunk| {
                        let _ = chunks.send(chunk);
                    })
                })
                .map_err(io_error(dir))?;
            for chunk in decoded {
                chunk.into_iter().for_each(&mut replay);
            }
            decoder
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })?
    };
    let unread = listing
        .to_read
        .into_iter()
        .skip(read.files.len())
        .map(|(path, _, _)| path)
        .collect();
    Ok(Scan {
        files: read.files,
        unread,
        records: read.records,
        stop: read.stop,
        snapshot: listing.snapshot,
        unsettled: read.unsettled,
        boot: read.boot,
        snapshot_bytes: listing.snapshot_bytes,
        superseded: listing.superseded,
        last_sequence: listing.last_sequence,
    })
}

/// The files of a data directory, as recovery uses them.
struct Listing {
    /// The newest snapshot, then every segment from its number on, each with its length
    /// and whether it is the newest segment (the only file an append can have been torn in).
    to_read: Vec<(PathBuf, u64, bool)>,
    snapshot: Option<u64>,
    snapshot_bytes: u64,
    superseded: Vec<PathBuf>,
    last_sequence: u64,
}

fn list(disk: &dyn Disk, dir: &Path) -> Result<Listing, StoreError> {
    let mut files: Vec<(u64, FileKind, PathBuf, u64)> = Vec::new();
    for (path, length) in disk.list(dir).map_err(io_error(dir))? {
        if let Some((sequence, kind)) = file_sequence(&path) {
            files.push((sequence, kind, path, length));
        }
    }
    files.sort();
    let snapshot = files
        .iter()
        .rfind(|(_, kind, _, _)| *kind == FileKind::Snapshot)
        .map(|(sequence, _, path, length)| (*sequence, path.clone(), *length));
    let first_segment = snapshot.as_ref().map_or(0, |(sequence, _, _)| *sequence);
    let snapshot_bytes = snapshot.as_ref().map_or(0, |(_, _, length)| *length);
    let segments: Vec<(&PathBuf, u64)> = files
        .iter()
        .filter(|(sequence, kind, _, _)| *kind == FileKind::Segment && *sequence >= first_segment)
        .map(|(_, _, path, length)| (path, *length))
        .collect();
    let to_read =
        snapshot
            .iter()
            .map(|(_, path, length)| (path.clone(), *length, false))
            .chain(segments.iter().enumerate().map(|(index, (path, length))| {
                ((*path).clone(), *length, index + 1 == segments.len())
            }))
            .collect();
    let superseded = files
        .iter()
        .filter(|(sequence, kind, _, _)| {
            *sequence < first_segment || *kind == FileKind::PartialSnapshot
        })
        .map(|(_, _, path, _)| path.clone())
        .collect();
    let last_sequence = files.iter().map(|(sequence, _, _, _)| *sequence).max();
    Ok(Listing {
        to_read,
        snapshot: snapshot.map(|(sequence, _, _)| sequence),
        snapshot_bytes,
        superseded,
        last_sequence: last_sequence.unwrap_or(0),
    })
}

/// Decoded records handed from the decoding thread to the applying one, per chunk: at
/// most this many, and at most [`CHUNK_BYTES`] of them, so that what is decoded ahead stays
/// a few megabytes whatever the payloads' size (4,096 records of 64 KiB each would be
/// 256 MiB a chunk, and recovery would hold gigabytes of log beside what it restores).
const RECORDS_PER_CHUNK: usize = 4_096;
const CHUNK_BYTES: usize = 1 << 20;
/// Chunks decoded ahead of the one being applied.
const DECODED_CHUNKS_IN_FLIGHT: usize = 8;
/// Logs up to this size are read on the applying thread.
const DECODE_INLINE_BYTES: u64 = CHUNK_BYTES as u64;

/// What [`read_files`] found.
struct Reading {
    files: Vec<FileScan>,
    records: u64,
    stop: Option<Stop>,
    unsettled: Unsettled,
    boot: u64,
}

/// Reads the files in order until the end or the first damage, handing their records to
/// `deliver` in chunks.
fn read_files(
    disk: &dyn Disk,
    files: &[(PathBuf, u64, bool)],
    mut deliver: impl FnMut(Vec<Record>),
) -> Result<Reading, StoreError> {
    let mut read = Reading {
        files: Vec::with_capacity(files.len()),
        records: 0,
        stop: None,
        unsettled: FxHashMap::default(),
        boot: 0,
    };
    // Grown as records come: most logs a restart reads are far smaller than a chunk.
    let mut chunk = Vec::new();
    let mut chunk_bytes = 0;
    for (path, length, newest) in files {
        let (file, stop) = read_file(disk, path, *length, *newest, &mut |record, body| {
            track(&mut read, &record, body);
            chunk.push(record);
            chunk_bytes += body.len();
            if chunk.len() == RECORDS_PER_CHUNK || chunk_bytes >= CHUNK_BYTES {
                chunk_bytes = 0;
                deliver(std::mem::take(&mut chunk));
            }
        })?;
        read.records += file.records;
        read.files.push(file);
        if stop.is_some() {
            read.stop = stop;
            break;
        }
    }
    if !chunk.is_empty() {
        deliver(chunk);
    }
    Ok(read)
}

/// Follows what recovery needs besides the timers: the unsettled firings with their
/// attempts, and the highest boot.
fn track(read: &mut Reading, record: &Record, body: &[u8]) {
    let reframed = || {
        let mut frame = Vec::new();
        frame::encode_body(body, &mut frame);
        frame
    };
    match &record.kind {
        Some(Kind::Fired(fired)) => {
            if let Some(timer) = &fired.timer {
                let firing = read
                    .unsettled
                    .entry((timer.id, timer.fired_count))
                    .or_insert_with(|| UnsettledFiring {
                        frames: KeptFrames::default(),
                        fired: fired.clone(),
                        attempts: 0,
                    });
                // A fuzzy snapshot may hold a firing its later segment records again: the
                // attempts already counted stay.
                firing.frames.fired = reframed();
                firing.fired = fired.clone();
            }
        }
        Some(Kind::Attempted(attempted)) => {
            // One settled meanwhile (or before the snapshot) has no entry: nothing to count.
            let key = (attempted.id, attempted.fired_count);
            if let Some(firing) = read.unsettled.get_mut(&key) {
                firing.attempts = attempted.attempts;
                firing.frames.attempted = reframed();
            }
        }
        Some(Kind::Settled(settled)) => {
            read.unsettled.remove(&(settled.id, settled.fired_count));
        }
        Some(Kind::Boot(boot)) => read.boot = read.boot.max(*boot),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::local::store::frame::{encode, FILE_HEADER};
    use crate::local::store::records::{record::Kind, Settled};

    /// A segment of `count` records of about 100 bytes each.
    fn segment(dir: &Path, count: u64) {
        let mut bytes = FILE_HEADER.to_vec();
        for id in 0..count {
            let record = Record {
                kind: Some(Kind::Settled(Settled {
                    id: id << 40 | 0xff_ffff_ffff,
                    fired_count: u64::MAX,
                })),
            };
            encode(&record, &mut bytes);
        }
        std::fs::write(crate::local::store::files::segment_path(dir, 1), bytes).unwrap();
    }

    /// Both ways of reading: on the applying thread (a small log) and on a decoding thread
    /// (a log over `DECODE_INLINE_BYTES`, in many chunks). Each hands every record over once,
    /// in order, and returns.
    #[test]
    fn small_and_large_logs_are_read_whole() {
        for count in [10, 200_000] {
            let dir = tempfile::tempdir().unwrap();
            segment(dir.path(), count);
            let length = std::fs::metadata(crate::local::store::files::segment_path(dir.path(), 1))
                .unwrap()
                .len();
            assert_eq!(
                length > DECODE_INLINE_BYTES,
                count > 10,
                "the test's logs take both paths"
            );
            let mut seen = Vec::new();
            let scan = scan(dir.path(), |record| seen.push(record)).unwrap();
            assert_eq!(scan.records, count);
            assert_eq!(seen.len() as u64, count);
            assert!(scan.stop.is_none());
            assert_eq!(
                seen.last().and_then(|record| record.kind.clone()),
                Some(Kind::Settled(Settled {
                    id: (count - 1) << 40 | 0xff_ffff_ffff,
                    fired_count: u64::MAX,
                }))
            );
        }
    }
}
