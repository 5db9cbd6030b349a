//! How far the log has got, published by the store thread after each group commit: the
//! last batch written to the OS, the last one durable (as the sync mode counts it), and
//! whether the log failed. Whoever waits on the log (the table's replies, delivery's
//! hand-offs, sends and answers) keeps its own queue of what waits ([`Awaiting`]), each
//! item with the number [`super::StoreHandle::append`] gave the batch it needs, and
//! releases it on its own thread once the mark has passed: the store thread runs nobody's
//! code but its own, and a reader finds each piece of logic where it runs.

use std::collections::VecDeque;

use tokio::sync::watch;

/// The log's marks. Batch numbers start at 1; 0 is "nothing yet".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Watermark {
    /// Every batch numbered up to this one is written to the OS: a crash of the process
    /// keeps it, a crash of the machine may not.
    pub(crate) written: u64,
    /// Every batch numbered up to this one is as durable as the sync mode promises (synced
    /// with `--sync always`): its callers may be answered.
    pub(crate) durable: u64,
    /// The log failed: no batch past these marks will ever pass them, and what waits for
    /// one is dropped unsent, so that its caller sees the store as unavailable.
    pub(crate) failed: bool,
}

/// Where the store thread's marks are read, and awaited. The written mark has a channel of
/// its own: only deliveries wait for it, and moved alone (before each fsync) it wakes only
/// them, never the table's replies, which wait for the durable mark.
#[derive(Clone)]
pub(crate) struct Marks {
    marks: watch::Receiver<Watermark>,
    written: watch::Receiver<u64>,
}

/// The store thread has ended: its last marks are final.
#[derive(Debug)]
pub(crate) struct StoreEnded;

impl Marks {
    /// The marks now, seen: the next wait is for a later move.
    pub(crate) fn current(&mut self) -> Watermark {
        self.written.borrow_and_update();
        *self.marks.borrow_and_update()
    }

    /// The marks now, without seeing them.
    #[cfg(test)]
    pub(crate) fn peek(&self) -> Watermark {
        *self.marks.borrow()
    }

    /// Waits for the durable mark to move, or the log to fail.
    pub(crate) async fn durable_moved(&mut self) -> Result<(), StoreEnded> {
        self.marks.changed().await.map_err(|_| StoreEnded)
    }

    /// Waits for either mark to move, or the log to fail.
    pub(crate) async fn moved(&mut self) -> Result<(), StoreEnded> {
        tokio::select! {
            moved = self.marks.changed() => moved.map_err(|_| StoreEnded),
            moved = self.written.changed() => moved.map_err(|_| StoreEnded),
        }
    }
}

/// What waits for the log, in the order it was queued, each item with the batch it needs.
/// Items are queued with batch numbers that never go down (one queue per source), so the
/// first item is always the next to pass.
pub(crate) struct Awaiting<T> {
    queue: VecDeque<(u64, T)>,
}

impl<T> Default for Awaiting<T> {
    fn default() -> Self {
        Self {
            queue: VecDeque::new(),
        }
    }
}

impl<T> Awaiting<T> {
    /// Queues `item` until the mark passes `batch`.
    pub(crate) fn push(&mut self, batch: u64, item: T) {
        debug_assert!(
            self.queue.back().is_none_or(|(last, _)| *last <= batch),
            "items are queued in the order of the batches they wait for"
        );
        self.queue.push_back((batch, item));
    }

    /// The next item whose batch is at or below `mark`, taken out.
    pub(crate) fn pop_passed(&mut self, mark: u64) -> Option<T> {
        match self.queue.front() {
            Some((batch, _)) if *batch <= mark => self.queue.pop_front().map(|(_, item)| item),
            _ => None,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Drops everything still waiting: the log failed, and none of it will ever pass.
    pub(crate) fn drop_all(&mut self) {
        self.queue.clear();
    }
}

/// The store thread's side: the marks it has reached, published as they move.
pub(crate) struct MarksPublisher {
    marks: watch::Sender<Watermark>,
    written: watch::Sender<u64>,
}

impl MarksPublisher {
    /// A publisher at "nothing yet", and the first reader of its marks.
    pub(crate) fn new() -> (Self, Marks) {
        let (marks, marks_receiver) = watch::channel(Watermark::default());
        let (written, written_receiver) = watch::channel(0);
        let reader = Marks {
            marks: marks_receiver,
            written: written_receiver,
        };
        (Self { marks, written }, reader)
    }

    /// Every batch up to `batch` is written to the OS: only its own channel wakes anyone.
    pub(crate) fn written(&self, batch: u64) {
        self.marks.send_if_modified(|marks| {
            marks.written = marks.written.max(batch);
            false
        });
        self.written.send_if_modified(|written| {
            let moved = batch > *written;
            *written = (*written).max(batch);
            moved
        });
    }

    /// Every batch up to `batch` is written and durable.
    pub(crate) fn durable(&self, batch: u64) {
        self.written.send_if_modified(|written| {
            *written = (*written).max(batch);
            false
        });
        self.marks.send_if_modified(|marks| {
            let moved = batch > marks.durable;
            marks.written = marks.written.max(batch);
            marks.durable = marks.durable.max(batch);
            moved
        });
    }

    /// The log failed for good.
    pub(crate) fn failed(&self) {
        self.marks.send_if_modified(|marks| {
            let moved = !marks.failed;
            marks.failed = true;
            moved
        });
        self.written.send_modify(|_| {});
    }
}

/// Debug builds check that what waits on the log is never released by the store thread:
/// the callbacks it once ran are gone, and must not come back by another way.
pub(crate) fn debug_assert_off_the_store_thread() {
    debug_assert_ne!(
        std::thread::current().name(),
        Some(super::writer::STORE_THREAD),
        "the store thread runs no code of the table or of delivery"
    );
}

/// Blocks until `mark` of the store's marks has passed every batch appended so far (or the
/// log failed): a test's way to wait for what a task would be woken for.
#[cfg(test)]
pub(crate) fn block_until_passed(handle: &super::StoreHandle, mark: fn(&Watermark) -> u64) {
    let number = handle.last_appended();
    let mut marks = handle.marks();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        loop {
            let now = marks.current();
            if mark(&now) >= number || now.failed {
                return;
            }
            marks.moved().await.expect("the store publishes its marks");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_item_waits_until_the_mark_passes_its_batch_in_order() {
        let mut awaiting = Awaiting::default();
        awaiting.push(2, "second");
        awaiting.push(2, "also second");
        awaiting.push(5, "fifth");
        assert_eq!(awaiting.pop_passed(1), None);
        assert_eq!(awaiting.pop_passed(3), Some("second"));
        assert_eq!(awaiting.pop_passed(3), Some("also second"));
        assert_eq!(awaiting.pop_passed(4), None);
        assert_eq!(awaiting.pop_passed(5), Some("fifth"));
        assert!(awaiting.is_empty());
    }

    #[test]
    fn marks_only_move_forward_and_a_failure_stays() {
        let (publisher, marks) = MarksPublisher::new();
        publisher.durable(3);
        publisher.written(2);
        assert_eq!(
            marks.peek(),
            Watermark {
                written: 3,
                durable: 3,
                failed: false
            }
        );
        publisher.written(4);
        publisher.failed();
        publisher.durable(1);
        assert_eq!(
            marks.peek(),
            Watermark {
                written: 4,
                durable: 3,
                failed: true
            }
        );
    }
}
