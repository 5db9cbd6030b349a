//! The seam between the server and whatever holds the timers: the server starts one
//! [`Backend`], serves the API over its [`Timers`] and [`Expirations`], watches its
//! [`Health`], and stops it. It never learns which backend it holds: the local one
//! (`crate::local`) or a replica of a shared database (`crate::cluster`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use super::{Expirations, Timers};

/// What the health watch makes of a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    Serving,
    /// The backend cannot reach what holds its state (for this long): not serving until it
    /// can. Restarting tickd would not bring it back.
    Unreachable(Duration),
    /// A part that holds state is gone or its log failed: tickd must stop, and recovery
    /// decide what is true.
    Failed(&'static str),
}

/// How a backend's stop ends: the timers still pending in this process, or why the stop
/// did not end cleanly.
pub type Stopping = Pin<Box<dyn Future<Output = Result<usize, &'static str>> + Send>>;

/// The parts that hold timers, as the server starts, watches and stops them.
pub trait Backend: Send + Sync + 'static {
    /// What the API registers, looks up and heartbeats through.
    fn timers(&self) -> Arc<dyn Timers>;
    /// What the API subscribes, acks and redrives through.
    fn expirations(&self) -> Arc<dyn Expirations>;
    /// Whether the backend's parts can do their job; the server looks often.
    fn health(&self) -> Health;
    /// Ends the subscription streams (the start of a graceful shutdown).
    fn shutdown(&self);
    /// Stops everything, once the API has drained.
    fn stop(self: Box<Self>) -> Stopping;
}
