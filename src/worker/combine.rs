//! The worker's state behind one lock, so that a sending thread can apply its own command
//! while the worker thread sleeps ("combining"), instead of waking it.
//!
//! Why: waking a parked thread is a system call and two context switches, and the answer
//! then has to wake the caller's task from a foreign thread; together they cost more than
//! the command itself (`benches/profile.sh` shows a NewTimeout spending more in them than in
//! the table). A sender that finds the worker parked claims it ([`LaneSender::claim_parked`]),
//! takes the lock, and runs exactly what the worker would have run: take what is queued,
//! apply it under one clock reading, end the batch. Its own answer is then ready before its
//! task ever waits.
//!
//! What stays the worker thread's: firing (a combining sender that finds anything due
//! wakes the worker instead, so due timers still fire before later commands apply, as on
//! the worker), large batches (only light commands combine: a sender must not stall its
//! runtime thread), stopping, and waking up for a deadline that a combined command made
//! earlier than the one the worker sleeps until (it is woken to plan again). The lock is
//! only ever tried by senders; one that finds it taken wakes the worker, so a sender never
//! waits behind a firing.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, MutexGuard};

use prometheus_client::metrics::counter::Counter;

use super::lanes::{LaneReceiver, LaneSender, Taken};
use super::state::{Message, TimerState};
use crate::clock::{Clock, Now};
use crate::metrics::BusyTimer;

/// Messages a combining sender takes at most; more queued than this is the worker's work.
const COMBINE_BUDGET: usize = 64;

/// Everything the worker thread owns between two wake-ups.
pub(super) struct Core<S: TimerState, K> {
    pub(super) state: S,
    pub(super) clock: K,
    pub(super) receiver: LaneReceiver<Message<S::Command>>,
    batch: Vec<Message<S::Command>>,
    pub(super) max_batch: usize,
    pub(super) busy_seconds: Option<Counter<f64, AtomicU64>>,
    /// While the worker thread is parked: the monotonic time it wakes by itself (None:
    /// only when woken). A combined command due earlier must wake it.
    pub(super) wakes_at: Option<u64>,
    /// A combining sender took the stop message: the worker must stop when it wakes.
    pub(super) stop_taken: bool,
}

/// What one look at the lanes did.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// Applied this many messages.
    Applied(usize),
    Empty,
    /// The stop message came: applied everything before it.
    Stop,
    /// Every sender is gone.
    Disconnected,
}

impl<S: TimerState, K: Clock> Core<S, K> {
    pub(super) fn new(
        state: S,
        clock: K,
        receiver: LaneReceiver<Message<S::Command>>,
        max_batch: usize,
        busy_seconds: Option<Counter<f64, AtomicU64>>,
    ) -> Self {
        Self {
            state,
            clock,
            receiver,
            batch: Vec::with_capacity(max_batch),
            max_batch,
            busy_seconds,
            wakes_at: None,
            stop_taken: false,
        }
    }

    /// Takes up to `budget` queued messages (at most `max_batch`) and applies them under one
    /// clock reading, then ends the batch.
    pub(super) fn take_and_apply(&mut self, budget: usize) -> Step {
        self.take_and_apply_at(budget, None)
    }

    /// The same, under the reading `now` if the caller has just taken one.
    fn take_and_apply_at(&mut self, budget: usize, now: Option<Now>) -> Step {
        let budget = budget.min(self.max_batch);
        match self.receiver.take(&mut self.batch, budget) {
            Taken::Some => {}
            Taken::Empty => return Step::Empty,
            Taken::Disconnected => return Step::Disconnected,
        }
        let now = now.unwrap_or_else(|| self.clock.now());
        let _busy = self.busy_seconds.as_ref().map(BusyTimer::start);
        let applied = self.batch.len();
        let mut stop = false;
        for message in self.batch.drain(..) {
            match message {
                Message::Command(command) => self.state.apply(command, now),
                Message::Stop => stop = true,
            }
        }
        self.state.end_batch();
        if stop {
            Step::Stop
        } else {
            Step::Applied(applied)
        }
    }

    /// True if a timer is due at `now`: the worker thread's turn to fire.
    pub(super) fn has_due(&self, now: Now) -> bool {
        self.state
            .next_expiration()
            .is_some_and(|due| due <= now.monotonic)
    }

    /// True if the state's next deadline is earlier than the parked worker will wake.
    fn due_before_wake(&self) -> bool {
        match (self.state.next_expiration(), self.wakes_at) {
            (Some(due), Some(wakes_at)) => due < wakes_at,
            (Some(_), None) => true,
            (None, _) => false,
        }
    }

    /// Runs the parked worker's work on the calling (sending) thread, as its claimant (see
    /// the module docs). Returns false when the worker must be woken to finish: something
    /// is due, more is queued than a sender should apply, the stop message came, or a
    /// deadline now precedes the worker's wake-up. The claim is ended either way: by
    /// re-arming the parked flag here, or by the caller waking the worker.
    fn combine(&mut self, lanes: &LaneSender<Message<S::Command>>) -> bool {
        loop {
            // One reading serves both: whether the worker must fire, and the batch.
            let now = self.clock.now();
            if self.has_due(now) {
                return false;
            }
            match self.take_and_apply_at(COMBINE_BUDGET, Some(now)) {
                Step::Applied(applied) if applied < COMBINE_BUDGET => {}
                Step::Applied(_) => return false,
                Step::Stop => {
                    self.stop_taken = true;
                    return false;
                }
                // Only the worker thread sees every sender gone; a sender is one.
                Step::Empty | Step::Disconnected => {}
            }
            if self.due_before_wake() {
                return false;
            }
            // The worker sleeps on. As it does before parking: announce, then look once
            // more, since a sender that found the flag cleared left its message to us.
            lanes.rearm_parked();
            if !self.receiver.has_queued() {
                return true;
            }
            // Something came meanwhile: take the claim back if no one else did (if one
            // did, it will find the lock taken and wake the worker), and go round again.
            if !lanes.claim_parked() {
                return true;
            }
        }
    }
}

/// The worker's state as the worker thread and the combining senders share it. `None`
/// once the worker thread has stopped and taken the state back.
pub(super) type SharedCore<S, K> = Mutex<Option<Core<S, K>>>;

/// Locks the core. Poisoning is not checked here: whoever panics while holding the lock
/// also drops the state (see [`Combiner::try_combine`] and the worker's `DropStateOnPanic`),
/// and a missing state is what every holder checks.
pub(super) fn lock<S: TimerState, K>(
    core: &SharedCore<S, K>,
) -> MutexGuard<'_, Option<Core<S, K>>> {
    core.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A sender's way into the shared core, erased of the state's and clock's types so that
/// [`crate::worker::WorkerHandle`] stays generic over the command alone.
pub(super) trait Combiner<C>: Send + Sync {
    /// After queueing a message and claiming the parked worker: applies what is queued
    /// here, or returns false if the worker must be woken instead.
    fn try_combine(&self, lanes: &LaneSender<Message<C>>) -> bool;
}

impl<S, K> Combiner<S::Command> for SharedCore<S, K>
where
    S: TimerState,
    K: Clock,
{
    fn try_combine(&self, lanes: &LaneSender<Message<S::Command>>) -> bool {
        let combined = std::panic::catch_unwind(AssertUnwindSafe(|| {
            let Ok(mut guard) = self.try_lock() else {
                return false;
            };
            guard.as_mut().is_some_and(|core| core.combine(lanes))
        }));
        combined.unwrap_or_else(|panic| {
            // The state may be half-changed. Drop it, as a panic on the worker thread
            // does: the lanes close (later calls are refused at once, queued ones see their
            // reply channel dropped), and the woken worker finds no state and ends, which
            // stops tickd.
            lock(self).take();
            lanes.unpark_receiver();
            std::panic::resume_unwind(panic)
        })
    }
}

#[cfg(test)]
mod tests {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    use std::sync::mpsc;
    use std::thread::ThreadId;
    use std::time::Duration;

    use super::super::{TimerState, Worker, WorkerConfig, WorkerHandle};
    use crate::clock::{Now, SystemClock};

    /// Records what it applied, answers with the thread that applied it, and fires plain
    /// deadlines.
    #[derive(Default)]
    struct Recorder {
        applied: Vec<(u64, u64)>,
        deadlines: BinaryHeap<Reverse<u64>>,
    }

    enum Probe {
        Record {
            sender: u64,
            sequence: u64,
            applied_on: Option<mpsc::Sender<ThreadId>>,
        },
        /// A deadline this far (ns) after the clock's reading when applied.
        Arm(u64),
        Panic,
    }

    impl TimerState for Recorder {
        type Command = Probe;
        type Fired = u64;

        fn apply(&mut self, command: Probe, now: Now) {
            match command {
                Probe::Record {
                    sender,
                    sequence,
                    applied_on,
                } => {
                    self.applied.push((sender, sequence));
                    if let Some(reply) = applied_on {
                        let _ = reply.send(std::thread::current().id());
                    }
                }
                Probe::Arm(after) => self.deadlines.push(Reverse(now.monotonic + after)),
                Probe::Panic => panic!("a probe asked for a panic"),
            }
        }

        fn fire_due(&mut self, now: Now, fired: &mut Vec<u64>) {
            while let Some(&Reverse(due)) = self.deadlines.peek() {
                if due > now.monotonic {
                    break;
                }
                self.deadlines.pop();
                fired.push(due);
            }
        }

        fn next_expiration(&self) -> Option<u64> {
            self.deadlines.peek().map(|Reverse(due)| *due)
        }
    }

    fn spawn() -> (Worker<Recorder>, mpsc::Receiver<Vec<u64>>) {
        let (fired, fired_out) = mpsc::channel();
        let worker = Worker::spawn(
            Recorder::default(),
            SystemClock::new(),
            WorkerConfig::default(),
            move |batch| {
                let _ = fired.send(batch);
            },
        )
        .expect("spawn worker");
        (worker, fired_out)
    }

    /// Waits (an event, not a duration) until the worker thread has parked.
    fn until_parked(handle: &WorkerHandle<Probe>) {
        while !handle.sender.receiver_parked() {
            std::thread::yield_now();
        }
    }

    #[test]
    fn a_light_command_sent_while_the_worker_sleeps_is_applied_on_the_sending_thread() {
        let (worker, _fired) = spawn();
        let handle = worker.handle();
        until_parked(&handle);
        let (applied_on, thread) = mpsc::channel();
        handle
            .try_send_light(Probe::Record {
                sender: 0,
                sequence: 0,
                applied_on: Some(applied_on),
            })
            .expect("queued");
        // Applied before try_send_light returned: the answer is already there.
        assert_eq!(thread.try_recv(), Ok(std::thread::current().id()));
        assert!(handle.sender.receiver_parked(), "the worker sleeps on");
        assert_eq!(worker.stop().applied, [(0, 0)]);
    }

    #[test]
    fn a_combined_deadline_before_the_workers_wake_up_wakes_it() {
        let (worker, fired) = spawn();
        let handle = worker.handle();
        // Parked with nothing to fire: it would sleep until woken.
        until_parked(&handle);
        handle
            .try_send_light(Probe::Arm(Duration::from_millis(1).as_nanos() as u64))
            .expect("queued");
        // A bound for a failure, not a timing assertion: without the wake-up the worker
        // never fires.
        let batch = fired
            .recv_timeout(Duration::from_secs(30))
            .expect("the deadline fired");
        assert_eq!(batch.len(), 1);
        worker.stop();
    }

    #[test]
    fn two_senders_meeting_a_sleeping_worker_are_both_applied() {
        // One claims the parked worker and combines; the other sends while it does, finds
        // the flag cleared and leaves its message to the claim. Nothing else is sent after
        // them, so a message the claimant did not look for stays queued for good.
        let (worker, _fired) = spawn();
        let handle = worker.handle();
        for trial in 0..2_000u64 {
            until_parked(&handle);
            let start = std::sync::Arc::new(std::sync::Barrier::new(2));
            let senders: Vec<_> = (0..2u64)
                .map(|sender| {
                    let (handle, start) = (handle.clone(), start.clone());
                    std::thread::spawn(move || {
                        let (applied_on, applied) = mpsc::channel();
                        start.wait();
                        handle
                            .try_send_light(Probe::Record {
                                sender,
                                sequence: trial,
                                applied_on: Some(applied_on),
                            })
                            .expect("queued");
                        // A bound for a failure: a lost message is never applied.
                        applied.recv_timeout(Duration::from_secs(10)).is_ok()
                    })
                })
                .collect();
            for sender in senders {
                assert!(
                    sender.join().expect("sender"),
                    "trial {trial}: a message was left unseen"
                );
            }
        }
        assert_eq!(worker.stop().applied.len(), 4_000);
    }

    #[test]
    fn a_panic_while_combining_ends_the_worker_and_refuses_later_sends() {
        let (worker, _fired) = spawn();
        let handle = worker.handle();
        until_parked(&handle);
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            handle.try_send_light(Probe::Panic)
        }));
        assert!(panicked.is_err(), "the panic reaches the sender");
        // The worker, woken, finds the state gone and ends as if it had panicked itself.
        assert!(worker.try_stop().is_none());
        assert!(matches!(
            handle.try_send_light(Probe::Arm(1)),
            Err(super::super::SendError::Stopped)
        ));
    }

    #[test]
    fn senders_racing_a_parking_worker_lose_and_reorder_nothing() {
        const SENDERS: u64 = 4;
        const EACH: u64 = 20_000;
        let (worker, _fired) = spawn();
        let senders: Vec<_> = (0..SENDERS)
            .map(|sender| {
                let handle = worker.handle();
                std::thread::spawn(move || {
                    for sequence in 0..EACH {
                        // Every so often (and last) the sender waits for its message to be
                        // applied: one left unseen in a lane by a lost wake-up would never
                        // be (the worker has nothing to wake for), and the wait fails.
                        let awaited = sequence % 1_000 == 999 || sequence + 1 == EACH;
                        let (applied_on, applied) = mpsc::channel();
                        let probe = || Probe::Record {
                            sender,
                            sequence,
                            applied_on: awaited.then(|| applied_on.clone()),
                        };
                        while let Err(error) = handle.try_send_light(probe()) {
                            assert!(
                                matches!(error, super::super::SendError::Full { .. }),
                                "{error}"
                            );
                            std::thread::yield_now();
                        }
                        if awaited {
                            applied
                                .recv_timeout(Duration::from_secs(30))
                                .expect("applied without a wake-up being lost");
                        }
                        // Now and then let the worker run dry and park, so that sends
                        // meet it polling, parking, parked and waking.
                        if sequence % 97 == 0 {
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        senders
            .into_iter()
            .for_each(|sender| sender.join().expect("sender"));
        let applied = worker.stop().applied;
        assert_eq!(applied.len() as u64, SENDERS * EACH);
        for sender in 0..SENDERS {
            let own: Vec<u64> = applied
                .iter()
                .filter(|(from, _)| *from == sender)
                .map(|(_, sequence)| *sequence)
                .collect();
            assert_eq!(own, (0..EACH).collect::<Vec<_>>(), "sender {sender}");
        }
    }
}
