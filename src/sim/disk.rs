//! The simulated disk: an in-memory [`Disk`] that keeps apart what the process sees and
//! what a power loss is sure to keep, so that the simulation can crash the process or the
//! machine between any two calls of the store and inject a failure into any one.
//!
//! The model, per the contract in [`crate::local::store::disk`]:
//! - a file (an inode) has the bytes the process sees, of which a prefix is durable (made
//!   so by the file's last successful sync); appends after it, and a cut by `set_len`
//!   below it, are owed to the disk until the next sync;
//! - a directory's entries (name to inode) change at once for the process, but each
//!   creation, rename and removal is owed to the disk until `sync_dir` of that directory;
//! - a process crash loses nothing the process saw (the page cache survives) and makes
//!   every open handle fail; a machine crash decides, by the seeded [`Rng`], what of each
//!   owed change reached the disk (see `disk/crash.rs`).
//!
//! Directories themselves are durable as soon as they are created: the store creates its
//! directory once, before any file, and the simulation does not look for that fault.
//!
//! Everything is deterministic: one [`Rng`], ordered maps, no clock. All clones of a
//! [`SimDisk`] share one state behind a mutex; the simulation calls from one thread, so
//! the order of calls, and with it every random choice, is the seed's.
//!
//! [`Disk`]: crate::local::store::disk::Disk
//! [`Rng`]: crate::sim::rng::Rng

mod crash;
mod directory;
mod faults;
mod file;
mod inspect;
mod state;
#[cfg(test)]
mod tests;

pub use state::SimDisk;
