//! The log's record decoder must never panic, whatever bytes a damaged disk hands it, and
//! what it reports must be consistent: the intact prefix decodes alone to the same records,
//! and only damage can be a torn append.
//!
//! Run from the repository root: `cargo +nightly fuzz run decode_frames`. The input is a
//! whole file: format 2 (the file header, then frames) or format 1 (frames alone).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tickd::local::store::frame;

fuzz_target!(|data: &[u8]| {
    let decoded = frame::decode_all(data);
    assert!(decoded.valid_bytes <= data.len());
    assert_eq!(decoded.damage.is_none(), decoded.valid_bytes == data.len());
    assert!(decoded.damage.is_some() || !decoded.torn);
    let prefix = frame::decode_all(&data[..decoded.valid_bytes]);
    assert!(prefix.damage.is_none());
    assert_eq!(prefix.records, decoded.records);
    // Re-encoding what was decoded, in the format tickd writes, must decode back to it.
    let mut encoded = frame::FILE_HEADER.to_vec();
    for record in &decoded.records {
        frame::encode(record, &mut encoded);
    }
    assert_eq!(frame::decode_all(&encoded).records, decoded.records);
});
