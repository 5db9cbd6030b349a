//! The deterministic simulation (the `sim` feature): tickd's local backend, its store on a
//! simulated disk, and its delivery, driven on one thread by one seed.
//!
//! Nothing here is in the service's build. Production code reaches the file system through
//! [`crate::local::store::disk::Disk`] and reads time through [`crate::clock::Clock`]; the
//! simulation substitutes [`disk::SimDisk`] and a manual clock, and steps the store and
//! delivery by hand instead of on their thread and task.

pub mod disk;
#[cfg(test)]
mod found;
mod harness;
mod ledger;
mod model;
mod node;
mod pusher;
pub mod rng;

pub use harness::Report;

/// Runs seed `seed` for `steps` steps, then the liveness phase, checking every promise
/// after every step.
pub fn run_seed(seed: u64, steps: u64) -> Report {
    harness::Harness::new(seed).run(steps)
}
