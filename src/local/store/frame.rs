//! The on-disk framing of log segments and snapshots, checked end to end.
//!
//! Format 2, what tickd writes: a file opens with [`FILE_HEADER`] (`TICKD\0` and the
//! version as a little-endian u16), then holds frames
//! `[length u32][record crc32 u32][header crc32 u32][record]`, all little-endian. The header
//! checksum covers the length and the record checksum, so a damaged length is caught before
//! it is believed: the reader never takes a corrupt length for a record cut short by a crash.
//!
//! Format 1, what tickd wrote before, is still read: no file header, frames
//! `[length u32][record crc32 u32][record]`. Its length is covered by nothing, so a frame
//! that claims to run past the end of the file is only taken for a torn append when no
//! intact frame starts anywhere after it ([`is_torn`]).
//!
//! Decoding never panics on any input (it is fuzzed: `fuzz/fuzz_targets/decode_frames.rs`).

use std::io::{self, Read};

use prost::Message;

use super::records::Record;

pub(crate) use super::timer_fields::{encode_fired, encode_registered, TimerFields};

/// What every file tickd writes starts with: a magic that no format-1 file can start with
/// (read as a format-1 length it is far beyond [`MAX_RECORD_BYTES`]) and the version.
pub const FILE_HEADER: [u8; 8] = [b'T', b'I', b'C', b'K', b'D', 0, 2, 0];
/// Bytes of framing before each record, in the format tickd writes.
pub const HEADER_BYTES: usize = 12;
/// No record is anywhere near this large (payloads are capped far lower); a longer length
/// field is corruption, not a record.
pub const MAX_RECORD_BYTES: usize = 64 * 1024 * 1024;
/// The longest damaged format-1 tail searched for intact frames (see [`is_torn`]): a torn
/// record is shorter than this unless its payload was raised far past the default limit,
/// and the search costs time quadratic in the length. A longer one counts as damage.
const LEGACY_TAIL_SEARCH_BYTES: usize = 256 * 1024;

/// The framing of one file, from its first bytes ([`file_format`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Format 1: the length is not checksummed.
    Legacy,
    /// Format 2: the header has a checksum of its own.
    Checked,
}

impl Format {
    pub fn version(self) -> u16 {
        match self {
            Format::Legacy => 1,
            Format::Checked => 2,
        }
    }

    pub(crate) fn header_bytes(self) -> usize {
        match self {
            Format::Legacy => 8,
            Format::Checked => HEADER_BYTES,
        }
    }
}

/// What is wrong where decoding stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Damage {
    #[error("the file header is cut short")]
    FileHeaderCut,
    #[error("unknown log format version {0} (this tickd reads versions 1 and 2)")]
    UnknownVersion(u16),
    #[error("a frame header cut short by the end of the file")]
    HeaderCut,
    #[error("a frame header whose checksum does not match, so its length cannot be trusted")]
    HeaderChecksum,
    #[error("a length field of {0} bytes, beyond any record")]
    BadLength(u32),
    #[error("a record that runs past the end of the file")]
    BodyCut,
    #[error("a record whose checksum does not match")]
    BodyChecksum,
    #[error("a record that passes its checksum but does not decode")]
    Undecodable,
}

pub fn encode(record: &Record, out: &mut Vec<u8>) {
    frame_with(record.encoded_len(), out, |out| {
        record.encode(out).expect("a Vec grows to fit any record");
    });
}

/// Frames a record already encoded. Recovery re-frames the unsettled expirations it read
/// this way, whatever format they were read in, because snapshots copy them verbatim.
pub(crate) fn encode_body(body: &[u8], out: &mut Vec<u8>) {
    frame_with(body.len(), out, |out| out.extend_from_slice(body));
}

/// Appends a frame whose record is `record_len` bytes written by `body`.
pub(crate) fn frame_with(record_len: usize, out: &mut Vec<u8>, body: impl FnOnce(&mut Vec<u8>)) {
    out.reserve(HEADER_BYTES + record_len);
    let start = out.len();
    out.extend_from_slice(&(record_len as u32).to_le_bytes());
    out.extend_from_slice(&[0; 8]);
    body(out);
    debug_assert_eq!(out.len() - start - HEADER_BYTES, record_len);
    let record_checksum = crc32fast::hash(&out[start + HEADER_BYTES..]);
    out[start + 4..start + 8].copy_from_slice(&record_checksum.to_le_bytes());
    let header_checksum = crc32fast::hash(&out[start..start + 8]);
    out[start + 8..start + HEADER_BYTES].copy_from_slice(&header_checksum.to_le_bytes());
}

/// A file's format and where its first frame starts, from its first
/// `FILE_HEADER.len()` bytes (fewer if the file is shorter).
pub(crate) fn file_format(start: &[u8]) -> Result<(Format, usize), Damage> {
    if start.len() >= FILE_HEADER.len() && start[..6] == FILE_HEADER[..6] {
        let version = u16::from_le_bytes([start[6], start[7]]);
        return match version {
            2 => Ok((Format::Checked, FILE_HEADER.len())),
            other => Err(Damage::UnknownVersion(other)),
        };
    }
    if !start.is_empty() && start.len() < FILE_HEADER.len() && FILE_HEADER.starts_with(start) {
        return Err(Damage::FileHeaderCut);
    }
    Ok((Format::Legacy, 0))
}

/// The record length and checksum of a frame header (`format.header_bytes()` long).
pub(crate) fn parse_header(format: Format, header: &[u8]) -> Result<(usize, u32), Damage> {
    let word = |at: usize| u32::from_le_bytes(header[at..at + 4].try_into().expect("4 bytes"));
    if format == Format::Checked && crc32fast::hash(&header[..8]) != word(8) {
        return Err(Damage::HeaderChecksum);
    }
    let length = word(0);
    if length as usize > MAX_RECORD_BYTES {
        return Err(Damage::BadLength(length));
    }
    Ok((length as usize, word(4)))
}

pub(crate) fn decode_body(body: &[u8], checksum: u32) -> Result<Record, Damage> {
    if crc32fast::hash(body) != checksum {
        return Err(Damage::BodyChecksum);
    }
    Record::decode(body).map_err(|_| Damage::Undecodable)
}

/// One frame from the start of `bytes`: the record and the bytes it used.
fn decode_frame(format: Format, bytes: &[u8]) -> Result<(Record, usize), Damage> {
    let header_bytes = format.header_bytes();
    let header = bytes.get(..header_bytes).ok_or(Damage::HeaderCut)?;
    let (length, checksum) = parse_header(format, header)?;
    let body = bytes
        .get(header_bytes..header_bytes + length)
        .ok_or(Damage::BodyCut)?;
    decode_body(body, checksum).map(|record| (record, header_bytes + length))
}

/// [`decode_frame`] from a reader with `remaining` bytes left in it: reads one frame into
/// `frame` (header included). A length past `remaining` is found cut before any buffer is
/// sized by it. The inner error is the damage; the outer one an I/O failure.
pub(crate) fn read_frame(
    format: Format,
    reader: &mut impl Read,
    remaining: u64,
    frame: &mut Vec<u8>,
) -> io::Result<Result<Record, Damage>> {
    let header_bytes = format.header_bytes();
    frame.clear();
    frame.resize(header_bytes, 0);
    if remaining < header_bytes as u64 || !read_fully(reader, frame)? {
        return Ok(Err(Damage::HeaderCut));
    }
    let (length, checksum) = match parse_header(format, frame) {
        Ok(parsed) => parsed,
        Err(damage) => return Ok(Err(damage)),
    };
    if remaining < (header_bytes + length) as u64 {
        return Ok(Err(Damage::BodyCut));
    }
    frame.resize(header_bytes + length, 0);
    if !read_fully(reader, &mut frame[header_bytes..])? {
        return Ok(Err(Damage::BodyCut));
    }
    Ok(decode_body(&frame[header_bytes..], checksum))
}

/// Like `read_exact`, but a short read at end of input is `false` instead of an error.
fn read_fully(reader: &mut impl Read, buffer: &mut [u8]) -> io::Result<bool> {
    match reader.read_exact(buffer) {
        Ok(()) => Ok(true),
        Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => Ok(false),
        Err(error) => Err(error),
    }
}

/// The smallest unit a disk writes whole. Space a crash left unwritten (a file's size can
/// reach the disk before its data, and unwritten blocks read as zeros) starts where an
/// append began or on a sector boundary, never in the middle of a sector that was written.
const SECTOR_BYTES: u64 = 512;

/// How many of the `length` bytes from a damaged frame at `offset` to the end of the file
/// may have been written, given that the last non-zero one ends `nonzero` bytes after
/// `offset`: the rest is space a crash can have left unwritten, and [`is_torn`] looks only
/// at the written part.
///
/// Only zeros from the damaged frame's start or from a sector boundary can be unwritten
/// space. Zeros that end a written sector are data: a whole final record whose last bytes
/// were flipped to zeros is damage, not a record whose end never reached the disk.
pub(crate) fn written_part(offset: u64, nonzero: u64, length: u64) -> u64 {
    debug_assert!(
        nonzero <= length,
        "the last non-zero byte is inside the file"
    );
    if nonzero == 0 {
        return 0;
    }
    ((offset + nonzero).next_multiple_of(SECTOR_BYTES) - offset).min(length)
}

/// Whether the damage at the start of `written` (the bytes from the damaged frame to the
/// end of the file, without the space a crash may have left unwritten: [`written_part`])
/// is a torn final record: what a crash in the middle of an append leaves, which recovery
/// may drop from the newest segment. Anything else is damage.
///
/// It is torn only if it is a strict prefix of one frame: a header cut short, or a header
/// whose record runs past the written part. In format 2 the header's checksum must hold,
/// so a damaged length is never taken for a cut; in format 1 nothing checks the length,
/// so the tail is torn only if no intact frame starts anywhere inside it.
///
/// The cost of forgiving unwritten space: a final record that is whole but corrupt, whose
/// corrupt bytes are zeros from a sector boundary to its end, is taken for one whose end
/// was never written, and dropped. Telling the two apart would take a format change.
pub(crate) fn is_torn(format: Format, damage: Damage, written: &[u8]) -> bool {
    match damage {
        Damage::FileHeaderCut => return true,
        Damage::UnknownVersion(_) => return false,
        _ => {}
    }
    let Some(header) = written.get(..format.header_bytes()) else {
        return true;
    };
    let Ok((length, _)) = parse_header(format, header) else {
        return false;
    };
    if format.header_bytes() + length <= written.len() {
        return false;
    }
    match format {
        Format::Checked => true,
        Format::Legacy => !legacy_frame_follows(written),
    }
}

/// [`is_torn`] on all the bytes from a damaged frame at `offset` to the end of the file.
fn tail_is_torn(format: Format, damage: Damage, offset: usize, rest: &[u8]) -> bool {
    let nonzero = rest
        .iter()
        .rposition(|&byte| byte != 0)
        .map_or(0, |last| last + 1);
    let written = written_part(offset as u64, nonzero as u64, rest.len() as u64);
    is_torn(format, damage, &rest[..written as usize])
}

/// Whether an intact format-1 frame with a record in it starts anywhere in `bytes` after
/// the first byte. Runs of zeros are not counted: in format 1 eight zero bytes decode as
/// an empty record, which tickd never wrote.
fn legacy_frame_follows(bytes: &[u8]) -> bool {
    if bytes.len() > LEGACY_TAIL_SEARCH_BYTES {
        return true;
    }
    (1..bytes.len()).any(|start| {
        decode_frame(Format::Legacy, &bytes[start..]).is_ok_and(|(record, _)| record.kind.is_some())
    })
}

/// The outcome of decoding a whole file's bytes.
#[derive(Debug)]
pub struct Decoded {
    pub records: Vec<Record>,
    /// Bytes of file header and intact frames from the start.
    pub valid_bytes: usize,
    /// Set when decoding stopped at damage at `valid_bytes`.
    pub damage: Option<Damage>,
    /// The damage is a torn final record ([`is_torn`]).
    pub torn: bool,
}

/// Decodes a file's bytes (header and frames, of either format), stopping at the first
/// damage.
pub fn decode_all(bytes: &[u8]) -> Decoded {
    let mut records = Vec::new();
    let stopped = |records, offset: usize, format, damage| Decoded {
        records,
        valid_bytes: offset,
        damage: Some(damage),
        torn: tail_is_torn(format, damage, offset, &bytes[offset..]),
    };
    let (format, mut offset) = match file_format(&bytes[..bytes.len().min(FILE_HEADER.len())]) {
        Ok(found) => found,
        Err(damage) => return stopped(records, 0, Format::Checked, damage),
    };
    while offset < bytes.len() {
        match decode_frame(format, &bytes[offset..]) {
            Ok((record, used)) => {
                records.push(record);
                offset += used;
            }
            Err(damage) => return stopped(records, offset, format, damage),
        }
    }
    Decoded {
        records,
        valid_bytes: offset,
        damage: None,
        torn: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::local::store::records::{record::Kind, Settled};

    fn settled(id: u64) -> Record {
        Record {
            kind: Some(Kind::Settled(Settled { id, fired_count: 1 })),
        }
    }

    /// A format-2 file of `count` records, and where each frame starts.
    fn file(count: u64) -> (Vec<u8>, Vec<usize>) {
        let mut bytes = FILE_HEADER.to_vec();
        let mut starts = Vec::new();
        for id in 0..count {
            starts.push(bytes.len());
            encode(&settled(id), &mut bytes);
        }
        (bytes, starts)
    }

    /// The same records in format 1, as tickd wrote them before.
    fn legacy_file(count: u64) -> (Vec<u8>, Vec<usize>) {
        let mut bytes = Vec::new();
        let mut starts = Vec::new();
        for id in 0..count {
            starts.push(bytes.len());
            let body = settled(id).encode_to_vec();
            bytes.extend_from_slice(&(body.len() as u32).to_le_bytes());
            bytes.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
            bytes.extend_from_slice(&body);
        }
        (bytes, starts)
    }

    #[test]
    fn frames_round_trip_in_both_formats() {
        for (bytes, _) in [file(10), legacy_file(10)] {
            let decoded = decode_all(&bytes);
            assert_eq!(decoded.records.len(), 10);
            assert_eq!(decoded.records[7], settled(7));
            assert_eq!(decoded.valid_bytes, bytes.len());
            assert!(decoded.damage.is_none());
        }
        assert!(
            decode_all(&[]).damage.is_none(),
            "an empty file holds nothing"
        );
    }

    #[test]
    fn a_cut_last_frame_is_torn() {
        let (mut bytes, starts) = file(3);
        bytes.truncate(bytes.len() - 3);
        let decoded = decode_all(&bytes);
        assert_eq!(decoded.records, vec![settled(0), settled(1)]);
        assert_eq!(decoded.valid_bytes, starts[2]);
        assert_eq!(decoded.damage, Some(Damage::BodyCut));
        assert!(decoded.torn);
        bytes.truncate(starts[2] + 5);
        assert_eq!(decode_all(&bytes).damage, Some(Damage::HeaderCut));
        assert!(decode_all(&bytes).torn);
    }

    #[test]
    fn a_damaged_length_is_caught_by_the_header_checksum_not_taken_for_a_cut() {
        let (mut bytes, starts) = file(20);
        bytes[starts[9]..starts[9] + 4].copy_from_slice(&0x20_0000u32.to_le_bytes());
        let decoded = decode_all(&bytes);
        assert_eq!(decoded.records.len(), 9);
        assert_eq!(decoded.valid_bytes, starts[9]);
        assert_eq!(decoded.damage, Some(Damage::HeaderChecksum));
        assert!(!decoded.torn);
        // Even as the very last frame: its length cannot be believed.
        bytes.truncate(starts[10]);
        assert!(!decode_all(&bytes).torn);
    }

    #[test]
    fn in_format_1_a_long_length_is_a_cut_only_if_no_frame_follows() {
        let (mut bytes, starts) = legacy_file(20);
        bytes[starts[9]..starts[9] + 4].copy_from_slice(&0x20_0000u32.to_le_bytes());
        let decoded = decode_all(&bytes);
        assert_eq!(decoded.valid_bytes, starts[9]);
        assert_eq!(decoded.damage, Some(Damage::BodyCut));
        assert!(!decoded.torn, "ten intact frames follow it");
        bytes.truncate(starts[10]);
        assert!(decode_all(&bytes).torn, "nothing follows it");
    }

    #[test]
    fn a_flipped_byte_in_a_record_is_damage_even_in_the_last_one() {
        for index in [1, 2] {
            let (mut bytes, starts) = file(3);
            bytes[starts[index] + HEADER_BYTES] ^= 0x55;
            let decoded = decode_all(&bytes);
            assert_eq!(decoded.valid_bytes, starts[index]);
            assert_eq!(decoded.damage, Some(Damage::BodyChecksum));
            assert!(!decoded.torn);
        }
    }

    #[test]
    fn zeros_from_a_frame_start_or_a_sector_boundary_are_unwritten_space() {
        // Enough records that one straddles the first sector boundary.
        let (bytes, starts) = file(40);
        let straddling = starts
            .iter()
            .rposition(|&start| start < SECTOR_BYTES as usize)
            .unwrap();
        let end = starts[straddling + 1];
        assert!(end > SECTOR_BYTES as usize);
        // The last record's end never written: zeros from the sector boundary to past its
        // declared end.
        let mut cut = bytes[..end].to_vec();
        cut[SECTOR_BYTES as usize..].fill(0);
        cut.extend_from_slice(&[0; 4096]);
        let decoded = decode_all(&cut);
        assert_eq!(decoded.valid_bytes, starts[straddling]);
        assert!(decoded.torn);
        // Nothing of the last append written: zeros from its frame's start.
        let mut cut = bytes[..end].to_vec();
        cut[starts[straddling]..].fill(0);
        assert!(decode_all(&cut).torn);
        // Preallocated space after whole frames.
        let mut spare = bytes.clone();
        spare.extend_from_slice(&[0; 100]);
        let decoded = decode_all(&spare);
        assert_eq!((decoded.valid_bytes, decoded.torn), (bytes.len(), true));
        // Zeros with something written after them are damage.
        spare.push(1);
        assert!(!decode_all(&spare).torn);
        // No frame of format 2 is all zeros.
        assert_eq!(
            parse_header(Format::Checked, &[0; HEADER_BYTES]),
            Err(Damage::HeaderChecksum)
        );
    }

    #[test]
    fn a_whole_last_record_whose_final_bytes_turned_to_zeros_is_damage_not_torn() {
        // What the simulation's seed 12,753 found: a flipped bit made the last byte of the
        // newest segment's final record a zero, in the middle of a written sector.
        let (mut bytes, starts) = file(3);
        let last = bytes.len() - 1;
        bytes[last] = 0;
        let decoded = decode_all(&bytes);
        assert_eq!(decoded.valid_bytes, starts[2]);
        assert_eq!(decoded.damage, Some(Damage::BodyChecksum));
        assert!(!decoded.torn);
        // The same with preallocated space after it.
        bytes.extend_from_slice(&[0; 1000]);
        assert!(!decode_all(&bytes).torn);
    }

    #[test]
    fn file_headers() {
        assert_eq!(file_format(&FILE_HEADER), Ok((Format::Checked, 8)));
        assert_eq!(file_format(&FILE_HEADER[..5]), Err(Damage::FileHeaderCut));
        let mut future = FILE_HEADER;
        future[6] = 3;
        assert_eq!(file_format(&future), Err(Damage::UnknownVersion(3)));
        let decoded = decode_all(&[&future[..], &file(2).0[8..]].concat());
        assert_eq!((decoded.valid_bytes, decoded.torn), (0, false));
        assert!(
            decode_all(&FILE_HEADER[..3]).torn,
            "a segment cut as it was created"
        );
        assert_eq!(file_format(&legacy_file(1).0[..8]), Ok((Format::Legacy, 0)));
    }
}
