//! The deterministic simulation (the `sim` feature): tickd's local backend, its store on a
//! simulated disk, and its delivery, driven on one thread by one seed.
//!
//! Nothing here is in the service's build. Production code reaches the file system through
//! [`crate::store::disk::Disk`] and reads time through [`crate::clock::Clock`]; the
//! simulation substitutes [`disk::SimDisk`] and a manual clock, and steps the store and
//! delivery by hand instead of on their thread and task.

pub mod disk;
pub(crate) mod model;
pub(crate) mod node;
pub mod rng;
