//! The local backend's timers: [`crate::domain::Timers`] answered by the worker thread's
//! table. Each call becomes one [`Command`] with a reply channel; the command is queued
//! before the call returns (never waiting: a full queue is refused at once, which the API
//! turns into load shedding), and the returned answer only waits for the reply. Light
//! commands are sent with [`WorkerHandle::try_send_light`]: while the worker sleeps they
//! are applied on the caller's thread, and the reply is there before the answer is polled.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;

use super::table::command::{Command, Reschedule};
use crate::worker::{SendError, WorkerHandle};
use bytes::Bytes;

use crate::domain::{
    Answer, Due, NewTimer, PendingPage, PendingQuery, Registered, TimerError, TimerRef, TimerView,
    Timers, TraceContext,
};

/// The worker's command queue, seen as the API's [`Timers`].
#[derive(Clone)]
pub(crate) struct LocalTimers {
    worker: WorkerHandle<Command>,
}

impl LocalTimers {
    pub(crate) fn new(worker: WorkerHandle<Command>) -> Self {
        Self { worker }
    }

    /// Queues the command built around a reply channel, or refuses it at once.
    fn submit<R>(
        &self,
        command: impl FnOnce(oneshot::Sender<R>) -> Command,
    ) -> Result<oneshot::Receiver<R>, TimerError> {
        let (reply, answer) = oneshot::channel();
        let command = command(reply);
        if command.is_light() {
            self.worker.try_send_light(command)?;
        } else {
            self.worker.try_send(command)?;
        }
        Ok(answer)
    }

    /// Queues a command whose reply is the answer itself.
    fn ask<T: Send + 'static>(
        &self,
        command: impl FnOnce(oneshot::Sender<T>) -> Command,
    ) -> Answer<T> {
        let answer = self.submit(command);
        Answer::work(async move { answer?.await.map_err(|_| SendError::Stopped.into()) })
    }

    /// Queues a command whose reply is an answer or a refusal.
    fn ask_fallible<T: Send + 'static>(
        &self,
        command: impl FnOnce(oneshot::Sender<Result<T, TimerError>>) -> Command,
    ) -> Answer<T> {
        match self.submit(command) {
            // The worker's reply is the answer: no allocation on this path (heartbeats).
            Ok(reply) => Answer::reply(reply),
            Err(refused) => Answer::refused(refused),
        }
    }
}

impl From<SendError> for TimerError {
    fn from(error: SendError) -> Self {
        match error {
            SendError::Full { .. } => TimerError::ResourceExhausted(error.to_string()),
            SendError::Stopped => TimerError::stopped(),
        }
    }
}

impl Timers for LocalTimers {
    fn register(&self, timers: Vec<NewTimer>) -> Answer<Vec<Result<Registered, TimerError>>> {
        self.ask(|reply| Command::Register { timers, reply })
    }

    fn cancel(&self, timer: TimerRef) -> Answer<bool> {
        self.ask_fallible(|reply| Command::Cancel { timer, reply })
    }

    fn get(&self, timer: TimerRef) -> Answer<TimerView> {
        self.ask_fallible(|reply| Command::Get { timer, reply })
    }

    fn touch(&self, timer: TimerRef, ttl: Option<Duration>) -> Answer<TimerView> {
        self.ask_fallible(|reply| Command::Touch { timer, ttl, reply })
    }

    fn pending(&self, query: PendingQuery) -> Answer<PendingPage> {
        self.ask_fallible(|reply| Command::Pending { query, reply })
    }

    fn reschedule(
        &self,
        timer: TimerRef,
        due: Due,
        payload: Option<Bytes>,
        trace: Option<Arc<TraceContext>>,
    ) -> Answer<TimerView> {
        self.ask_fallible(|reply| {
            Command::Reschedule(Box::new(Reschedule {
                timer,
                due,
                payload,
                trace,
                reply,
            }))
        })
    }
}
