//! Start-up: the newest snapshot, then every later log segment, replayed in order.
//!
//! A damaged frame at the very end of the last segment is what a crash in the middle of
//! an append leaves: it is cut off with a warning, keeping everything before it. Damage
//! anywhere else is an error naming the file and byte offset: tickd refuses to start
//! rather than silently drop the records after it.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};

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
    pub unsettled: FxHashMap<(u64, u64), (Vec<u8>, Fired)>,
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
    let mut unsettled = FxHashMap::default();
    let mut records = 0u64;
    let mut apply = |record: Record, frame: &[u8]| {
        track_unsettled(&mut unsettled, &record, frame);
        replay(record);
        records += 1;
    };
    if let Some((_, path)) = &snapshot {
        read_frames(path, false, &mut apply)?;
    }
    let segments: Vec<&(u64, FileKind, PathBuf)> = files
        .iter()
        .filter(|(sequence, kind, _)| *kind == FileKind::Segment && *sequence >= first_segment)
        .collect();
    for (index, (_, _, path)) in segments.iter().enumerate() {
        let last = index + 1 == segments.len();
        read_frames(path, last, &mut apply)?;
    }
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
    })
}

fn track_unsettled(
    unsettled: &mut FxHashMap<(u64, u64), (Vec<u8>, Fired)>,
    record: &Record,
    frame: &[u8],
) {
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
