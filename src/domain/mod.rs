//! The crate's vocabulary and the seam between the API and whatever holds the timers.
//!
//! The API validates requests into these types and asks one [`Timers`] and one
//! [`Expirations`]; it never learns which backend answers. Two implement them: the local
//! one (the worker thread's table in `worker::local`, the delivery task in
//! `delivery::expirations`) and the replicated one (`cluster::timers`,
//! `cluster::delivery`). `server::backend` chooses, in one place.
//!
//! Both traits answer with [`TimerError`], whatever failed underneath (a full queue, a
//! stopped task, an unreachable database), so the API maps one error type to gRPC.

mod answer;
mod backend;
mod delivery_config;
mod error;
mod expiration;
mod page;
mod subscriber;
mod timer;

use std::time::Duration;

use bytes::Bytes;

pub use answer::Answer;
pub use backend::{Backend, Health, Stopping};
pub use delivery_config::DeliveryConfig;
pub use error::TimerError;
pub use expiration::{
    AckOutcome, Dead, DeadList, Delivered, DeliveryStream, Expiration, Handoff, RedriveOutcome,
    MAX_REDRIVE,
};
pub use page::{PageToken, PendingPage, PendingQuery, ALL_NAMESPACES};
pub use subscriber::{SubscribeOptions, SubscriberDefaults, SubscriberRules};
pub use timer::{Calendar, Due, NewTimer, Registered, Target, TimerId, TimerRef, TimerView};

/// What the API asks of the timers: register, cancel, look up, heartbeat, list.
///
/// Every mutation is durable (per the backend's sync mode) before its answer arrives.
pub trait Timers: Send + Sync + 'static {
    /// Registers a batch; each item is answered on its own (a refused one changes
    /// nothing). The outer error refuses the whole batch (a full queue, a stopped backend).
    /// A backend may leave the payload out of the answer's view: the caller sent it, and
    /// the API's answer leaves it out anyway.
    fn register(&self, timers: Vec<NewTimer>) -> Answer<Vec<Result<Registered, TimerError>>>;
    /// True if a pending timer was cancelled; false if none was pending by that reference.
    fn cancel(&self, timer: TimerRef) -> Answer<bool>;
    fn get(&self, timer: TimerRef) -> Answer<TimerView>;
    /// Moves a lease's deadline one ttl (the given one, which then becomes its ttl) ahead.
    fn touch(&self, timer: TimerRef, ttl: Option<Duration>) -> Answer<TimerView>;
    fn pending(&self, query: PendingQuery) -> Answer<PendingPage>;
    /// Moves a pending timer's next firing to `due`, and replaces its payload if one is
    /// given. A lease keeps its ttl; a cron timer moves this firing only. NOT_FOUND if the
    /// timer is no longer pending (it fired, or was cancelled). As with `register`, the
    /// answer's view may leave the payload out.
    fn reschedule(&self, timer: TimerRef, due: Due, payload: Option<Bytes>) -> Answer<TimerView>;
}

/// What the API asks of delivery: streams of expirations, their acks, the dead ones.
pub trait Expirations: Send + Sync + 'static {
    fn subscribe(&self, options: SubscribeOptions) -> Result<DeliveryStream, TimerError>;
    fn ack(&self, namespace: String, delivery_ids: Vec<u64>) -> Answer<AckOutcome>;
    /// The dead expirations kept in a namespace, or (None) in every namespace.
    fn dead(&self, namespace: Option<String>) -> Answer<DeadList>;
    /// Sends a namespace's dead expirations (those named, or all of them) back to
    /// delivery, their attempts counted afresh.
    fn redrive(&self, namespace: String, ids: Option<Vec<u64>>) -> Answer<RedriveOutcome>;
}
