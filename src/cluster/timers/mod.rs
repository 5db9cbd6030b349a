//! The replicated backend's timers: [`Timers`](crate::domain::Timers) answered from the shared database, with
//! the same answers and errors as the worker's table, so the API cannot tell which store
//! is behind it.
//!
//! Each command runs on its own task as single statements on the shared connections. A
//! registration, heartbeat or reschedule that moves a deadline inside the load horizon
//! announces it on `tickd_due` in the same statement, so the partition's owner loads it
//! when (and only if) it commits. Each change of a deadline bumps the row's version, so
//! the owner's wheel replaces the old deadline by the new one whatever order it hears of
//! them in, and the firing (which matches the deadline its wheel had) fires nothing at
//! the old one. Registration is in [`register`].

mod announce;
mod cluster_timers;
mod columns;
mod ids;
mod inserts;
mod register;
mod rows;

pub(crate) use cluster_timers::ClusterTimers;
pub(crate) use rows::stored_calendar;
