//! What the delivery task holds until the log has passed it (see
//! [`crate::local::store::watermark`]): deliveries that leave once their attempts are
//! written, answers sent once their settlements or attempts are durable, and the worker's
//! rounds, taken in once the batch that records them is durable. The task releases them
//! itself, on its own task, as the store's marks move; once the log has failed it drops
//! them all unsent, so that their callers see the store as unavailable.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc::OwnedPermit;
use tokio::sync::oneshot;

use super::state::Delivery;
use crate::domain::{AckOutcome, Delivered, FiredRound, Handoff, RedriveOutcome};
use crate::local::store::watermark::{self, Awaiting};

/// Deliveries that have their place in their subscribers' streams and leave once their
/// attempts are written.
pub(super) struct Sends {
    pub(super) places: Vec<(OwnedPermit<Delivered>, Delivered)>,
    /// Set once they have left (see [`crate::local::delivery::queue::InFlight::left`]).
    pub(super) left: Option<Arc<AtomicBool>>,
}

impl Sends {
    pub(super) fn deliver(self) {
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
pub(super) enum Answer {
    Acked(oneshot::Sender<AckOutcome>, AckOutcome),
    Redriven(oneshot::Sender<RedriveOutcome>, RedriveOutcome),
    Recorded(oneshot::Sender<()>),
}

impl Answer {
    /// A dropped receiver means the caller went away; there is nobody left to tell.
    pub(super) fn send(self) {
        match self {
            Answer::Acked(reply, outcome) => drop(reply.send(outcome)),
            Answer::Redriven(reply, outcome) => drop(reply.send(outcome)),
            Answer::Recorded(reply) => drop(reply.send(())),
        }
    }
}

/// The task's queues, one per kind of wait (each in the order of its batches).
#[derive(Default)]
pub(super) struct AwaitingLog {
    pub(super) sends: Awaiting<Sends>,
    /// Answers that wait for a batch to be written.
    pub(super) written: Awaiting<Answer>,
    /// Answers that wait for a batch to be durable.
    pub(super) durable: Awaiting<Answer>,
    pub(super) rounds: Awaiting<Vec<Handoff>>,
}

impl AwaitingLog {
    fn is_empty(&self) -> bool {
        self.sends.is_empty()
            && self.written.is_empty()
            && self.durable.is_empty()
            && self.rounds.is_empty()
    }
}

impl Delivery {
    /// Takes in the worker's rounds: at once without a log, else once the batch that
    /// records each is durable (see [`FiredRound`]).
    pub(super) fn fired(&mut self, rounds: Vec<FiredRound>) {
        for round in rounds {
            match round.logged_in {
                Some(batch) if self.marks.is_some() => {
                    self.awaiting.rounds.push(batch, round.handoffs)
                }
                _ => self.handoff(round.handoffs),
            }
        }
    }

    /// Releases what the store's marks have passed, in the order the store thread once ran
    /// it: what waited for the write, then what waited for the fsync. Returns how many
    /// things it released or dropped.
    pub(crate) fn release_passed(&mut self) -> usize {
        let Some(marks) = self.marks.as_mut() else {
            return 0;
        };
        watermark::debug_assert_off_the_store_thread();
        let marks = *marks.borrow_and_update();
        let mut released = 0;
        while let Some(sends) = self.awaiting.sends.pop_passed(marks.written) {
            sends.deliver();
            released += 1;
        }
        while let Some(answer) = self.awaiting.written.pop_passed(marks.written) {
            answer.send();
            released += 1;
        }
        while let Some(answer) = self.awaiting.durable.pop_passed(marks.durable) {
            answer.send();
            released += 1;
        }
        while let Some(round) = self.awaiting.rounds.pop_passed(marks.durable) {
            self.handoff(round);
            released += 1;
        }
        if marks.failed && !self.awaiting.is_empty() {
            self.awaiting = AwaitingLog::default();
            released += 1;
        }
        released
    }

    /// True while something waits for the log.
    pub(super) fn awaits_the_log(&self) -> bool {
        !self.awaiting.is_empty()
    }
}
