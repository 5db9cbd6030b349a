//! Group commit: statements that many callers make at once (acks, registrations) run as
//! one statement for everything queued, instead of one each.
//!
//! Every statement on the shared database costs a round trip, its planning and a commit
//! (an fsync with durable settings), whatever it carries. Callers hand their request to a
//! [`GroupCommit`] and wait for its answer; a runner task takes the first request queued
//! and whatever else queued while the previous statement ran (no timer: an idle queue
//! runs a lone request at once), runs them as one batch and answers each caller. Under
//! load the batches grow by themselves, and the database sees one statement where it saw
//! dozens.
//!
//! A caller is answered only after its batch's statement returns, so anything a request's
//! answer promises (committed, settled) is as true as when each ran its own statement.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, Mutex};

/// One request and where its answer goes.
struct Job<R, A> {
    request: R,
    answer: oneshot::Sender<A>,
}

/// The queue of one kind of statement, and its runner tasks.
pub(crate) struct GroupCommit<R, A> {
    queue: mpsc::UnboundedSender<Job<R, A>>,
}

impl<R: Send + 'static, A: Send + 'static> GroupCommit<R, A> {
    /// Starts `runners` tasks that each take the queued requests, up to `max_items` of
    /// them as `items` counts (one request at least), and run them with `run`, which
    /// answers each request of the batch, in order.
    ///
    /// With one runner, a request waits for at most the statement under way and its
    /// own; with more, one runner gathers while another's statement runs, which keeps
    /// the database busy when one batch's statement is mostly the database's work.
    pub(crate) fn start<F, Fut>(
        runners: usize,
        max_items: usize,
        items: fn(&R) -> usize,
        run: F,
    ) -> Self
    where
        F: Fn(Vec<R>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Vec<A>> + Send + 'static,
    {
        let (queue, queued) = mpsc::unbounded_channel();
        let queued = Arc::new(Mutex::new(queued));
        let run = Arc::new(run);
        for _ in 0..runners.max(1) {
            tokio::spawn(runner(queued.clone(), run.clone(), max_items, items));
        }
        Self { queue }
    }

    /// Queues `request` and waits for its batch's answer; `None` if the runners are gone
    /// (a batch panicked, or the runtime is shutting down).
    pub(crate) async fn submit(&self, request: R) -> Option<A> {
        let (answer, answered) = oneshot::channel();
        self.queue.send(Job { request, answer }).ok()?;
        answered.await.ok()
    }
}

/// Takes batches off the queue until every [`GroupCommit`] handle is dropped.
async fn runner<R, A, F, Fut>(
    queued: Arc<Mutex<mpsc::UnboundedReceiver<Job<R, A>>>>,
    run: Arc<F>,
    max_items: usize,
    items: fn(&R) -> usize,
) where
    F: Fn(Vec<R>) -> Fut,
    Fut: Future<Output = Vec<A>>,
{
    loop {
        let jobs = {
            let mut queued = queued.lock().await;
            let Some(first) = queued.recv().await else {
                return;
            };
            let mut taken = items(&first.request);
            let mut jobs = vec![first];
            while taken < max_items {
                match queued.try_recv() {
                    Ok(job) => {
                        taken += items(&job.request);
                        jobs.push(job);
                    }
                    Err(_) => break,
                }
            }
            jobs
        };
        let (requests, answers): (Vec<R>, Vec<oneshot::Sender<A>>) = jobs
            .into_iter()
            .map(|job| (job.request, job.answer))
            .unzip();
        let results = run(requests).await;
        debug_assert_eq!(results.len(), answers.len(), "one answer per request");
        for (answer, result) in answers.into_iter().zip(results) {
            // A caller that went away needs no answer; its request was carried out.
            let _ = answer.send(result);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Requests queued while a batch runs go together in the next one, each answered
    /// with its own result.
    #[tokio::test]
    async fn what_queues_during_a_batch_goes_in_the_next_one() {
        let batches = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (release, released) = tokio::sync::watch::channel(false);
        let started = Arc::new(tokio::sync::Notify::new());
        let group = {
            let batches = batches.clone();
            let started = started.clone();
            GroupCommit::start(
                1,
                100,
                |_: &u32| 1,
                move |requests: Vec<u32>| {
                    let batches = batches.clone();
                    let started = started.clone();
                    let mut released = released.clone();
                    async move {
                        batches.lock().unwrap().push(requests.clone());
                        started.notify_one();
                        let _ = released.wait_for(|released| *released).await;
                        requests.iter().map(|request| request * 10).collect()
                    }
                },
            )
        };
        let group = Arc::new(group);
        let first = tokio::spawn({
            let group = group.clone();
            async move { group.submit(1).await }
        });
        started.notified().await;
        // The first batch is under way: these three wait for it, and then go as one.
        let queued_count = Arc::new(AtomicUsize::new(0));
        let mut later = Vec::new();
        for request in [2, 3, 4] {
            let group = group.clone();
            let queued_count = queued_count.clone();
            later.push(tokio::spawn(async move {
                queued_count.fetch_add(1, Ordering::SeqCst);
                group.submit(request).await
            }));
        }
        while queued_count.load(Ordering::SeqCst) < 3 {
            tokio::task::yield_now().await;
        }
        // (A submit queues its request before it first waits, in the same poll.)
        release.send(true).unwrap();
        assert_eq!(first.await.unwrap(), Some(10));
        let mut answers = Vec::new();
        for task in later {
            answers.push(task.await.unwrap());
        }
        assert_eq!(answers, vec![Some(20), Some(30), Some(40)]);
        assert_eq!(*batches.lock().unwrap(), vec![vec![1], vec![2, 3, 4]]);
    }
}
