//! Looking at a data directory from outside: its log segments, and its size.

use std::path::{Path, PathBuf};

/// The log segments of a data directory, oldest first.
pub(crate) fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut segments: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("data dir")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "log"))
        .collect();
    segments.sort();
    segments
}

/// Bytes of every file in the directory, as `du --apparent-size` counts them; 0 if there
/// is no directory. Files come and go during a compaction: one gone between listing and
/// measuring is simply not counted.
pub(crate) fn directory_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .filter_map(|entry| entry.metadata().ok())
        .filter(|metadata| metadata.is_file())
        .map(|metadata| metadata.len())
        .sum()
}
