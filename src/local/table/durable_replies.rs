//! The table's replies that wait for the log: each batch's answers, held by the number of
//! the batch that carries their records until the store's durable mark passes it, then
//! sent by the table's own releaser, on a thread of its own ("tickd-replies"; the
//! simulation steps it by hand). The worker queues them through a channel and never
//! waits; the store thread only publishes its marks ([`crate::local::store::watermark`]).
//!
//! Why a thread and not a task of the server's runtime: woken by the store thread, a task
//! waited in the runtime's shared queue behind the handlers' work, and the replies it sent
//! woke their handlers onto its own worker; durable NewTimeout ran at 0.70 of the build
//! before. Sent from a thread outside the runtime, as the store thread once sent them,
//! the replies wake their handlers as they did.

use tokio::sync::mpsc;

use crate::local::store::watermark::{self, Awaiting, Marks};

/// One deferred answer: a command's reply, sent with the value the worker decided.
pub(crate) type DeferredReply = Box<dyn FnOnce() + Send>;

/// A batch's replies, and the number of the batch they wait for.
type HeldReplies = (u64, Vec<DeferredReply>);

/// The worker's side: where each batch's replies are queued.
#[derive(Clone)]
pub(crate) struct DurableReplies {
    sender: mpsc::UnboundedSender<HeldReplies>,
}

impl DurableReplies {
    /// A queue and the releaser that answers from it as `marks` move.
    pub(crate) fn new(marks: Marks) -> (Self, ReplyReleaser) {
        let (sender, queued) = mpsc::unbounded_channel();
        let releaser = ReplyReleaser {
            queued,
            awaiting: Awaiting::default(),
            marks,
        };
        (Self { sender }, releaser)
    }

    /// Holds `replies` until batch `number` is durable. If the releaser is gone (the log
    /// failed and the process is stopping), they are dropped unsent: unavailable.
    pub(crate) fn hold(&self, number: u64, replies: Vec<DeferredReply>) {
        if !replies.is_empty() {
            let _ = self.sender.send((number, replies));
        }
    }
}

/// Answers the replies whose batch is durable, in order; drops them all once the log has
/// failed, so that their callers see the store as unavailable.
pub(crate) struct ReplyReleaser {
    queued: mpsc::UnboundedReceiver<HeldReplies>,
    awaiting: Awaiting<Vec<DeferredReply>>,
    marks: Marks,
}

impl ReplyReleaser {
    /// Runs [`Self::run`] on its own thread, "tickd-replies".
    pub(crate) fn spawn_thread(self) -> std::io::Result<std::thread::JoinHandle<()>> {
        let runtime = tokio::runtime::Builder::new_current_thread().build()?;
        std::thread::Builder::new()
            .name("tickd-replies".into())
            .spawn(move || runtime.block_on(self.run()))
    }

    /// Answers as the marks move, until the worker is gone and nothing waits, or the store
    /// thread has ended (what its last marks did not pass is dropped unsent).
    pub(crate) async fn run(mut self) {
        let mut worker_gone = false;
        loop {
            tokio::select! {
                queued = self.queued.recv(), if !worker_gone => match queued {
                    Some(held) => self.take(held),
                    None => worker_gone = true,
                },
                // Woken by the marks only while a reply waits for them.
                moved = self.marks.durable_moved(), if !self.awaiting.is_empty() => {
                    if moved.is_err() {
                        // The store thread ended: its last marks are final.
                        self.step();
                        return;
                    }
                }
            }
            self.step();
            if worker_gone && self.awaiting.is_empty() {
                return;
            }
        }
    }

    /// Takes in what the worker queued, then answers what the marks have passed: what one
    /// wake-up of the releaser does. Returns how many replies it sent or dropped.
    pub(crate) fn step(&mut self) -> usize {
        watermark::debug_assert_off_the_store_thread();
        while let Ok(held) = self.queued.try_recv() {
            self.take(held);
        }
        let marks = self.marks.current();
        let mut released = 0;
        while let Some(replies) = self.awaiting.pop_passed(marks.durable) {
            released += replies.len();
            for reply in replies {
                reply();
            }
        }
        if marks.failed && !self.awaiting.is_empty() {
            released += 1;
            self.awaiting.drop_all();
        }
        released
    }

    fn take(&mut self, (number, replies): HeldReplies) {
        self.awaiting.push(number, replies);
    }
}

#[cfg(test)]
mod tests {
    use tokio::sync::oneshot;

    use super::*;
    use crate::local::store::watermark::MarksPublisher;

    fn reply(value: u32) -> (DeferredReply, oneshot::Receiver<u32>) {
        let (sender, receiver) = oneshot::channel();
        let reply: DeferredReply = Box::new(move || {
            let _ = sender.send(value);
        });
        (reply, receiver)
    }

    #[test]
    fn a_reply_waits_for_its_batch_to_be_durable_and_is_dropped_if_the_log_fails() {
        let (publisher, marks) = MarksPublisher::new();
        let (replies, mut releaser) = DurableReplies::new(marks);
        let (first, mut first_answer) = reply(1);
        let (second, mut second_answer) = reply(2);
        replies.hold(1, vec![first]);
        replies.hold(2, vec![second]);
        releaser.step();
        assert!(first_answer.try_recv().is_err(), "nothing is durable yet");
        publisher.written(2);
        releaser.step();
        assert!(first_answer.try_recv().is_err(), "written is not durable");
        publisher.durable(1);
        releaser.step();
        assert_eq!(first_answer.try_recv(), Ok(1));
        assert!(
            second_answer.try_recv().is_err(),
            "batch 2 is not durable yet"
        );
        publisher.failed();
        releaser.step();
        assert_eq!(
            second_answer.try_recv(),
            Err(oneshot::error::TryRecvError::Closed),
            "a reply whose batch the log failed to make durable is never sent"
        );
    }
}
