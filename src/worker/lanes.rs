//! The way commands reach the worker thread: one single-producer ring ("lane") per sending
//! thread, all read by the worker.
//!
//! Why not one MPSC channel: every message through a shared channel moves its slot's cache
//! line and the channel's head and tail counters between cores, about 30 ns a message
//! before the worker has done anything, and that caps every command at the channel's rate.
//! A single-producer ring ([`rtrb`]) lets each side cache the other's position and touch
//! shared lines only when the ring looks full or empty, so a sender pays a few
//! nanoseconds. Each thread gets its own lane on its first send (kept in a thread-local),
//! so commands from one thread stay in order; commands from different threads were never
//! ordered anyway. The worker parks only after finding every lane empty, and a sender
//! wakes it only if it is parked.
//!
//! A sender that finds the receiver parked may instead *claim* it ([`LaneSender::claim_parked`]):
//! it then owes the queued messages a taker, either itself (the worker's combining, see
//! `worker::combine`) or the woken receiver. Whoever holds the claim ends it by re-arming
//! the parked flag and looking at the lanes once more, as the receiver does before it
//! parks, so that no message is left behind unseen.

use std::any::Any;
use std::cell::RefCell;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::Thread;
use std::time::Duration;

use rtrb::{Consumer, Producer, RingBuffer};

/// Why [`LaneSender::try_send`] gave the message back.
#[derive(Debug)]
pub(crate) enum TrySendError<M> {
    /// This thread's lane already holds `capacity` messages.
    Full(M),
    /// The receiver is gone.
    Closed(M),
}

/// What [`LaneReceiver::take`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Taken {
    /// Messages were moved into the caller's vector.
    Some,
    Empty,
    /// Empty, and every sender is gone: nothing will ever come.
    Disconnected,
}

/// Distinguishes receivers in each thread's table of lanes.
static NEXT_RECEIVER_ID: AtomicU64 = AtomicU64::new(0);

struct Shared<M> {
    id: u64,
    lane_capacity: usize,
    /// Lanes opened by senders and not yet picked up by the receiver.
    opened: Mutex<Vec<Consumer<M>>>,
    lanes_opened: AtomicBool,
    /// Set by the receiver just before it parks, cleared by whoever wakes it.
    parked: AtomicBool,
    /// The receiver is gone: sends fail, and threads drop their lanes to it.
    closed: Arc<AtomicBool>,
    senders: AtomicUsize,
    receiver_thread: OnceLock<Thread>,
}

impl<M> Shared<M> {
    /// Called after a send. The fence pairs with the one in [`Parking::announce`]: either
    /// the receiver's last look before parking saw the message, or this load sees that it
    /// is parking.
    fn wake_receiver(&self) {
        if self.claim_parked() {
            self.unpark_receiver();
        }
    }

    /// True if the receiver was parked (or about to park) and this caller is the one that
    /// cleared the flag: the messages queued so far are then this caller's to see taken.
    fn claim_parked(&self) -> bool {
        fence(Ordering::SeqCst);
        self.parked.load(Ordering::Relaxed) && self.parked.swap(false, Ordering::AcqRel)
    }

    fn unpark_receiver(&self) {
        if let Some(thread) = self.receiver_thread.get() {
            thread.unpark();
        }
    }
}

/// One thread's lane to one receiver, type-erased so that one thread-local can hold lanes
/// of any message type.
struct ThreadLane {
    receiver_id: u64,
    receiver_closed: Arc<AtomicBool>,
    producer: Box<dyn Any>,
}

thread_local! {
    static LANES: RefCell<Vec<ThreadLane>> = const { RefCell::new(Vec::new()) };
}

/// `lane_capacity`: messages one thread may have waiting; beyond it `try_send` fails.
pub(crate) fn lanes<M: Send + 'static>(lane_capacity: usize) -> (LaneSender<M>, LaneReceiver<M>) {
    let shared = Arc::new(Shared {
        id: NEXT_RECEIVER_ID.fetch_add(1, Ordering::Relaxed),
        lane_capacity: lane_capacity.max(1),
        opened: Mutex::new(Vec::new()),
        lanes_opened: AtomicBool::new(false),
        parked: AtomicBool::new(false),
        closed: Arc::new(AtomicBool::new(false)),
        senders: AtomicUsize::new(1),
        receiver_thread: OnceLock::new(),
    });
    let receiver = LaneReceiver {
        shared: shared.clone(),
        lanes: Vec::new(),
        next_lane: 0,
    };
    (LaneSender { shared }, receiver)
}

/// A cloneable way to send; each thread that uses it gets its own lane.
pub(crate) struct LaneSender<M> {
    shared: Arc<Shared<M>>,
}

impl<M> Clone for LaneSender<M> {
    fn clone(&self) -> Self {
        self.shared.senders.fetch_add(1, Ordering::Relaxed);
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<M> Drop for LaneSender<M> {
    fn drop(&mut self) {
        if self.shared.senders.fetch_sub(1, Ordering::AcqRel) == 1 {
            // The last sender: the receiver must notice even if it is parked (an unpark
            // before it parks makes that park return at once).
            if let Some(thread) = self.shared.receiver_thread.get() {
                thread.unpark();
            }
        }
    }
}

impl<M: Send + 'static> LaneSender<M> {
    /// Queues the message on this thread's lane and wakes the receiver if it is parked.
    pub(crate) fn try_send(&self, message: M) -> Result<(), TrySendError<M>> {
        self.try_push(message)?;
        self.shared.wake_receiver();
        Ok(())
    }

    /// Claims a parked receiver after [`Self::try_push`]; see [`Shared::claim_parked`].
    pub(crate) fn claim_parked(&self) -> bool {
        self.shared.claim_parked()
    }

    /// Ends a claim by waking the receiver: it takes what is queued.
    pub(crate) fn unpark_receiver(&self) {
        self.shared.unpark_receiver();
    }

    /// Ends a claim without waking the receiver: marks it parked again. The caller must
    /// look at the lanes once more after this (the fence pairs with [`Self::claim_parked`]),
    /// since a sender that found the flag cleared meanwhile left its message to the claim.
    pub(crate) fn rearm_parked(&self) {
        self.shared.parked.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// True while the receiver is parked (or announced it is about to be).
    #[cfg(test)]
    pub(crate) fn receiver_parked(&self) -> bool {
        self.shared.parked.load(Ordering::SeqCst)
    }

    /// Queues the message on this thread's lane without waking anyone.
    pub(crate) fn try_push(&self, message: M) -> Result<(), TrySendError<M>> {
        if self.shared.closed.load(Ordering::Acquire) {
            return Err(TrySendError::Closed(message));
        }
        let mut message = Some(message);
        // `try_with` fails only while the thread is being torn down; the message is then
        // still here.
        let pushed = LANES.try_with(|lanes| {
            let message = message.take().expect("taken once");
            self.producer(&mut lanes.borrow_mut()).push(message)
        });
        match pushed {
            Ok(Ok(())) => Ok(()),
            Ok(Err(rtrb::PushError::Full(message))) => Err(TrySendError::Full(message)),
            Err(_) => Err(TrySendError::Closed(
                message.take().expect("not taken without the thread-local"),
            )),
        }
    }

    pub(crate) fn lane_capacity(&self) -> usize {
        self.shared.lane_capacity
    }

    /// This thread's producer for this receiver, opening the lane on first use.
    fn producer<'a>(&self, lanes: &'a mut Vec<ThreadLane>) -> &'a mut Producer<M> {
        let position = match lanes
            .iter()
            .position(|lane| lane.receiver_id == self.shared.id)
        {
            Some(position) => position,
            None => {
                // Lanes to receivers that are gone are only memory now.
                lanes.retain(|lane| !lane.receiver_closed.load(Ordering::Acquire));
                let (producer, consumer) = RingBuffer::new(self.shared.lane_capacity);
                self.shared
                    .opened
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .push(consumer);
                self.shared.lanes_opened.store(true, Ordering::Release);
                lanes.push(ThreadLane {
                    receiver_id: self.shared.id,
                    receiver_closed: self.shared.closed.clone(),
                    producer: Box::new(producer),
                });
                lanes.len() - 1
            }
        };
        lanes[position]
            .producer
            .downcast_mut()
            .expect("a receiver id names one message type")
    }
}

/// The receiving side; owned by the worker thread.
pub(crate) struct LaneReceiver<M> {
    shared: Arc<Shared<M>>,
    lanes: Vec<Consumer<M>>,
    /// Where the next `take` starts, so that no lane waits behind a busy one.
    next_lane: usize,
}

impl<M> LaneReceiver<M> {
    /// Moves up to `budget` queued messages into `into`, lane by lane.
    pub(crate) fn take(&mut self, into: &mut Vec<M>, budget: usize) -> Taken {
        self.adopt_opened_lanes();
        let before = into.len();
        let lane_count = self.lanes.len();
        for step in 0..lane_count {
            let room = budget - (into.len() - before);
            if room == 0 {
                break;
            }
            let lane = &mut self.lanes[(self.next_lane + step) % lane_count];
            let waiting = lane.slots().min(room);
            if let Ok(chunk) = lane.read_chunk(waiting) {
                into.extend(chunk);
            }
        }
        self.next_lane = self.next_lane.wrapping_add(1);
        // A lane whose thread has exited is dropped once it is empty.
        self.lanes
            .retain(|lane| !(lane.is_abandoned() && lane.is_empty()));
        if into.len() > before {
            Taken::Some
        } else if self.shared.senders.load(Ordering::Acquire) == 0 {
            Taken::Disconnected
        } else {
            Taken::Empty
        }
    }

    /// Parks until a sender wakes it or `timeout` (if any) passes, unless something is
    /// already queued; then takes what is there, as [`Self::take`].
    #[cfg(test)]
    pub(crate) fn wait(
        &mut self,
        into: &mut Vec<M>,
        budget: usize,
        timeout: Option<Duration>,
    ) -> Taken {
        let parking = self.parking();
        parking.announce();
        let taken = self.take(into, budget);
        if taken != Taken::Empty {
            parking.cancel();
            return taken;
        }
        parking.park(timeout);
        self.take(into, budget)
    }

    /// How the receiving thread parks, usable while this receiver is borrowed elsewhere.
    pub(crate) fn parking(&self) -> Parking<M> {
        Parking {
            shared: self.shared.clone(),
        }
    }

    /// True if any lane holds a message (a look that takes nothing).
    pub(crate) fn has_queued(&mut self) -> bool {
        self.adopt_opened_lanes();
        self.lanes.iter().any(|lane| !lane.is_empty())
    }

    fn adopt_opened_lanes(&mut self) {
        // Load before swapping: senders read this cache line on every send.
        let opened = self.shared.lanes_opened.load(Ordering::Relaxed)
            && self.shared.lanes_opened.swap(false, Ordering::Acquire);
        if opened {
            let mut opened = self
                .shared
                .opened
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            self.lanes.append(&mut opened);
        }
    }
}

/// The receiving thread's side of parking: announce, look at the lanes once more (every
/// message sent before the announcement is then seen, and every later sender sees the
/// flag), then park.
pub(crate) struct Parking<M> {
    shared: Arc<Shared<M>>,
}

impl<M> Parking<M> {
    /// Marks the calling thread as about to park. Must be followed by a last look at the
    /// lanes, then [`Self::park`] if it found nothing, or [`Self::cancel`].
    pub(crate) fn announce(&self) {
        self.shared
            .receiver_thread
            .get_or_init(std::thread::current);
        self.shared.parked.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    pub(crate) fn cancel(&self) {
        self.shared.parked.store(false, Ordering::SeqCst);
    }

    /// Parks until woken or until `timeout` passes (a claim that is ended without waking
    /// leaves the thread asleep: the claimant took what was queued).
    pub(crate) fn park(&self, timeout: Option<Duration>) {
        match timeout {
            Some(timeout) => std::thread::park_timeout(timeout),
            None => std::thread::park(),
        }
        self.cancel();
    }
}

impl<M> Drop for LaneReceiver<M> {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(receiver: &mut LaneReceiver<u64>) -> Vec<u64> {
        let mut taken = Vec::new();
        while receiver.take(&mut taken, usize::MAX) == Taken::Some {}
        taken
    }

    #[test]
    fn one_threads_messages_arrive_in_order_and_a_full_lane_refuses() {
        let (sender, mut receiver) = lanes(3);
        for message in 0..3 {
            assert!(sender.try_send(message).is_ok());
        }
        assert!(matches!(sender.try_send(3), Err(TrySendError::Full(3))));
        let mut taken = Vec::new();
        assert_eq!(receiver.take(&mut taken, 2), Taken::Some);
        assert_eq!(taken, [0, 1]);
        assert_eq!(drain(&mut receiver), [2]);
        assert_eq!(receiver.take(&mut Vec::new(), 8), Taken::Empty);
        assert!(sender.try_send(4).is_ok());
        assert_eq!(drain(&mut receiver), [4]);
    }

    #[test]
    fn every_thread_gets_a_lane_and_nothing_is_lost_or_reordered() {
        let (sender, receiver) = lanes::<u64>(64);
        let consumer = std::thread::spawn(move || {
            let mut receiver = receiver;
            let mut seen = Vec::new();
            let mut batch = Vec::new();
            // Parks whenever the lanes are empty, so wake-ups are exercised too.
            loop {
                match receiver.wait(&mut batch, 16, None) {
                    Taken::Some => seen.append(&mut batch),
                    Taken::Empty => {}
                    Taken::Disconnected => return seen,
                }
            }
        });
        let producers: Vec<_> = (0..4u64)
            .map(|thread| {
                let sender = sender.clone();
                std::thread::spawn(move || {
                    for sequence in 0..5_000u64 {
                        let mut message = thread << 32 | sequence;
                        while let Err(error) = sender.try_send(message) {
                            match error {
                                TrySendError::Full(returned) => message = returned,
                                TrySendError::Closed(_) => panic!("receiver gone"),
                            }
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        producers
            .into_iter()
            .for_each(|producer| producer.join().unwrap());
        drop(sender);
        let seen = consumer.join().unwrap();
        assert_eq!(seen.len(), 20_000);
        for thread in 0..4u64 {
            let own: Vec<u64> = seen
                .iter()
                .filter(|message| *message >> 32 == thread)
                .map(|message| message & 0xffff_ffff)
                .collect();
            assert_eq!(own, (0..5_000).collect::<Vec<_>>(), "thread {thread}");
        }
    }

    #[test]
    fn a_receiver_drops_the_lanes_of_threads_that_exited() {
        let (sender, mut receiver) = lanes::<u64>(8);
        let other = sender.clone();
        std::thread::spawn(move || other.try_send(7).unwrap())
            .join()
            .unwrap();
        sender.try_send(8).unwrap();
        let mut taken = drain(&mut receiver);
        taken.sort_unstable();
        assert_eq!(taken, [7, 8]);
        assert_eq!(receiver.lanes.len(), 1, "the exited thread's lane is gone");
    }

    #[test]
    fn sending_after_the_receiver_is_gone_fails() {
        let (sender, receiver) = lanes::<u64>(4);
        drop(receiver);
        assert!(matches!(sender.try_send(1), Err(TrySendError::Closed(1))));
    }

    #[test]
    fn a_waiting_receiver_times_out_when_nothing_comes() {
        let (_sender, mut receiver) = lanes::<u64>(4);
        let timeout = Duration::from_millis(5);
        assert_eq!(
            receiver.wait(&mut Vec::new(), 4, Some(timeout)),
            Taken::Empty
        );
    }
}
