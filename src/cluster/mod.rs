//! Replicated tickd: several replicas share one PostgreSQL database (`--store postgres://`).
//!
//! The database is the store and the coordination point; no replica talks to another.
//! A timer's life here:
//! - **born** in [`timers`]: a row in `tickd_timers`, in partition `id % partitions`,
//!   committed before the RPC is answered; if it is due within the load horizon, a
//!   `NOTIFY tickd_due` in the same statement tells its partition's owner at once;
//! - **waits** in the owner's [`schedule`] (a wheel on the worker thread), loaded by
//!   [`loader`] from that notification or from its periodic scan of the horizon;
//! - **fires** in [`firing`]: one transaction checks that this replica still holds the
//!   partition's lease at the epoch it was granted (the fence), deletes or re-arms the row,
//!   and records an expiration in `tickd_expirations`;
//! - **is delivered** by [`delivery`]: when the firing replica has a subscriber of the
//!   namespace with room, the firing statement records the expiration already claimed for
//!   it and the replica hands it over once that commits, within its lease; otherwise it is
//!   claimed from the database by a subscriber on any replica. Either way the row is
//!   claimed for one subscriber until its ack deadline, deleted when acknowledged (acks
//!   of concurrent callers in one statement), claimed again (next attempt) when the
//!   deadline passes.
//!
//! Statements many callers make at once (registrations' inserts, acks) are
//! group-committed by [`group_commit`]: one statement for whatever queued while the
//! previous one ran.
//!
//! A registration that would add a namespace beyond `--max-namespaces` is refused by
//! [`namespaces`].
//!
//! The push sinks set through the API are rows every replica reads ([`sinks`]).
//!
//! [`ownership`] renews this replica's partition leases, takes over expired ones, and
//! balances partitions across the live replicas. Every connection to the database is opened
//! from one [`Database`] ([`database`]), with the TLS settings of [`tls`].

mod answers;
pub(crate) mod connections;
pub(crate) mod database;
pub mod delivery;
mod error;
pub mod firing;
pub(crate) mod group_commit;
pub(crate) mod loader;
mod namespaces;
mod notifications;
pub(crate) mod ownership;
mod replica;
pub mod schedule;
pub mod schema;
mod shared;
mod sinks;
mod store_url;
pub(crate) mod timers;
pub(crate) mod tls;
mod trace_column;

pub use connections::Connections;
pub use database::Database;
pub use error::ClusterError;
pub use notifications::Wakeups;
pub(crate) use replica::default_replica_id;
pub use replica::{ClusterConfig, Replica};
pub use shared::{Owned, Shared};
pub use store_url::StoreUrl;
