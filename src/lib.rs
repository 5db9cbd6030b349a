//! tickd: a timer service built on a hierarchical hashed timing wheel.
//!
//! The life of a timer, following the data one way through the modules:
//! - [`api`] validates a gRPC request and turns it into a [`worker::table::Command`];
//! - [`worker`] runs the dedicated thread that owns the [`wheel`] and every timer's state;
//!   it applies commands in batches, sleeps until the next due slot, and hands fired
//!   timers out in batches;
//! - [`delivery`] queues fired timers per namespace and streams them to subscribers.
//!
//! With `--store postgres://...`, [`cluster`] takes the place of the worker's table, the
//! local log and the delivery queues: timers live in a shared database, and each replica's
//! wheel holds only what its partitions need to fire soon.
//!
//! [`server::run`] wires these together behind a listener.
#![forbid(unsafe_code)]

pub mod api;
pub mod cluster;
pub mod config;
pub mod cron;
pub mod delivery;
mod faults;
pub mod metrics;
pub(crate) mod namespaces;
pub mod proto;
pub mod server;
pub mod store;
pub mod wheel;
pub mod worker;
