//! What the API's local backend asks of the worker thread: one message per call, each
//! carrying the channel its answer goes back on. Only `worker::local` builds them, and only
//! the table reads them.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::oneshot;

use crate::domain::{
    Due, NewTimer, PendingPage, PendingQuery, Registered, TimerError, TimerRef, TimerView,
    TraceContext,
};

type Reply<T> = oneshot::Sender<T>;

/// What the API asks of the worker. Each carries the channel its answer goes back on.
#[derive(Debug)]
pub enum Command {
    Register {
        timers: Vec<NewTimer>,
        reply: Reply<Vec<Result<Registered, TimerError>>>,
    },
    Cancel {
        timer: TimerRef,
        reply: Reply<Result<bool, TimerError>>,
    },
    Get {
        timer: TimerRef,
        reply: Reply<Result<TimerView, TimerError>>,
    },
    Touch {
        timer: TimerRef,
        ttl: Option<Duration>,
        reply: Reply<Result<TimerView, TimerError>>,
    },
    Pending {
        query: PendingQuery,
        reply: Reply<Result<PendingPage, TimerError>>,
    },
    /// Boxed: the rarest command would otherwise make every command in the queue larger.
    Reschedule(Box<Reschedule>),
}

impl Command {
    /// Timers in a registration that may still be applied on the caller's thread.
    const LIGHT_REGISTRATION: usize = 16;

    /// Cheap enough to apply on the sending thread while the worker sleeps (see
    /// `worker::combine`): everything but listings and large registrations, whose work
    /// would stall the caller's runtime thread (and every connection it serves).
    pub(crate) fn is_light(&self) -> bool {
        match self {
            Command::Register { timers, .. } => timers.len() <= Self::LIGHT_REGISTRATION,
            Command::Pending { .. } => false,
            Command::Cancel { .. }
            | Command::Get { .. }
            | Command::Touch { .. }
            | Command::Reschedule(_) => true,
        }
    }
}

/// Moves a pending timer (see [`crate::domain::Timers::reschedule`]).
#[derive(Debug)]
pub struct Reschedule {
    pub timer: TimerRef,
    pub due: Due,
    pub payload: Option<Bytes>,
    /// Replaces the timer's trace context when the call carried one.
    pub trace: Option<Arc<TraceContext>>,
    pub reply: Reply<Result<TimerView, TimerError>>,
}

// Every command crosses the worker's queue by value: keep them small.
const _: () = assert!(std::mem::size_of::<Command>() <= 80);
