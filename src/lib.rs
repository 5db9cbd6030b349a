//! tickd: a timer service built on a hierarchical hashed timing wheel.
//!
//! The life of a timer, following the data one way through the modules:
//! - [`api`] validates a gRPC request into the [`domain`]'s types and asks the backend,
//!   which it knows only as the [`domain::Timers`] and [`domain::Expirations`] traits;
//! - [`worker`] runs the dedicated thread that owns the [`wheel`] and every timer's state
//!   ([`worker::local`] is the local backend's way in); it applies commands in batches,
//!   sleeps until the next due slot, and hands fired timers out in batches;
//! - [`store`] writes every change to the log before it is answered;
//! - [`delivery`] queues fired timers per namespace and streams them to subscribers;
//! - [`cron`] computes a cron timer's next firing in its time zone (pure, like the wheel).
//!
//! With `--store postgres://...`, [`cluster`] is the backend instead of the worker's table,
//! the local log and the delivery queues: timers live in a shared database, and each
//! replica's wheel holds only what its partitions need to fire soon.
//!
//! [`server::run`] chooses the backend, in one place, and wires it behind a listener.

pub(crate) mod api;
pub mod backend;
pub mod budget;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod cron;
pub mod domain;
mod faults;
pub mod local;
pub mod metrics;
mod pem;
pub mod proto;
pub mod reference;
pub mod server;
#[cfg(any(test, feature = "sim"))]
pub mod sim;
pub mod wheel;
pub mod worker;
