//! The contract between the worker thread and what it drives: the [`TimerState`] it owns
//! (the local backend's timer table, a replica's schedule, a bare wheel in the core
//! benchmark), and the messages its lanes carry.

use crate::clock::Now;

/// The state a worker thread owns and drives: a wheel plus whatever the commands need.
pub trait TimerState: Send + 'static {
    type Command: Send + 'static;
    type Fired: Send + 'static;
    /// Applies one command; `now` is the reading taken for the whole batch.
    fn apply(&mut self, command: Self::Command, now: Now);
    /// Moves everything due at `now` into `fired`.
    fn fire_due(&mut self, now: Now, fired: &mut Vec<Self::Fired>);
    /// The monotonic time at which `fire_due` next has work, if any.
    fn next_expiration(&self) -> Option<u64>;
    /// Called after each batch of commands: the place to hand off what the batch produced.
    fn end_batch(&mut self) {}
}

/// What travels a worker's lanes: a command, or the word to stop.
pub(super) enum Message<C> {
    Command(C),
    Stop,
}
