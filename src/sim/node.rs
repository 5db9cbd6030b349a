//! One simulated tickd process: the local backend's real parts (the timer table, the
//! store's writer, the delivery task), assembled as `server::backend` assembles them, but
//! stepped on the simulation's thread instead of running on their own.
//!
//! A wake-up ([`Node::run`]) does what the worker thread does in one turn (fire what is
//! due and hand it over, apply the commands queued, end the batch), then lets the store
//! and the delivery task work until neither has anything queued (the store writes a
//! snapshot's chunks and seal as it handles them). A crash is dropping the
//! node without its clean stop; a restart is [`Node::start`] again on the same disk.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::sync::oneshot;

use super::disk::SimDisk;
use crate::budget::MemoryBudget;
use crate::clock::{Clock, ManualClock};
use crate::domain::{
    AckOutcome, Calendar, Delivered, DeliveryConfig, Expirations, GiveBack, Hold, RedriveOutcome,
    SubscribeOptions,
};
use crate::local::delivery::{DeliveryHandle, SteppedDelivery, Subscription};
use crate::local::store::stepped::SteppedStore;
use crate::local::store::{StoreError, SyncMode};
use crate::local::table::command::Command;
use crate::local::table::durable_replies::ReplyReleaser;
use crate::local::table::journal::Journal;
use crate::local::table::{TableConfig, TimerTable};
use crate::metrics::Metrics;
use crate::worker::TimerState;

/// The data directory every simulated process uses.
pub(crate) const DATA_DIR: &str = "/sim/data";

/// The journal's snapshot threshold: far above what a run logs, so that only the harness
/// starts snapshots, and finite, so that asking for one cannot overflow the count.
const SNAPSHOT_AFTER_BYTES: usize = 1 << 40;

/// What a simulated process is started with.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NodeConfig {
    pub(crate) sync: SyncMode,
    pub(crate) delivery: DeliveryConfig,
    pub(crate) table: TableConfig,
}

/// A running simulated process.
pub(crate) struct Node {
    clock: ManualClock,
    table: TimerTable,
    store: SteppedStore,
    delivery: DeliveryHandle,
    delivery_task: SteppedDelivery,
    /// The table's replies waiting for the log, released as a task would.
    replies: ReplyReleaser,
    /// Commands sent and not yet applied: the worker's queue.
    queued: Vec<Command>,
}

impl Node {
    /// Starts a process on `disk`: recovery, the boot record, the delivery of what was
    /// fired and never settled. An error is the store's refusal to start. Recovery reads
    /// the run's `schedules` back without parsing them again (see
    /// [`TimerTable::knowing_schedules`]).
    pub(crate) fn start(
        disk: &SimDisk,
        clock: &ManualClock,
        config: &NodeConfig,
        schedules: impl IntoIterator<Item = Calendar>,
    ) -> Result<Node, StoreError> {
        let metrics = Metrics::new();
        let mut table = TimerTable::on_clock(config.table, metrics.clone(), clock);
        table.knowing_schedules(schedules);
        let now = clock.now();
        let shared_clock: Arc<dyn Clock> = Arc::new(clock.clone());
        let (store, unsettled) = SteppedStore::open(
            Arc::new(disk.clone()),
            shared_clock.clone(),
            Path::new(DATA_DIR),
            config.sync,
            metrics.clone(),
            |record| table.replay(record, now),
        )?;
        // Snapshots start only when the harness asks (`Node::ask_for_snapshot`): a
        // threshold no run's log reaches.
        let (journal, replies) = Journal::new(
            store.handle().clone(),
            SNAPSHOT_AFTER_BYTES,
            store.recovered_snapshot_bytes(),
        );
        table.attach_journal(journal);
        let recovered = table.held_again(unsettled, &MemoryBudget::unlimited());
        let (delivery, delivery_task) = DeliveryHandle::stepped(
            config.delivery,
            Some(store.handle().clone()),
            store.boot(),
            recovered,
            (metrics, table.live_namespaces(), shared_clock),
        );
        let mut node = Node {
            clock: clock.clone(),
            table,
            store,
            delivery,
            delivery_task,
            replies,
            queued: Vec::new(),
        };
        node.settle();
        Ok(node)
    }

    /// Queues a command for the worker's next turn.
    pub(crate) fn send(&mut self, command: Command) {
        self.queued.push(command);
    }

    pub(crate) fn subscribe(&self, options: SubscribeOptions) -> Subscription {
        self.delivery
            .subscribe(options)
            .expect("the stepped delivery task runs while the node does")
    }

    /// Starts a snapshot at the end of the worker's next turn: its chunks follow a
    /// millisecond apart (woken by [`Node::next_wakeup`]), then the store seals it and
    /// deletes the files it replaces, all through the simulated disk.
    pub(crate) fn ask_for_snapshot(&mut self) {
        self.table.ask_for_snapshot();
    }

    /// Sends an ack; its answer comes with a later [`Node::run`].
    pub(crate) fn ack(&self, namespace: String, delivery_ids: Vec<u64>) -> Later<AckOutcome> {
        let delivery = self.delivery.clone();
        Later::new(async move { delivery.ack(namespace, delivery_ids).await.ok() })
    }

    /// Hands a delivery back for `after` (the pusher's retry, released, or its claim kept
    /// longer); true if it was in flight. Answered with a later [`Node::run`].
    pub(crate) fn retry_later(
        &self,
        namespace: String,
        delivery_id: u64,
        after: Duration,
        hold: Hold,
    ) -> Later<bool> {
        let answer = Expirations::retry_later(&self.delivery, namespace, delivery_id, after, hold);
        Later::new(async move { answer.await.ok() })
    }

    /// Gives back a delivery never sent, its attempt refunded, to come again as `when`
    /// says; true if it was in flight.
    pub(crate) fn give_back(
        &self,
        namespace: String,
        delivery_id: u64,
        when: GiveBack,
    ) -> Later<bool> {
        let answer = Expirations::give_back(&self.delivery, namespace, delivery_id, when);
        Later::new(async move { answer.await.ok() })
    }

    /// Sends every dead expiration of `namespace` back to delivery (the API's Redrive);
    /// its answer comes with a later [`Node::run`], once the attempts it resets are logged.
    pub(crate) fn redrive(&self, namespace: String) -> Later<RedriveOutcome> {
        let answer = Expirations::redrive(&self.delivery, namespace, None);
        Later::new(async move { answer.await.ok() })
    }

    /// One turn of the worker at the clock's time, then the store and delivery until idle.
    pub(crate) fn run(&mut self) {
        let now = self.clock.now();
        if self
            .table
            .next_expiration()
            .is_some_and(|due| due <= now.monotonic)
        {
            // As the worker's sink does, once it has let go of its lock.
            let mut fired = Vec::new();
            self.table.fire_due(now, &mut fired);
            self.delivery.fired(fired);
        }
        for command in self.queued.drain(..) {
            self.table.apply(command, now);
        }
        self.table.end_batch();
        self.settle();
    }

    /// Lets the store and the delivery task hand work to each other until both are idle,
    /// the table's replies released as the store's marks move.
    fn settle(&mut self) {
        loop {
            // Delivery first: its ack deadlines may dispatch, and what it appends (attempts,
            // settlements) must be committed in this same settling, as the store thread
            // would at once.
            let handled = self.delivery_task.step();
            let stored = self.store.step();
            self.replies.step();
            if handled == 0 && !stored {
                break;
            }
        }
    }

    /// The next time something is due: a timer, an ack deadline or an interval fsync.
    pub(crate) fn next_wakeup(&self) -> Option<u64> {
        [
            self.table.next_expiration(),
            self.delivery_task.next_deadline(),
            self.store.interval_sync_due(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// When `--sync interval`'s store thread would wake to fsync what it wrote: the clock
    /// must not pass it without a step, or a power cut could take more than the promised
    /// interval's worth of answered calls.
    pub(crate) fn interval_sync_due(&self) -> Option<u64> {
        self.store.interval_sync_due()
    }

    /// True once the log failed: the process must stop (tickd exits).
    pub(crate) fn store_failed(&self) -> bool {
        self.store.handle().has_failed()
    }

    /// A clean stop (SIGTERM): the worker's last batch, delivery let go of the store, the
    /// store's last commit and sync.
    pub(crate) fn stop(mut self) {
        self.run();
        self.delivery.shutdown();
        let mut closed = Later::new({
            let delivery = self.delivery.clone();
            async move {
                delivery.close().await;
                Some(())
            }
        });
        closed.poll();
        self.settle();
        closed.poll();
        let Node {
            store,
            table,
            delivery,
            mut delivery_task,
            mut replies,
            ..
        } = self;
        drop((table, delivery));
        store.finish();
        // The last commit's marks answer what waited for it.
        delivery_task.step();
        replies.step();
    }
}

/// An answer that arrives after some steps: a future polled by hand, never waiting.
pub(crate) struct Later<T> {
    future: Pin<Box<dyn Future<Output = Option<T>>>>,
    answer: Option<Option<T>>,
}

impl<T> Later<T> {
    pub(crate) fn new(future: impl Future<Output = Option<T>> + 'static) -> Self {
        let mut later = Self {
            future: Box::pin(future),
            answer: None,
        };
        // The first poll sends the request.
        later.poll();
        later
    }

    /// The answer if it has come: `Some(None)` when the process stopped without one.
    pub(crate) fn poll(&mut self) -> Option<&Option<T>> {
        if self.answer.is_none() {
            let mut context = Context::from_waker(Waker::noop());
            if let Poll::Ready(answer) = self.future.as_mut().poll(&mut context) {
                self.answer = Some(answer);
            }
        }
        self.answer.as_ref()
    }
}

/// Takes the next delivery a subscription has ready, if any, as a client's stream would.
pub(crate) fn take_delivery(subscription: &mut Subscription) -> Option<Delivered> {
    let mut context = Context::from_waker(Waker::noop());
    match tokio_stream::Stream::poll_next(Pin::new(subscription), &mut context) {
        Poll::Ready(delivered) => delivered,
        Poll::Pending => None,
    }
}

/// A reply the worker sends on a oneshot channel, if it has come.
pub(crate) fn reply<T>(receiver: &mut oneshot::Receiver<T>) -> Reply<T> {
    match receiver.try_recv() {
        Ok(answer) => Reply::Answered(answer),
        Err(oneshot::error::TryRecvError::Empty) => Reply::Waiting,
        Err(oneshot::error::TryRecvError::Closed) => Reply::Dropped,
    }
}

/// Where a call's answer is.
pub(crate) enum Reply<T> {
    Answered(T),
    /// Not yet: its record is not durable yet.
    Waiting,
    /// Never: the process dropped it (the store failed, or the process is gone).
    Dropped,
}
