//! The crate's vocabulary and the seam between the API and whatever holds the timers.
//!
//! The API validates requests into these types and asks one [`Timers`] and one
//! [`Expirations`]; it never learns which backend answers. Two implement them, each with
//! a [`Backend`] the server holds: the local one (`crate::local`: its `timers` over the
//! worker thread's table, its delivery task) and the replicated one (`crate::cluster`).
//! `crate::backend` chooses, in one place.
//!
//! Both traits answer with [`TimerError`], whatever failed underneath (a full queue, a
//! stopped task, an unreachable database), so the API maps one error type to gRPC.

mod answer;
mod backend;
mod delivery_config;
mod error;
mod expiration;
mod page;
mod sink_store;
mod subscriber;
mod timer;
mod trace_context;

pub use answer::Answer;
pub use backend::{Backend, Expirations, GiveBack, Health, Hold, Stopping, Timers};
pub use delivery_config::{DeadReason, DeliveryConfig};
pub(crate) use error::with_causes;
pub use error::TimerError;
pub use expiration::{
    AckOutcome, Dead, DeadList, Delivered, DeliveryStream, Expiration, FiredRound, Handoff,
    RedriveOutcome, MAX_REDRIVE,
};
pub use page::{PageToken, PendingPage, PendingQuery, ALL_NAMESPACES};
pub(crate) use sink_store::too_many_sinks;
pub use sink_store::{SinkStore, StoredSinks, MAX_SINKS};
pub use subscriber::{zero_is_the_default, SubscribeOptions, SubscriberDefaults, SubscriberRules};
pub use timer::{Calendar, Due, NewTimer, Registered, Target, TimerId, TimerRef, TimerView};
pub use trace_context::{TraceContext, MAX_BAGGAGE_BYTES, MAX_TRACESTATE_BYTES};
