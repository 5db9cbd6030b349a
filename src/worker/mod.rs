//! The dedicated OS thread that owns all timer state.
//!
//! Commands arrive through [`lanes`] (one bounded ring per sending thread) and are applied
//! in batches (everything queued, up to `max_batch`, under one clock reading). Between batches the thread sleeps
//! until the wheel's next occupied slot or the next command, whichever comes first: an idle
//! wheel costs no CPU, unlike Netty's wheel which wakes every tick. Fired timers leave in
//! one batch per wake-up through a sink the caller provides.
//!
//! The state sits behind one lock that the thread holds only while it works, so that a
//! light command sent while the thread sleeps is applied on the sender's own thread
//! instead of waking it ([`combine`]): same order, same batch rules, no wake-up. Firing
//! stays this thread's.
//!
//! The thread is generic over [`TimerState`]: the service runs it over
//! [`table::TimerTable`] (ids, keys, namespaces); the core benchmark over a bare wheel.

mod combine;
pub(crate) mod lanes;
mod state;

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::clock::Clock;
use combine::{lock, Combiner, Core, SharedCore, Step};
use lanes::{LaneSender, Parking, TrySendError};
use prometheus_client::metrics::counter::Counter;
use state::Message;
pub use state::TimerState;

use crate::metrics::BusyTimer;

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    #[error("timer worker queue is full (capacity {capacity}); retry later")]
    Full { capacity: usize },
    #[error("timer worker has stopped")]
    Stopped,
}

/// A cheap, cloneable way to send commands to the worker thread.
pub struct WorkerHandle<C> {
    sender: LaneSender<Message<C>>,
    /// The worker's shared state, for [`Self::try_send_light`]; None when the worker
    /// applies every command itself (`WorkerConfig::combine_light_commands`).
    combiner: Option<Arc<dyn Combiner<C>>>,
}

impl<C> Clone for WorkerHandle<C> {
    fn clone(&self) -> Self {
        Self {
            sender: self.sender.clone(),
            combiner: self.combiner.clone(),
        }
    }
}

impl<C: Send + 'static> WorkerHandle<C> {
    /// Never blocks: a full queue is an error the caller turns into load shedding.
    pub(crate) fn try_send(&self, command: C) -> Result<(), SendError> {
        self.sender
            .try_send(Message::Command(command))
            .map_err(|error| self.send_error(error))
    }

    /// Like [`Self::try_send`], for a command cheap enough to apply on the calling thread:
    /// if the worker thread is asleep, the command (and whatever else is queued) is applied
    /// here instead of waking it (see [`combine`]), so its answer is ready on return.
    pub(crate) fn try_send_light(&self, command: C) -> Result<(), SendError> {
        self.sender
            .try_push(Message::Command(command))
            .map_err(|error| self.send_error(error))?;
        if self.sender.claim_parked() {
            let combined = self
                .combiner
                .as_ref()
                .is_some_and(|combiner| combiner.try_combine(&self.sender));
            if !combined {
                self.sender.unpark_receiver();
            }
        }
        Ok(())
    }

    fn send_error(&self, error: TrySendError<Message<C>>) -> SendError {
        match error {
            TrySendError::Full(_) => SendError::Full {
                capacity: self.sender.lane_capacity(),
            },
            TrySendError::Closed(_) => SendError::Stopped,
        }
    }

    /// Waits while the queue is full; for threads that may block (benchmarks, tools).
    ///
    /// It waits by yielding rather than parking: a parked sender would have the worker wake
    /// it (a system call) for every command it takes off a full queue, which halves the
    /// worker's throughput exactly when it is busiest.
    pub fn send(&self, command: C) -> Result<(), SendError> {
        self.send_message(Message::Command(command))
    }

    fn send_message(&self, mut message: Message<C>) -> Result<(), SendError> {
        let mut attempts = 0u32;
        loop {
            match self.sender.try_send(message) {
                Ok(()) => return Ok(()),
                Err(TrySendError::Full(returned)) => {
                    message = returned;
                    attempts += 1;
                    if attempts < 16 {
                        (0..64 << attempts.min(4)).for_each(|_| std::hint::spin_loop());
                    } else {
                        std::thread::yield_now();
                    }
                }
                Err(TrySendError::Closed(_)) => return Err(SendError::Stopped),
            }
        }
    }
}

#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Commands one sending thread may have waiting (its lane's size); beyond it
    /// `try_send` fails.
    pub(crate) queue_capacity: usize,
    /// Commands applied under one clock reading before timers are fired again.
    pub(crate) max_batch: usize,
    /// Where to count the time the thread spends working, if anywhere.
    pub(crate) busy_seconds: Option<Counter<f64, AtomicU64>>,
    /// Let senders apply light commands while the thread sleeps ([`combine`]).
    pub(crate) combine_light_commands: bool,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            queue_capacity: 16_384,
            max_batch: 4_096,
            busy_seconds: None,
            combine_light_commands: true,
        }
    }
}

/// The running worker thread. [`Worker::stop`] returns its state with the timers that
/// had not fired, so the caller can report or persist them.
pub struct Worker<S: TimerState> {
    handle: WorkerHandle<S::Command>,
    thread: JoinHandle<S>,
}

impl<S: TimerState> Worker<S> {
    pub fn spawn<K, F>(state: S, clock: K, config: WorkerConfig, sink: F) -> std::io::Result<Self>
    where
        K: Clock,
        F: FnMut(Vec<S::Fired>) + Send + 'static,
    {
        let combine = config.combine_light_commands;
        let (sender, receiver) = lanes::lanes(config.queue_capacity);
        let parking = receiver.parking();
        let core: Arc<SharedCore<S, K>> = Arc::new(Mutex::new(Some(Core::new(
            state,
            clock,
            receiver,
            config.max_batch.max(1),
            config.busy_seconds,
        ))));
        let thread = {
            let core = core.clone();
            std::thread::Builder::new()
                .name("tickd-wheel".into())
                .spawn(move || run(&core, &parking, sink))?
        };
        let combiner = combine.then_some(core as Arc<dyn Combiner<S::Command>>);
        let handle = WorkerHandle { sender, combiner };
        Ok(Self { handle, thread })
    }

    pub fn handle(&self) -> WorkerHandle<S::Command> {
        self.handle.clone()
    }

    /// Applies every command sent before this call, then stops the thread.
    ///
    /// # Panics
    /// If the worker thread panicked; [`Worker::try_stop`] reports it instead.
    pub fn stop(self) -> S {
        self.try_stop()
            .unwrap_or_else(|| panic!("the timer worker thread had panicked"))
    }

    /// Like [`Worker::stop`]; None if the thread had panicked (its state is gone).
    pub(crate) fn try_stop(self) -> Option<S> {
        // If the thread is already gone the join below reports it.
        let _ = self.handle.send_message(Message::Stop);
        self.thread.join().ok()
    }

    /// False once the thread has ended: after `stop`, or by a panic.
    pub fn is_running(&self) -> bool {
        !self.thread.is_finished()
    }
}

/// The worker thread: fire what is due, apply what is queued, and when there is neither,
/// poll briefly, then park until the next deadline or a sender's wake-up. Each round holds
/// the core's lock only while it works, so that a sender may combine while it sleeps.
fn run<S, K, F>(core: &SharedCore<S, K>, parking: &Parking<Message<S::Command>>, mut sink: F) -> S
where
    S: TimerState,
    K: Clock,
    F: FnMut(Vec<S::Fired>),
{
    let _drop_state_on_panic = DropStateOnPanic(core);
    loop {
        // Fired timers leave before the next batch is applied: a large batch must not hold
        // them back.
        let mut fired = Vec::new();
        fire_due(lock(core).as_mut().expect(STATE_GONE), &mut fired);
        if !fired.is_empty() {
            sink(fired);
        }
        let (step, max_batch) = {
            let mut guard = lock(core);
            let core = guard.as_mut().expect(STATE_GONE);
            let step = if core.stop_taken {
                Step::Stop
            } else {
                core.take_and_apply(usize::MAX)
            };
            (step, core.max_batch)
        };
        match step {
            // A full batch means senders are ahead: look again at once.
            Step::Applied(applied) if applied >= max_batch => continue,
            Step::Applied(_) | Step::Empty => {}
            Step::Stop | Step::Disconnected => return finish(core),
        }
        if poll_for_messages(core) {
            continue;
        }
        // The last look before parking comes after the announcement: a message sent before
        // it is seen here, and a sender after it finds the worker parked (and combines, or
        // wakes it).
        parking.announce();
        let wake_after = {
            let mut guard = lock(core);
            let core = guard.as_mut().expect(STATE_GONE);
            let now = core.clock.now();
            if core.stop_taken || core.has_due(now) || core.receiver.has_queued() {
                None
            } else {
                let next = core.state.next_expiration();
                core.wakes_at = next;
                Some(next.map(|due| Duration::from_nanos(due - now.monotonic)))
            }
        };
        match wake_after {
            Some(timeout) => parking.park(timeout),
            None => parking.cancel(),
        }
    }
}

/// Why the worker thread finds no state: a sending thread panicked while applying commands
/// and dropped it (the worker then ends by panicking too, which stops tickd).
const STATE_GONE: &str = "the timer state is gone: a panic while applying commands";

/// Drops the state if the worker thread unwinds, so that its lanes close: senders are then
/// refused at once instead of waiting on a thread that is gone.
struct DropStateOnPanic<'a, S: TimerState, K>(&'a SharedCore<S, K>);

impl<S: TimerState, K> Drop for DropStateOnPanic<'_, S, K> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            lock(self.0).take();
        }
    }
}

fn fire_due<S: TimerState, K: Clock>(core: &mut Core<S, K>, fired: &mut Vec<S::Fired>) {
    let now = core.clock.now();
    if core.has_due(now) {
        let _busy = core.busy_seconds.as_ref().map(BusyTimer::start);
        core.state.fire_due(now, fired);
    }
}

/// Applies whatever the other threads queued up to now, then takes the state out.
fn finish<S: TimerState, K: Clock>(core: &SharedCore<S, K>) -> S {
    let mut core = lock(core).take().expect(STATE_GONE);
    while let Step::Applied(_) | Step::Stop = core.take_and_apply(usize::MAX) {}
    core.state.end_batch();
    core.state
}

/// How long the worker polls for the next command before parking (kept short: on a small
/// machine the polling competes with the RPC threads for CPU). A sender pays for a
/// wake-up only when the worker is parked, so under a stream of commands polling
/// briefly saves a system call and a context switch per command; an idle worker still
/// parks after this long.
const POLL_BEFORE_PARKING: Duration = Duration::from_micros(10);

/// Spin-loop hints between two looks at the lanes (about 3 µs here: a hint is ~12 ns).
const POLL_BACKOFF_SPINS: u32 = 256;

/// Looks at the lanes for up to [`POLL_BEFORE_PARKING`]; true once something is queued or
/// a deadline is that close (go round: fire, take), false when it is time to park.
fn poll_for_messages<S: TimerState, K: Clock>(core: &SharedCore<S, K>) -> bool {
    let poll_until = Instant::now() + POLL_BEFORE_PARKING;
    let due_soon = lock(core).as_ref().is_some_and(|core| {
        let now = core.clock.now();
        core.state
            .next_expiration()
            .is_some_and(|due| due <= now.monotonic + POLL_BEFORE_PARKING.as_nanos() as u64)
    });
    if due_soon {
        return true;
    }
    while Instant::now() < poll_until {
        // Backing off before each look lets senders queue a batch first. A worker that
        // looked again at once would chase them through their ring, pulling each cache
        // line over while it is still being written: that, not the work, would set the
        // pace.
        (0..POLL_BACKOFF_SPINS).for_each(|_| std::hint::spin_loop());
        if lock(core)
            .as_mut()
            .is_some_and(|core| core.receiver.has_queued())
        {
            return true;
        }
    }
    false
}
