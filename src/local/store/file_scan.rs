//! Reading one file of a data directory: its header, then every frame, each checked,
//! until the end or the first damage; and whether that damage is a torn append (the end of
//! the newest segment, cut short by a crash) or something recovery must refuse.

use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};

use super::disk::Disk;
use super::error::{io_error, StoreError};
use super::frame::{self, Damage, Format, FILE_HEADER};
use super::records::Record;

/// One file as read.
#[derive(Debug)]
pub struct FileScan {
    pub path: PathBuf,
    /// `None` when the file header itself is damaged.
    pub format: Option<Format>,
    pub bytes: u64,
    /// Intact records read from it.
    pub records: u64,
}

/// Where reading stopped before the end of a file.
#[derive(Debug, Clone)]
pub struct Stop {
    pub path: PathBuf,
    pub offset: u64,
    pub damage: Damage,
    /// A torn final record of the newest segment ([`frame::is_torn`]), which recovery drops
    /// by itself; anything else stops start-up.
    pub torn: bool,
    /// Bytes from `offset` to the end of the file.
    pub bytes_after: u64,
}

/// Streams the frames of one file into `apply` (with each record's bytes), stopping at the
/// first damage.
pub(super) fn read_file(
    disk: &dyn Disk,
    path: &Path,
    length: u64,
    newest: bool,
    apply: &mut impl FnMut(Record, &[u8]),
) -> Result<(FileScan, Option<Stop>), StoreError> {
    let file = disk.read_from(path, 0).map_err(io_error(path))?;
    // A buffer no larger than the file: restarts of a small log stay cheap.
    let buffer = usize::try_from(length).map_or(1 << 20, |length| length.clamp(8 << 10, 1 << 20));
    let mut reader = BufReader::with_capacity(buffer, file);
    let mut scanned = FileScan {
        path: path.to_owned(),
        format: None,
        bytes: length,
        records: 0,
    };
    let mut start = [0; FILE_HEADER.len()];
    let started = read_up_to(&mut reader, &mut start).map_err(io_error(path))?;
    let (format, offset) = match frame::file_format(&start[..started]) {
        Ok(found) => found,
        Err(damage) => {
            let stop = stop_at(disk, path, 0, Format::Checked, damage, newest, length)?;
            return Ok((scanned, Some(stop)));
        }
    };
    scanned.format = Some(format);
    // A format-1 file has no header: what was read to look for one is its first frame's.
    let mut input = (&start[offset..started]).chain(reader);
    let mut offset = offset as u64;
    let mut frame = Vec::new();
    while offset < length {
        match frame::read_frame(format, &mut input, length - offset, &mut frame)
            .map_err(io_error(path))?
        {
            Ok(record) => {
                apply(record, &frame[format.header_bytes()..]);
                scanned.records += 1;
                offset += frame.len() as u64;
            }
            Err(damage) => {
                let stop = stop_at(disk, path, offset, format, damage, newest, length)?;
                return Ok((scanned, Some(stop)));
            }
        }
    }
    Ok((scanned, None))
}

/// Where reading stopped, and whether that is a torn append, which only the newest segment
/// can end in.
fn stop_at(
    disk: &dyn Disk,
    path: &Path,
    offset: u64,
    format: Format,
    damage: Damage,
    newest: bool,
    length: u64,
) -> Result<Stop, StoreError> {
    // Planted bug: any damage at the end of the newest segment passes for a torn append.
    let torn = newest
        && (crate::faults::planted("torn-is-fine")
            || torn_tail(disk, path, offset, format, damage).map_err(io_error(path))?);
    Ok(Stop {
        path: path.to_owned(),
        offset,
        damage,
        torn,
        bytes_after: length - offset,
    })
}

/// [`frame::is_torn`] on the file's bytes from `offset`. The last non-zero byte is found
/// first, reading in chunks, so a long run of zeros after it (preallocated or unwritten
/// space, [`frame::written_part`]) is not held in memory, nor is a written tail longer than
/// any frame, which cannot be a torn one.
fn torn_tail(
    disk: &dyn Disk,
    path: &Path,
    offset: u64,
    format: Format,
    damage: Damage,
) -> io::Result<bool> {
    let mut file = disk.read_from(path, offset)?;
    let mut written = 0u64;
    let mut read = 0u64;
    let mut buffer = vec![0; 64 << 10];
    loop {
        let count = file.read(&mut buffer)?;
        if count == 0 {
            break;
        }
        if let Some(last) = buffer[..count].iter().rposition(|&byte| byte != 0) {
            written = read + last as u64 + 1;
        }
        read += count as u64;
    }
    if written > (format.header_bytes() + frame::MAX_RECORD_BYTES) as u64 {
        return Ok(false);
    }
    let mut rest = vec![0; frame::written_part(offset, written, read) as usize];
    disk.read_from(path, offset)?.read_exact(&mut rest)?;
    Ok(frame::is_torn(format, damage, &rest))
}

/// Reads until `buffer` is full or the input ends; returns the bytes read.
fn read_up_to(reader: &mut impl Read, buffer: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buffer.len() {
        match reader.read(&mut buffer[filled..]) {
            Ok(0) => break,
            Ok(count) => filled += count,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(filled)
}
