//! tickd: a timer service built on a hierarchical hashed timing wheel.
//!
//! The life of a timer, following the data one way through the modules:
//! - [`api`] validates a gRPC request into the [`domain`]'s types and asks the backend,
//!   which it knows only as the [`domain::Timers`] and [`domain::Expirations`] traits;
//! - [`local`] is the backend of one process: its `timers` turn each call into a command
//!   for the [`worker`] thread, which owns the [`wheel`] and the local `table` of every
//!   timer; the table journals each change to the `store` before it is answered, and
//!   hands what fires to `delivery` in the same log batch as the firings' records;
//!   delivery streams them to subscribers until acknowledged;
//! - [`sink`] pushes a namespace's expirations to its HTTP endpoint, as tickd's own
//!   subscriber of the namespace;
//! - [`cron`] computes a cron timer's next firing in its time zone (pure, like the wheel).
//!
//! With `--store postgres://...`, [`cluster`] is the backend instead of [`local`]: timers
//! live in a shared database, and each replica's wheel holds only what its partitions
//! need to fire soon.
//!
//! [`backend`] chooses one from the configuration, in one place; [`server::run`] serves
//! it behind the listeners as a [`domain::Backend`], never knowing which it holds.

pub(crate) mod api;
pub mod backend;
pub mod budget;
pub mod clock;
pub mod cluster;
pub mod config;
pub(crate) mod convert;
pub mod cron;
pub mod domain;
mod faults;
pub mod local;
pub mod metrics;
mod pem;
pub mod proto;
pub mod proto_json;
pub mod reference;
pub mod server;
#[cfg(any(test, feature = "sim"))]
pub mod sim;
pub mod sink;
pub mod telemetry;
pub mod wheel;
pub mod worker;
