//! What the delivery task holds until the log has passed it (see
//! [`crate::local::store::watermark`]): deliveries that leave once their attempts are
//! written, answers sent once their settlements or attempts are durable, and the worker's
//! rounds, taken in once the batch that records them is durable. The task releases them
//! itself ([`task`](super::task)'s `awaiting`), on its own task, as the store's marks
//! move; once the log has failed they are all dropped unsent, so that their callers see
//! the store as unavailable.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc::OwnedPermit;
use tokio::sync::oneshot;

use crate::domain::{AckOutcome, Delivered, Handoff, RedriveOutcome};
use crate::local::store::watermark::{self, Awaiting, Watermark};

/// Deliveries that have their place in their subscribers' streams and leave once their
/// attempts are written.
pub(crate) struct Sends {
    pub(crate) places: Vec<(OwnedPermit<Delivered>, Delivered)>,
    /// Set once they have left (see [`crate::local::delivery::queue::InFlight::left`]).
    pub(crate) left: Option<Arc<AtomicBool>>,
}

impl Sends {
    pub(crate) fn deliver(self) {
        // Marked before the first send: a stream that takes one while the rest are sent
        // must never see it counted as not reached (and refunded).
        if let Some(left) = self.left {
            left.store(true, Ordering::Release);
        }
        for (place, delivered) in self.places {
            // A stream closed meanwhile drops it; its Unsubscribe takes it back.
            place.send(delivered);
        }
    }
}

/// An answer sent once what it reports is durable (or, for `Recorded`, written).
pub(crate) enum Answer {
    Acked(oneshot::Sender<AckOutcome>, AckOutcome),
    Redriven(oneshot::Sender<RedriveOutcome>, RedriveOutcome),
    Recorded(oneshot::Sender<()>),
}

impl Answer {
    /// A dropped receiver means the caller went away; there is nobody left to tell.
    pub(crate) fn send(self) {
        match self {
            Answer::Acked(reply, outcome) => drop(reply.send(outcome)),
            Answer::Redriven(reply, outcome) => drop(reply.send(outcome)),
            Answer::Recorded(reply) => drop(reply.send(())),
        }
    }
}

/// The task's queues, one per kind of wait (each in the order of its batches).
#[derive(Default)]
pub(crate) struct LogWaits {
    pub(crate) sends: Awaiting<Sends>,
    /// Answers that wait for a batch to be written.
    pub(crate) written: Awaiting<Answer>,
    /// Answers that wait for a batch to be durable.
    pub(crate) durable: Awaiting<Answer>,
    pub(crate) rounds: Awaiting<Vec<Handoff>>,
}

impl LogWaits {
    pub(crate) fn is_empty(&self) -> bool {
        self.sends.is_empty()
            && self.written.is_empty()
            && self.durable.is_empty()
            && self.rounds.is_empty()
    }

    /// Sends what `marks` have passed, in the order the store thread once ran it: the
    /// deliveries and answers that waited for the write, then the answers that waited
    /// for the fsync; moves the rounds whose batch is durable to `rounds`, for the task to
    /// take in; and once the log has failed, drops all that is left. Returns how many
    /// things it released or dropped.
    pub(crate) fn release(&mut self, marks: Watermark, rounds: &mut Vec<Vec<Handoff>>) -> usize {
        watermark::debug_assert_off_the_store_thread();
        let mut released = 0;
        while let Some(sends) = self.sends.pop_passed(marks.written) {
            sends.deliver();
            released += 1;
        }
        while let Some(answer) = self.written.pop_passed(marks.written) {
            answer.send();
            released += 1;
        }
        while let Some(answer) = self.durable.pop_passed(marks.durable) {
            answer.send();
            released += 1;
        }
        while let Some(round) = self.rounds.pop_passed(marks.durable) {
            rounds.push(round);
            released += 1;
        }
        if marks.failed && !self.is_empty() {
            *self = Self::default();
            released += 1;
        }
        released
    }
}
