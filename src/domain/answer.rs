//! [`Answer`]: the future a backend hands back for one call. The call was already made
//! (or refused) when the answer exists; awaiting only waits for the reply.
//!
//! It is a concrete type rather than a boxed future so that the commonest answer, a reply
//! from the worker thread on a oneshot channel, costs no allocation: KeepAlive streams send
//! hundreds of thousands of heartbeats a second through it.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::oneshot;

use super::error::TimerError;

/// An answer on its way (see the module's docs).
#[must_use = "an answer does nothing unless awaited"]
pub struct Answer<T>(Pending<T>);

enum Pending<T> {
    /// Refused at once; taken once. Boxed, so that an answer stays three words whatever
    /// `T` is: KeepAlive keeps thousands of them in flight per stream.
    Refused(Option<Box<TimerError>>),
    /// A reply to come on a channel; a dropped sender means the backend stopped.
    Reply(oneshot::Receiver<Result<T, TimerError>>),
    /// Any other work, boxed.
    Work(Pin<Box<dyn Future<Output = Result<T, TimerError>> + Send>>),
}

const _: () = assert!(std::mem::size_of::<Answer<[u8; 1024]>>() <= 24);

impl<T> Answer<T> {
    pub fn refused(error: TimerError) -> Self {
        Self(Pending::Refused(Some(Box::new(error))))
    }

    pub fn reply(receiver: oneshot::Receiver<Result<T, TimerError>>) -> Self {
        Self(Pending::Reply(receiver))
    }

    pub fn work(future: impl Future<Output = Result<T, TimerError>> + Send + 'static) -> Self {
        Self(Pending::Work(Box::pin(future)))
    }
}

// Nothing inside is ever pinned in place (the channel and the boxes are themselves
// `Unpin`), whatever `T` is.
impl<T> Unpin for Answer<T> {}

impl<T> Future for Answer<T> {
    type Output = Result<T, TimerError>;

    fn poll(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.get_mut().0 {
            Pending::Refused(error) => {
                let error = error
                    .take()
                    .expect("an answer is not polled after it is ready");
                Poll::Ready(Err(*error))
            }
            Pending::Reply(receiver) => Pin::new(receiver)
                .poll(context)
                .map(|reply| reply.unwrap_or_else(|_| Err(TimerError::stopped()))),
            Pending::Work(future) => future.as_mut().poll(context),
        }
    }
}
