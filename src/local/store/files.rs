//! The data directory's files by name: segments `<first-seq>.log`, snapshots
//! `<seq>.snapshot` (`.partial` while written), and a name back to its number and kind;
//! and the two steps that make a new file durable, its creation with a header and the
//! directory's sync. Everything that creates, finds or deletes a file names it here.

use std::path::{Path, PathBuf};

use super::disk::{Disk, DiskFile};
use super::error::{io_error, StoreError};
use super::frame;

/// What a data-directory file is, by its extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum FileKind {
    Segment,
    Snapshot,
    PartialSnapshot,
}

/// The sequence number and kind of a data-directory file, from its name. Files set aside
/// by `--recover-truncate` have a further extension, so they are none of these.
pub(crate) fn file_sequence(path: &Path) -> Option<(u64, FileKind)> {
    let kind = match path.extension()?.to_str()? {
        "log" => FileKind::Segment,
        "snapshot" => FileKind::Snapshot,
        "partial" => FileKind::PartialSnapshot,
        _ => return None,
    };
    let sequence = path.file_stem()?.to_str()?.parse().ok()?;
    Some((sequence, kind))
}

pub(crate) fn segment_path(dir: &Path, sequence: u64) -> PathBuf {
    dir.join(format!("{sequence:020}.log"))
}

pub(crate) fn snapshot_path(dir: &Path, sequence: u64) -> PathBuf {
    dir.join(format!("{sequence:020}.snapshot"))
}

/// A new segment, its file header written (and made durable by the first commit's sync).
pub(super) fn create_segment(
    disk: &dyn Disk,
    dir: &Path,
    sequence: u64,
) -> Result<Box<dyn DiskFile>, StoreError> {
    let path = segment_path(dir, sequence);
    let mut file = disk.create_new(&path).map_err(io_error(&path))?;
    file.append(&frame::FILE_HEADER).map_err(io_error(&path))?;
    sync_dir(disk, dir)?;
    Ok(file)
}

/// Makes a file's creation or rename durable.
pub(super) fn sync_dir(disk: &dyn Disk, dir: &Path) -> Result<(), StoreError> {
    disk.sync_dir(dir).map_err(io_error(dir))
}
