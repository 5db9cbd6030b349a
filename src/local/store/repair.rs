//! `--recover-truncate`: the operator's way past damage that recovery refuses, like
//! Redis's `aof-load-truncated`. Everything before the first damage is kept; the rest is
//! moved aside, never deleted, so it can still be examined or salvaged:
//!
//! - the damaged file's bytes from the damage on are copied to `<file>.damaged-at-<offset>`
//!   next to it, and the file is cut there;
//! - files that would have been replayed after it are renamed `<file>.after-damage`.
//!
//! Neither name ends in `.log` or `.snapshot`, so recovery and compaction leave them
//! alone. A torn append is not damage and is left to recovery, which drops it by itself.

use std::io::{self, Read};
use std::path::{Path, PathBuf};

use tracing::warn;

use super::disk::{Disk, RealDisk};
use super::error::{io_error, StoreError};
use super::frame::Damage;
use super::scan;

/// What [`set_aside_damage`] moved.
#[derive(Debug)]
pub struct SetAside {
    /// The damaged file, now cut at `offset`.
    pub path: PathBuf,
    pub offset: u64,
    pub damage: Damage,
    /// Where its bytes from `offset` on went, and how many there were.
    pub tail: PathBuf,
    pub tail_bytes: u64,
    /// Later files, each with its new name.
    pub renamed: Vec<(PathBuf, PathBuf)>,
}

/// Checks `dir` as recovery does; if it is damaged anywhere but in a torn append, keeps
/// what precedes the first damage and moves the rest aside. Returns what it moved, or
/// `None` when there was nothing to move (including when `dir` does not exist yet).
///
/// The tail is copied and made durable before the file is cut, so a crash part way leaves
/// a copy too many, never one too few; a second run picks fresh names.
pub fn set_aside_damage(dir: &Path) -> Result<Option<SetAside>, StoreError> {
    set_aside_damage_on(&RealDisk, dir)
}

/// [`set_aside_damage`] on the given disk.
pub(crate) fn set_aside_damage_on(
    disk: &dyn Disk,
    dir: &Path,
) -> Result<Option<SetAside>, StoreError> {
    if !disk.exists(dir) {
        return Ok(None);
    }
    let scan = scan::scan_on(disk, dir, |_| {})?;
    let Some(stop) = scan.stop.filter(|stop| !stop.torn) else {
        return Ok(None);
    };
    let tail = free_name(disk, &stop.path, &format!("damaged-at-{}", stop.offset));
    copy_from(disk, &stop.path, stop.offset, &tail)?;
    warn!(
        file = %stop.path.display(),
        offset = stop.offset,
        damage = %stop.damage,
        bytes = stop.bytes_after,
        moved_to = %tail.display(),
        "recover-truncate: moved the damaged part of a log file aside"
    );
    let mut renamed = Vec::new();
    for path in scan.unread {
        let aside = free_name(disk, &path, "after-damage");
        disk.rename(&path, &aside).map_err(io_error(&path))?;
        warn!(
            file = %path.display(),
            moved_to = %aside.display(),
            "recover-truncate: moved a log file that follows the damage aside"
        );
        renamed.push((path, aside));
    }
    disk.sync_dir(dir).map_err(io_error(dir))?;
    disk.open(&stop.path)
        .and_then(|mut file| {
            file.set_len(stop.offset)?;
            file.sync_all()
        })
        .map_err(io_error(&stop.path))?;
    Ok(Some(SetAside {
        path: stop.path,
        offset: stop.offset,
        damage: stop.damage,
        tail,
        tail_bytes: stop.bytes_after,
        renamed,
    }))
}

/// Copies `from`'s bytes from `offset` on into a new file `to`, durably.
fn copy_from(disk: &dyn Disk, from: &Path, offset: u64, to: &Path) -> Result<(), StoreError> {
    let mut source = disk.read_from(from, offset).map_err(io_error(from))?;
    let mut target = disk.create_new(to).map_err(io_error(to))?;
    let mut buffer = vec![0; 1 << 20];
    loop {
        let count = match source.read(&mut buffer) {
            Ok(0) => break,
            Ok(count) => count,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(io_error(from)(error)),
        };
        target.append(&buffer[..count]).map_err(io_error(to))?;
    }
    target.sync_all().map_err(io_error(to))
}

/// `<path>.<suffix>`, or `<path>.<suffix>.2`, `.3`, ... when taken: never an earlier
/// file set aside.
fn free_name(disk: &dyn Disk, path: &Path, suffix: &str) -> PathBuf {
    let mut base = path.as_os_str().to_owned();
    base.push(format!(".{suffix}"));
    (1u32..)
        .map(|attempt| {
            let mut name = base.clone();
            if attempt > 1 {
                name.push(format!(".{attempt}"));
            }
            PathBuf::from(name)
        })
        .find(|candidate| !disk.exists(candidate))
        .expect("some name is free")
}
