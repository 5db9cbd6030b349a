//! The dedicated OS thread that owns all timer state.
//!
//! Commands arrive through [`lanes`] (one bounded ring per sending thread) and are applied
//! in batches (everything queued, up to `max_batch`, under one clock reading). Between batches the thread sleeps
//! until the wheel's next occupied slot or the next command, whichever comes first: an idle
//! wheel costs no CPU, unlike Netty's wheel which wakes every tick. Fired timers leave in
//! one batch per wake-up through a sink the caller provides.
//!
//! The thread is generic over [`TimerState`]: the service runs it over
//! [`table::TimerTable`] (ids, keys, namespaces); the core benchmark over a bare wheel.

pub mod clock;
pub mod command;
pub(crate) mod journal;
pub(crate) mod lanes;
pub(crate) mod local;
pub(crate) mod namespaces;
mod page;
pub mod table;

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use std::sync::atomic::AtomicU64;

use clock::{Clock, Now};
use lanes::{LaneReceiver, LaneSender, Taken, TrySendError};
use prometheus_client::metrics::counter::Counter;

use crate::metrics::BusyTimer;

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

enum Message<C> {
    Command(C),
    Stop,
}

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
}

impl<C> Clone for WorkerHandle<C> {
    fn clone(&self) -> Self {
        Self {
            sender: self.sender.clone(),
        }
    }
}

impl<C: Send + 'static> WorkerHandle<C> {
    /// Never blocks: a full queue is an error the caller turns into load shedding.
    pub(crate) fn try_send(&self, command: C) -> Result<(), SendError> {
        self.sender
            .try_send(Message::Command(command))
            .map_err(|error| match error {
                TrySendError::Full(_) => SendError::Full {
                    capacity: self.sender.lane_capacity(),
                },
                TrySendError::Closed(_) => SendError::Stopped,
            })
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
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            queue_capacity: 16_384,
            max_batch: 4_096,
            busy_seconds: None,
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
        let (sender, receiver) = lanes::lanes(config.queue_capacity);
        let thread = std::thread::Builder::new()
            .name("tickd-wheel".into())
            .spawn(move || run(state, clock, receiver, config, sink))?;
        let handle = WorkerHandle { sender };
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

fn run<S, K, F>(
    mut state: S,
    clock: K,
    mut receiver: LaneReceiver<Message<S::Command>>,
    config: WorkerConfig,
    mut sink: F,
) -> S
where
    S: TimerState,
    K: Clock,
    F: FnMut(Vec<S::Fired>),
{
    let (max_batch, busy_seconds) = (config.max_batch.max(1), config.busy_seconds);
    let mut now = clock.now();
    let mut batch = Vec::with_capacity(max_batch);
    let mut applied_last_time = 0;
    loop {
        let busy = busy_seconds.as_ref().map(BusyTimer::start);
        if state
            .next_expiration()
            .is_some_and(|due| due <= now.monotonic)
        {
            let mut fired = Vec::new();
            state.fire_due(now, &mut fired);
            if !fired.is_empty() {
                sink(fired);
            }
        }
        drop(busy);
        let full_last_time = applied_last_time == max_batch;
        match wait_for_messages(
            &state,
            &mut receiver,
            now,
            &mut batch,
            max_batch,
            full_last_time,
        ) {
            Taken::Some => {}
            Taken::Empty => {
                now = clock.now();
                continue;
            }
            Taken::Disconnected => return state,
        }
        // One reading serves the whole batch and the firing that follows it.
        now = clock.now();
        let _busy = busy_seconds.as_ref().map(BusyTimer::start);
        applied_last_time = batch.len();
        let mut stopping = false;
        for message in batch.drain(..) {
            match message {
                Message::Command(command) => state.apply(command, now),
                Message::Stop => stopping = true,
            }
        }
        if stopping {
            // Whatever the other threads had queued by now is applied too.
            while receiver.take(&mut batch, usize::MAX) == Taken::Some {
                for message in batch.drain(..) {
                    if let Message::Command(command) = message {
                        state.apply(command, now);
                    }
                }
            }
            state.end_batch();
            return state;
        }
        state.end_batch();
    }
}

/// How long the worker polls for the next command before parking (kept short: on a small
/// machine the polling competes with the RPC threads for CPU). A sender pays for a
/// wake-up only when the worker is parked, so under a stream of commands polling
/// briefly saves a system call and a context switch per command; an idle worker still
/// parks after this long.
const POLL_BEFORE_PARKING: Duration = Duration::from_micros(10);

/// Spin-loop hints between two looks at the lanes (about 3 µs here: a hint is ~12 ns).
const POLL_BACKOFF_SPINS: u32 = 256;

/// Sleeps until the next commands or the next due slot, whichever is first; up to
/// `max_batch` commands land in `batch`. `Taken::Empty` means: look at the wheel again.
fn wait_for_messages<S: TimerState>(
    state: &S,
    receiver: &mut LaneReceiver<Message<S::Command>>,
    now: Now,
    batch: &mut Vec<Message<S::Command>>,
    max_batch: usize,
    mut full_last_time: bool,
) -> Taken {
    let poll_until = Instant::now() + POLL_BEFORE_PARKING;
    let next_due = state.next_expiration();
    let due_soon =
        next_due.is_some_and(|due| due <= now.monotonic + POLL_BEFORE_PARKING.as_nanos() as u64);
    while !due_soon && Instant::now() < poll_until {
        // Backing off before each look lets senders queue a batch first. A worker that
        // looked again at once would chase them through their ring, pulling each cache
        // line over while it is still being written: that, not the work, would set the
        // pace. A full batch last time means senders are ahead: no need to wait.
        if !full_last_time {
            (0..POLL_BACKOFF_SPINS).for_each(|_| std::hint::spin_loop());
        }
        match receiver.take(batch, max_batch) {
            Taken::Empty => full_last_time = false,
            taken => return taken,
        }
    }
    match next_due {
        None => receiver.wait(batch, max_batch, None),
        Some(due) if due <= now.monotonic => receiver.take(batch, max_batch),
        Some(due) => {
            let timeout = Duration::from_nanos(due - now.monotonic);
            receiver.wait(batch, max_batch, Some(timeout))
        }
    }
}
