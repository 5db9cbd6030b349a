//! The seam between the server and whatever holds the timers. The API asks [`Timers`]
//! and [`Expirations`]; the server starts one [`Backend`], serves the API over what it
//! offers, watches its [`Health`], and stops it. Neither learns which backend it holds:
//! the local one (`crate::local`) or a replica of a shared database (`crate::cluster`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::answer::Answer;
use super::error::TimerError;
use super::expiration::{AckOutcome, DeadList, DeliveryStream, RedriveOutcome};
use super::page::{PendingPage, PendingQuery};
use super::sink_store::SinkStore;
use super::subscriber::SubscribeOptions;
use super::timer::{Due, NewTimer, Registered, TimerRef, TimerView};
use super::trace_context::TraceContext;

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
    /// Where the sinks set through the API are kept (see `crate::sink`).
    fn sinks(&self) -> Arc<dyn SinkStore>;
    /// Whether the backend's parts can do their job; the server looks often.
    fn health(&self) -> Health;
    /// Ends the subscription streams (the start of a graceful shutdown).
    fn shutdown(&self);
    /// Stops everything, once the API has drained.
    fn stop(self: Box<Self>) -> Stopping;
}

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
    /// answer's view may leave the payload out. A trace context given replaces the
    /// timer's: the call that moved the firing is the one its handler continues.
    fn reschedule(
        &self,
        timer: TimerRef,
        due: Due,
        payload: Option<Bytes>,
        trace: Option<Arc<TraceContext>>,
    ) -> Answer<TimerView>;
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
    /// Hands an unacknowledged delivery back, to be delivered again once `after` has
    /// passed, as if its ack deadline fell then: its attempt stays counted, so one out of
    /// attempts goes dead instead. `hold` says whether it keeps its place in its
    /// subscriber's window meanwhile. False if it is not awaiting an ack (acknowledged,
    /// taken back already, or unknown). A push sink's back-off is this, and its claim
    /// renewals while it holds a push (see `crate::sink`).
    fn retry_later(
        &self,
        namespace: String,
        delivery_id: u64,
        after: Duration,
        hold: Hold,
    ) -> Answer<bool>;
    /// Hands an unacknowledged delivery that never reached its client back, as the
    /// attempt it was: the attempt counted when it was delivered is refunded (durably), so
    /// a delivery a paused sink never sent, or one its sink's open circuit kept waiting,
    /// spends none. `when` says when it comes again, and to whom. False if it is not
    /// awaiting an ack. Only for one the caller knows was never sent: an attempt that may
    /// have reached a client is [`Self::retry_later`]'s.
    fn give_back(&self, namespace: String, delivery_id: u64, when: GiveBack) -> Answer<bool>;
    /// Answers once what delivery was asked before this call, the hand-backs of streams
    /// dropped before it among them, is kept across a crash of the process: a pause is
    /// answered after it, so that a crash right after costs no attempt.
    fn recorded(&self) -> Answer<()>;
    /// How many expirations of each of `namespaces` wait to be delivered now (not in
    /// flight, not waiting out a retry's delay), in the order asked: what a paused or
    /// slow sink has before it.
    fn waiting(&self, namespaces: Vec<String>) -> Answer<Vec<u64>>;
}

/// When a delivery handed back unsent with [`Expirations::give_back`] comes again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GiveBack {
    /// At once, and to another subscriber: the one giving it back is leaving (a paused or
    /// stopping pusher, a dropped stream).
    Leaving,
    /// Once `after` has passed, to any subscriber (the one giving it back among them),
    /// taking no place in a window meanwhile: a push its sink's open circuit would keep
    /// waiting waits in the backend instead, so that it holds no place a push that may go
    /// could use.
    After(Duration),
}

/// What a delivery handed back with [`Expirations::retry_later`] does with its place in
/// its subscriber's window (`max_unacked`) until `after` has passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// Kept: the subscriber still holds it (a push waiting for its sink renews its claim
    /// so). An ack still settles it.
    Kept,
    /// Released: it waits for its retry in the backend, taking no place of the
    /// subscriber's, so that expirations waiting for their retries never keep others
    /// from being delivered. Whether an ack before then still settles it is the
    /// backend's (the pusher sends none): it is meant to be delivered again.
    Released,
}
