//! The on-disk framing of log and snapshot records: `[length u32 LE][crc32 u32 LE][record]`.
//!
//! The checksum covers the record bytes, so a torn or corrupted record is detected; the
//! decoder never panics on any input (it is fuzzed: `fuzz/fuzz_targets/decode_frames.rs`).

use prost::Message;

use super::records::Record;

/// Bytes of framing before each record.
pub const HEADER_BYTES: usize = 8;
/// No record is anywhere near this large (payloads are capped far lower); a longer length
/// field is corruption, not a record.
pub const MAX_RECORD_BYTES: usize = 64 * 1024 * 1024;

pub fn encode(record: &Record, out: &mut Vec<u8>) {
    let length = record.encoded_len();
    out.reserve(HEADER_BYTES + length);
    let start = out.len();
    out.extend_from_slice(&(length as u32).to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    record.encode(out).expect("a Vec grows to fit any record");
    let checksum = crc32fast::hash(&out[start + HEADER_BYTES..]);
    out[start + 4..start + HEADER_BYTES].copy_from_slice(&checksum.to_le_bytes());
}

/// Why decoding stopped before the end of the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Damage {
    /// The last frame runs past the end: a write cut short.
    Truncated,
    /// A frame's checksum does not match, or its record does not decode.
    Corrupt,
    /// A length field beyond any possible record.
    BadLength,
}

/// The outcome of decoding a buffer of frames.
#[derive(Debug)]
pub struct Decoded {
    pub records: Vec<Record>,
    /// Bytes of intact frames from the start.
    pub valid_bytes: usize,
    /// Set when decoding stopped at a damaged frame at `valid_bytes`.
    pub damage: Option<Damage>,
    /// True when the damaged frame is the last thing in the buffer (nothing after its
    /// declared end), which is what a crash in the middle of an append looks like.
    pub damage_at_tail: bool,
}

/// Decodes every intact frame from the start of `bytes`, stopping at the first damaged one.
pub fn decode_all(bytes: &[u8]) -> Decoded {
    let mut records = Vec::new();
    let mut offset = 0;
    while offset < bytes.len() {
        match decode_one(&bytes[offset..]) {
            Ok((record, used)) => {
                records.push(record);
                offset += used;
            }
            Err((damage, declared_end)) => {
                let tail = offset.saturating_add(declared_end) >= bytes.len()
                    || bytes[offset..].iter().all(|&byte| byte == 0);
                return Decoded {
                    records,
                    valid_bytes: offset,
                    damage: Some(damage),
                    damage_at_tail: tail,
                };
            }
        }
    }
    Decoded {
        records,
        valid_bytes: offset,
        damage: None,
        damage_at_tail: false,
    }
}

/// One frame: the record and the bytes it used, or the damage and the frame's declared
/// length (header included).
fn decode_one(bytes: &[u8]) -> Result<(Record, usize), (Damage, usize)> {
    let Some(header) = bytes.get(..HEADER_BYTES) else {
        return Err((Damage::Truncated, HEADER_BYTES));
    };
    let (length, checksum) = parse_header(header.try_into().expect("header length"))?;
    let end = HEADER_BYTES + length;
    let Some(body) = bytes.get(HEADER_BYTES..end) else {
        return Err((Damage::Truncated, end));
    };
    decode_body(body, checksum)
        .map(|record| (record, end))
        .map_err(|damage| (damage, end))
}

/// The record length and checksum of a frame header.
pub fn parse_header(header: &[u8; HEADER_BYTES]) -> Result<(usize, u32), (Damage, usize)> {
    let length = u32::from_le_bytes(header[0..4].try_into().expect("4 bytes")) as usize;
    let checksum = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes"));
    if length > MAX_RECORD_BYTES {
        // The frame's true end is unknown: it counts as the tail only if nothing follows
        // its header.
        return Err((Damage::BadLength, HEADER_BYTES));
    }
    Ok((length, checksum))
}

pub fn decode_body(body: &[u8], checksum: u32) -> Result<Record, Damage> {
    if crc32fast::hash(body) != checksum {
        return Err(Damage::Corrupt);
    }
    Record::decode(body).map_err(|_| Damage::Corrupt)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::records::{record::Kind, Settled};

    fn settled(id: u64) -> Record {
        Record {
            kind: Some(Kind::Settled(Settled { id, fired_count: 1 })),
        }
    }

    #[test]
    fn frames_round_trip() {
        let mut bytes = Vec::new();
        for id in 0..10 {
            encode(&settled(id), &mut bytes);
        }
        let decoded = decode_all(&bytes);
        assert_eq!(decoded.records.len(), 10);
        assert_eq!(decoded.records[7], settled(7));
        assert_eq!(decoded.valid_bytes, bytes.len());
        assert!(decoded.damage.is_none());
    }

    #[test]
    fn a_cut_last_frame_is_a_damaged_tail() {
        let mut bytes = Vec::new();
        encode(&settled(1), &mut bytes);
        let first = bytes.len();
        encode(&settled(2), &mut bytes);
        bytes.truncate(bytes.len() - 3);
        let decoded = decode_all(&bytes);
        assert_eq!(decoded.records, vec![settled(1)]);
        assert_eq!(decoded.valid_bytes, first);
        assert_eq!(decoded.damage, Some(Damage::Truncated));
        assert!(decoded.damage_at_tail);
    }

    #[test]
    fn a_flipped_byte_in_the_middle_is_corruption_not_a_tail() {
        let mut bytes = Vec::new();
        for id in 0..3 {
            encode(&settled(id), &mut bytes);
        }
        let second = decode_all(&bytes).valid_bytes / 3;
        bytes[second + HEADER_BYTES] ^= 0x55;
        let decoded = decode_all(&bytes);
        assert_eq!(decoded.records, vec![settled(0)]);
        assert_eq!(decoded.damage, Some(Damage::Corrupt));
        assert!(!decoded.damage_at_tail);
    }
}
