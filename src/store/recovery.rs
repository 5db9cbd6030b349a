//! Start-up: the newest snapshot, then every later log segment, replayed in order.
//!
//! A damaged frame at the very end of the last segment is what a crash in the middle of
//! an append leaves: it is cut off with a warning, keeping everything before it. Damage
//! anywhere else is an error naming the file and byte offset: tickd refuses to start
//! rather than silently drop the records after it.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use rustc_hash::FxHashMap;
use tracing::{info, warn};

use super::frame::{self, Damage, HEADER_BYTES};
use super::records::record::Kind;
use super::records::{Fired, Record};
use super::{io_error, StoreError};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FileKind {
    Segment,
    Snapshot,
    PartialSnapshot,
}

/// The sequence number and kind of a data-directory file, from its name.
pub fn file_sequence(path: &Path) -> Option<(u64, FileKind)> {
    let kind = match path.extension()?.to_str()? {
        "log" => FileKind::Segment,
        "snapshot" => FileKind::Snapshot,
        "partial" => FileKind::PartialSnapshot,
        _ => return None,
    };
    let sequence = path.file_stem()?.to_str()?.parse().ok()?;
    Some((sequence, kind))
}

pub struct Recovered {
    /// The highest segment number on disk (0 if none).
    pub last_segment: u64,
    /// Fired expirations never settled, with their frames, by (timer id, fired count).
    pub unsettled: Unsettled,
    /// Size of the snapshot recovery started from (0 if none).
    pub snapshot_bytes: u64,
}

pub fn recover(dir: &Path, mut replay: impl FnMut(Record)) -> Result<Recovered, StoreError> {
    let mut files: Vec<(u64, FileKind, PathBuf)> = Vec::new();
    for entry in fs::read_dir(dir).map_err(io_error(dir))? {
        let path = entry.map_err(io_error(dir))?.path();
        if let Some((sequence, kind)) = file_sequence(&path) {
            files.push((sequence, kind, path));
        }
    }
    files.sort();
    let snapshot = files
        .iter()
        .rfind(|(_, kind, _)| *kind == FileKind::Snapshot)
        .map(|(sequence, _, path)| (*sequence, path.clone()));
    let first_segment = snapshot.as_ref().map_or(0, |(sequence, _)| *sequence);
    let snapshot_bytes = match &snapshot {
        Some((_, path)) => fs::metadata(path).map_err(io_error(path))?.len(),
        None => 0,
    };
    let segments: Vec<&PathBuf> = files
        .iter()
        .filter(|(sequence, kind, _)| *kind == FileKind::Segment && *sequence >= first_segment)
        .map(|(_, _, path)| path)
        .collect();
    // Only the newest segment can end in a torn append.
    let to_read: Vec<(&Path, bool)> = snapshot
        .iter()
        .map(|(_, path)| (path.as_path(), false))
        .chain(
            segments
                .iter()
                .enumerate()
                .map(|(index, path)| (path.as_path(), index + 1 == segments.len())),
        )
        .collect();
    // Reading, checksumming and decoding run on their own thread while this one applies
    // the records: recovery takes the slower of the two, not their sum.
    let (chunks, decoded) = mpsc::sync_channel::<Vec<Record>>(DECODED_CHUNKS_IN_FLIGHT);
    let (decoding, records) = std::thread::scope(|scope| {
        let decoder = std::thread::Builder::new()
            .name("tickd-recovery".into())
            .spawn_scoped(scope, || decode_files(&to_read, chunks))
            .map_err(io_error(dir))?;
        let mut records = 0u64;
        for chunk in decoded {
            records += chunk.len() as u64;
            chunk.into_iter().for_each(&mut replay);
        }
        let decoding = decoder
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        Ok::<_, StoreError>((decoding, records))
    })?;
    let unsettled = decoding?;
    // Leftovers of an interrupted snapshot or compaction are not needed.
    for (sequence, kind, path) in &files {
        let superseded = *sequence < first_segment || *kind == FileKind::PartialSnapshot;
        if superseded {
            fs::remove_file(path).map_err(io_error(path))?;
        }
    }
    let last_segment = files
        .iter()
        .map(|(sequence, _, _)| *sequence)
        .max()
        .unwrap_or(0);
    info!(
        dir = %dir.display(),
        records,
        snapshot = ?snapshot.map(|(sequence, _)| sequence),
        unsettled = unsettled.len(),
        "store recovered"
    );
    Ok(Recovered {
        last_segment,
        unsettled,
        snapshot_bytes,
    })
}

/// Decoded records handed from the decoding thread to the applying one, per chunk.
const RECORDS_PER_CHUNK: usize = 4_096;
/// Chunks decoded ahead of the one being applied.
const DECODED_CHUNKS_IN_FLIGHT: usize = 8;

/// Reads the files in order, sending their records in chunks, and returns the fired
/// expirations never settled. Stops early if the applying side has gone.
fn decode_files(
    files: &[(&Path, bool)],
    chunks: mpsc::SyncSender<Vec<Record>>,
) -> Result<Unsettled, StoreError> {
    let mut unsettled = FxHashMap::default();
    let mut chunk = Vec::with_capacity(RECORDS_PER_CHUNK);
    for &(path, tail_may_be_torn) in files {
        read_frames(path, tail_may_be_torn, &mut |record, frame| {
            track_unsettled(&mut unsettled, &record, frame);
            chunk.push(record);
            if chunk.len() == RECORDS_PER_CHUNK {
                let full = std::mem::replace(&mut chunk, Vec::with_capacity(RECORDS_PER_CHUNK));
                // A closed channel means the applying side is gone; its error wins.
                let _ = chunks.send(full);
            }
        })?;
    }
    if !chunk.is_empty() {
        let _ = chunks.send(chunk);
    }
    Ok(unsettled)
}

type Unsettled = FxHashMap<(u64, u64), (Vec<u8>, Fired)>;

fn track_unsettled(unsettled: &mut Unsettled, record: &Record, frame: &[u8]) {
    match &record.kind {
        Some(Kind::Fired(fired)) => {
            if let Some(timer) = &fired.timer {
                unsettled.insert(
                    (timer.id, timer.fired_count),
                    (frame.to_vec(), fired.clone()),
                );
            }
        }
        Some(Kind::Settled(settled)) => {
            unsettled.remove(&(settled.id, settled.fired_count));
        }
        _ => {}
    }
}

/// Streams the frames of one file into `apply` (with each frame's bytes). With
/// `tail_may_be_torn`, a damaged final frame is cut off instead of failing.
fn read_frames(
    path: &Path,
    tail_may_be_torn: bool,
    apply: &mut impl FnMut(Record, &[u8]),
) -> Result<(), StoreError> {
    let file = File::open(path).map_err(io_error(path))?;
    let length = file.metadata().map_err(io_error(path))?.len() as usize;
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut offset = 0usize;
    let mut frame = Vec::new();
    while offset < length {
        match read_frame(&mut reader, &mut frame).map_err(io_error(path))? {
            Ok(record) => {
                apply(record, &frame);
                offset += frame.len();
            }
            Err((damage, declared_end)) => {
                let at_tail = offset.saturating_add(declared_end) >= length;
                if tail_may_be_torn && at_tail {
                    warn!(
                        file = %path.display(),
                        offset,
                        damage = ?damage,
                        "cutting off a torn record at the end of the log"
                    );
                    OpenOptions::new()
                        .write(true)
                        .open(path)
                        .and_then(|file| {
                            file.set_len(offset as u64)?;
                            // Durable before a newer segment exists, or a power loss could
                            // bring the torn record back into what is then an older segment.
                            file.sync_all()
                        })
                        .map_err(io_error(path))?;
                    return Ok(());
                }
                return Err(StoreError::Corrupt {
                    path: path.to_owned(),
                    offset,
                    damage,
                });
            }
        }
    }
    Ok(())
}

/// Reads one frame into `frame` (header included). The inner error is the damage and the
/// frame's declared length; the outer one is an I/O failure.
fn read_frame(
    reader: &mut impl Read,
    frame: &mut Vec<u8>,
) -> io::Result<Result<Record, (Damage, usize)>> {
    frame.clear();
    frame.resize(HEADER_BYTES, 0);
    if !read_fully(reader, frame)? {
        return Ok(Err((Damage::Truncated, HEADER_BYTES)));
    }
    let header: [u8; HEADER_BYTES] = frame[..].try_into().expect("header length");
    let (length, checksum) = match frame::parse_header(&header) {
        Ok(parsed) => parsed,
        Err(damage) => return Ok(Err(damage)),
    };
    frame.resize(HEADER_BYTES + length, 0);
    if !read_fully(reader, &mut frame[HEADER_BYTES..])? {
        return Ok(Err((Damage::Truncated, HEADER_BYTES + length)));
    }
    Ok(frame::decode_body(&frame[HEADER_BYTES..], checksum)
        .map_err(|damage| (damage, HEADER_BYTES + length)))
}

/// Like `read_exact`, but a short read at end of file is `false` instead of an error.
fn read_fully(reader: &mut impl Read, buffer: &mut [u8]) -> io::Result<bool> {
    match reader.read_exact(buffer) {
        Ok(()) => Ok(true),
        Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => Ok(false),
        Err(error) => Err(error),
    }
}
