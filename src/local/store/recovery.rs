//! Start-up: the newest snapshot, then every later log segment, replayed in order.
//!
//! Recovery never discards on its own anything but a torn append: a final record of the
//! newest segment that a crash cut short ([`super::frame::is_torn`]), which is dropped with
//! a warning, keeping everything before it. Any other damage is an error naming the file,
//! the byte offset and what is wrong, and every file is left byte for byte as it was: the
//! whole directory is checked before anything in it changes, and the new segment is only
//! created after that. The operator then decides (`tickd check`, `--recover-truncate`).

use std::path::Path;

use tracing::{info, warn};

use super::disk::Disk;
use super::error::{io_error, StoreError};
use super::records::Record;
use super::scan::{self, Stop, Unsettled};

pub(crate) struct Recovered {
    /// The highest file number on disk (0 if none): the new segment takes the next one.
    pub(crate) last_segment: u64,
    /// Fired expirations never settled, with their frames, by (timer id, fired count).
    pub(crate) unsettled: Unsettled,
    /// The highest boot recorded (0 if none).
    pub(crate) boot: u64,
    /// Size of the snapshot recovery started from (0 if none).
    pub(crate) snapshot_bytes: u64,
}

pub(crate) fn recover(
    disk: &dyn Disk,
    dir: &Path,
    replay: impl FnMut(Record),
) -> Result<Recovered, StoreError> {
    let scan = scan::scan_on(disk, dir, replay)?;
    if let Some(stop) = &scan.stop {
        if !stop.torn {
            return Err(StoreError::Corrupt {
                path: stop.path.clone(),
                offset: stop.offset,
                damage: stop.damage,
            });
        }
        cut_torn_tail(disk, stop)?;
    } else if let Some(newest) = scan.files.last() {
        make_durable(disk, &newest.path)?;
    }
    // Leftovers of an interrupted snapshot or compaction are not needed.
    for path in &scan.superseded {
        disk.remove(path).map_err(io_error(path))?;
    }
    info!(
        dir = %dir.display(),
        records = scan.records,
        snapshot = ?scan.snapshot,
        unsettled = scan.unsettled(),
        last_boot = scan.boot,
        "store recovered"
    );
    Ok(Recovered {
        last_segment: scan.last_sequence,
        unsettled: scan.unsettled,
        boot: scan.boot,
        snapshot_bytes: scan.snapshot_bytes,
    })
}

/// Syncs the newest file read. Why: its last records may never have reached the disk (a
/// process killed between a write and its fsync, or whose fsync failed), yet this process
/// just replayed them and will build on them, and a new segment now follows it. Were a
/// power loss to take them after that, the damage would sit in a segment that is no
/// longer the newest, which no start forgives: tickd would refuse to start.
fn make_durable(disk: &dyn Disk, path: &Path) -> Result<(), StoreError> {
    disk.open(path)
        .and_then(|mut file| file.sync_all())
        .map_err(io_error(path))
}

fn cut_torn_tail(disk: &dyn Disk, stop: &Stop) -> Result<(), StoreError> {
    warn!(
        file = %stop.path.display(),
        offset = stop.offset,
        bytes = stop.bytes_after,
        damage = %stop.damage,
        "dropping a torn record at the end of the newest segment"
    );
    disk.open(&stop.path)
        .and_then(|mut file| {
            file.set_len(stop.offset)?;
            // Durable before a newer segment exists, or a power loss could bring the torn
            // record back into what is then an older segment, where it is damage.
            file.sync_all()
        })
        .map_err(io_error(&stop.path))
}
