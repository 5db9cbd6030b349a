//! When an append counts as durable (`--sync`), and how often the interval mode syncs.

use std::time::Duration;

use clap::ValueEnum;

/// When an append counts as durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SyncMode {
    /// fsync before answering; concurrent appends share one fsync.
    Always,
    /// Answer once written to the OS; fsync every `SYNC_INTERVAL`. A machine crash loses at
    /// most that window; a process crash loses nothing.
    Interval,
    /// No log at all: timers live in memory only.
    None,
}

/// How often `--sync interval` fsyncs.
pub(crate) const SYNC_INTERVAL: Duration = Duration::from_millis(10);
