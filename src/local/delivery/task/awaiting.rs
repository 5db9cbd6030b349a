//! The delivery task's side of waiting for the log: the worker's rounds taken in once
//! their batch is durable, and what `LogWaits` holds released as the store's marks move.

use super::state::Delivery;
use crate::domain::FiredRound;
use crate::local::delivery::log_waits::LogWaits;

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

    /// Releases what the store's marks have passed (see [`crate::local::delivery::log_waits::LogWaits::release`]), then
    /// takes in the rounds now durable. Returns how many things it released or dropped.
    pub(crate) fn release_passed(&mut self) -> usize {
        let Some(marks) = self.marks.as_mut().filter(|_| !self.awaiting.is_empty()) else {
            return 0;
        };
        let marks = marks.current();
        let mut rounds = Vec::new();
        let released = self.awaiting.release(marks, &mut rounds);
        for round in rounds {
            self.handoff(round);
        }
        released
    }

    /// The store thread has ended: what its last marks passed is released, the rest
    /// dropped unsent, so that its callers see the store as unavailable (as after a
    /// published failure) instead of waiting for marks that will never move.
    pub(super) fn store_ended(&mut self) {
        self.release_passed();
        self.awaiting = LogWaits::default();
    }

    /// True while something waits for the log.
    pub(super) fn awaits_the_log(&self) -> bool {
        !self.awaiting.is_empty()
    }
}
