//! `--sync`: when an append to the local log counts as durable, and so when a call that
//! changes timers is answered. The store follows it (`crate::local::store`).

use clap::ValueEnum;

/// When an append counts as durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SyncMode {
    /// fsync before answering; concurrent appends share one fsync.
    Always,
    /// Answer once written to the OS; fsync every 10 ms. A machine crash loses at
    /// most that window; a process crash loses nothing.
    Interval,
    /// No log at all: timers live in memory only.
    None,
}
