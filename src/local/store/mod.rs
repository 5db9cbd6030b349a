//! The durable log: every mutation is appended (checksummed) before its RPC is answered,
//! and replayed into the wheel on start.
//!
//! Layout of the data directory: segments `<first-seq>.log` and snapshots
//! `<seq>.snapshot`, where a snapshot numbered S holds the live state as of the start of
//! segment S, so recovery loads the newest snapshot and replays segments S and later. Both
//! are a file header and checksummed frames ([`frame`]); recovery checks every frame
//! before it changes anything ([`scan`], [`recovery`]), and only the operator's
//! `--recover-truncate` sets damage aside ([`repair`]).
//!
//! One thread ("tickd-store") owns the files. Appends queue up while it is writing or
//! syncing and are then written and synced together (group commit), so concurrent callers
//! share one fsync. Each append gets a number, and after each group commit the thread
//! publishes the numbers written and durable ([`watermark`]): whoever waits on the log
//! keeps its own queue of what waits, released as the marks pass.
//!
//! Snapshots are fuzzy: the worker streams the live timers in chunks while it keeps
//! serving, and every mutation meanwhile goes to the new segment. Replay is idempotent per
//! timer (see [`records`]), so snapshot + later segments give the exact state. The store
//! adds the fired-but-unsettled expirations it tracks itself, then deletes what the
//! snapshot replaces: disk use follows the live set, not the history, within
//! `--max-disk` if set ([`disk_budget`]).
//!
//! [`open`] opens a directory and starts the store thread, [`writer`], which callers reach
//! through a [`handle`]; [`snapshot_writer`] writes snapshots off that thread, and
//! [`files`] names what they all create and delete.

mod batch;
pub mod disk;
pub(crate) mod disk_budget;
mod error;
mod file_scan;
mod files;
pub mod frame;
mod frame_buffers;
mod handle;
mod open;
pub(crate) mod recovery;
pub mod repair;
pub mod scan;
mod snapshot_task;
mod snapshot_writer;
#[cfg(any(test, feature = "sim"))]
pub(crate) mod stepped;
mod sync_mode;
mod timer_fields;
pub(crate) mod watermark;
mod writer;

/// The generated record types of `proto/tickd/store/v1/records.proto`.
#[allow(clippy::all, missing_docs)]
pub mod records {
    include!(concat!(env!("OUT_DIR"), "/tickd.store.v1.rs"));
}

pub use crate::config::SyncMode;
pub use batch::Batch;
pub use error::StoreError;
pub use handle::StoreHandle;
pub use open::{RecoveredFiring, Store};
/// The simulation's bound on what a machine crash may lose.
#[cfg(any(test, feature = "sim"))]
pub(crate) use sync_mode::SYNC_INTERVAL;
