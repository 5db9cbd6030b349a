//! Expirations as they leave a backend: one firing of a timer, a delivery of it to a
//! subscriber, a dead one, and the answers of Ack and of the dead listing.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio_stream::Stream;

use super::timer::{Calendar, TimerId};
use super::trace_context::TraceContext;
use crate::budget::MemoryReservation;

/// One firing of a timer, on its way to delivery.
#[derive(Debug, Clone)]
pub struct Expiration {
    pub id: TimerId,
    pub namespace: Arc<str>,
    pub key: Option<String>,
    pub payload: Bytes,
    pub deadline_unix: u64,
    pub fired_unix: u64,
    pub repeat: Option<Duration>,
    pub ttl: Option<Duration>,
    pub calendar: Option<Calendar>,
    /// Counts this firing: 1 for the first.
    pub fired_count: u64,
    /// The deadline passed while the server was down.
    pub late: bool,
    /// The trace context of the call that registered (or last rescheduled) the timer.
    pub trace: Option<Arc<TraceContext>>,
    /// Its share of the memory budget, given back when the last copy of it is dropped
    /// (settled, or dropped from the dead list).
    pub memory: MemoryReservation,
    /// Fired while the memory budget was full (a repeating timer's firing, which needs
    /// memory of its own): kept on the dead list rather than buffered for delivery.
    pub over_memory_budget: bool,
}

/// What the worker hands the delivery task, in the order it happened.
#[derive(Debug)]
pub enum Handoff {
    Fired(Expiration),
    /// The table forgot this namespace, after every expiration it fired there: the hold
    /// it had on the live namespaces (see [`crate::local::live_namespaces`]) is the receiver's to let go.
    Forgotten(Arc<str>),
}

/// One round of the worker's hand-offs, in the order they happened, and the number of the
/// log batch that records them (None: no log): delivery holds them until that batch is
/// durable, so that every record before them (the timers' registrations too) is durable
/// as well, and a batch the log fails to write is never delivered.
#[derive(Debug)]
pub struct FiredRound {
    pub handoffs: Vec<Handoff>,
    pub logged_in: Option<u64>,
}

/// One delivery of an expiration to one subscriber, as the stream carries it.
#[derive(Debug, Clone)]
pub struct Delivered {
    pub delivery_id: u64,
    pub expiration: Arc<Expiration>,
    /// 1 for the first delivery.
    pub attempt: u32,
}

/// An expiration that used up its delivery attempts (or found the buffer full).
#[derive(Debug, Clone)]
pub struct Dead {
    /// Names it for Redrive (shown as its delivery id by Pending).
    pub id: u64,
    pub expiration: Arc<Expiration>,
    pub attempts: u32,
    pub reason: &'static str,
}

/// A subscriber's stream of deliveries. Dropping it hands its unacknowledged deliveries
/// back for redelivery.
pub type DeliveryStream = Pin<Box<dyn Stream<Item = Delivered> + Send>>;

/// The answer to an Ack: how many were settled, and the delivery ids that were not
/// awaiting an ack (already settled, redelivered since, or never given).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AckOutcome {
    pub acknowledged: u32,
    pub unknown: Vec<u64>,
}

/// Dead expirations one Redrive call sends back at most, on either backend, oldest first;
/// it is also the most delivery ids one call may name. Redriving takes them off the dead
/// list, so "all of them" beyond it is done by calling again until `redriven` is less.
pub const MAX_REDRIVE: usize = 1_000;

/// The answer to a Redrive: how many went back to delivery, and the ids given that were
/// not dead expirations of the namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RedriveOutcome {
    pub redriven: u32,
    pub not_dead: Vec<u64>,
}

/// The dead expirations kept, oldest first; `count` is how many are listed.
#[derive(Debug, Clone, Default)]
pub struct DeadList {
    pub count: u64,
    pub dead: Vec<Dead>,
}
