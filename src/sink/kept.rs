//! A broker sink's one connection, kept between pushes and made again when lost.
//!
//! The NATS and Redis sinks each hold one connection (or client) per sink that every push
//! shares. Pushes that find it missing wait for one of them to connect rather than each
//! dialling, and a failed connection is the answer of every push that waited for it, so a
//! sink that is down costs one connection attempt at a time, not one per push in flight.
//! Each connection is made by the caller's `connect`, which resolves the sink's host and
//! checks it against `--sink-allow` each time ([`super::allow::SinkAllow::allowed_addresses`]).

use std::future::Future;
use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;

use super::connect::CONNECT_TIMEOUT;

/// The longest a push waits for a kept connection, given its sink's push `timeout`: each
/// of the host's addresses has `CONNECT_TIMEOUT`, and all of them together what an HTTP
/// push has for its connection and answer.
pub(crate) fn kept_connection_budget(timeout: Duration) -> Duration {
    CONNECT_TIMEOUT + timeout
}

pub(crate) struct KeptConnection<C> {
    state: Mutex<Kept<C>>,
}

struct Kept<C> {
    current: Option<(u64, C)>,
    /// Counts the connections made, so that a push reporting its connection lost drops
    /// that one, not a newer one another push made meanwhile.
    made: u64,
    /// When the last connection attempt failed, and why.
    failed: Option<(Instant, String)>,
}

/// One connection as a push uses it: a handle to it, and which one it is.
pub(crate) struct InUse<C> {
    pub(crate) connection: C,
    pub(crate) generation: u64,
}

impl<C: Clone> KeptConnection<C> {
    pub(crate) fn new() -> Self {
        Self {
            state: Mutex::new(Kept {
                current: None,
                made: 0,
                failed: None,
            }),
        }
    }

    /// The kept connection if `usable` says it still is, or a new one from `connect`.
    /// A push that waited while another's attempt failed gets that failure.
    pub(crate) async fn get<F, Fut>(
        &self,
        usable: impl Fn(&C) -> bool,
        within: Duration,
        connect: F,
    ) -> Result<InUse<C>, String>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<C, String>>,
    {
        // Each address has its own connection timeout; this bounds them all, and the wait
        // behind another push's connection, so that a push stays within its budget.
        tokio::time::timeout(within, self.get_unbounded(usable, connect))
            .await
            .unwrap_or_else(|_| {
                Err(format!(
                    "no connection within {}",
                    humantime::format_duration(within)
                ))
            })
    }

    async fn get_unbounded<F, Fut>(
        &self,
        usable: impl Fn(&C) -> bool,
        connect: F,
    ) -> Result<InUse<C>, String>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<C, String>>,
    {
        let asked = Instant::now();
        let mut state = self.state.lock().await;
        if let Some((generation, connection)) = &state.current {
            if usable(connection) {
                return Ok(InUse {
                    connection: connection.clone(),
                    generation: *generation,
                });
            }
            state.current = None;
        }
        if let Some((failed_at, reason)) = &state.failed {
            if *failed_at >= asked {
                return Err(reason.clone());
            }
        }
        match connect().await {
            Ok(connection) => {
                state.made += 1;
                let generation = state.made;
                state.current = Some((generation, connection.clone()));
                state.failed = None;
                Ok(InUse {
                    connection,
                    generation,
                })
            }
            Err(reason) => {
                state.failed = Some((Instant::now(), reason.clone()));
                Err(reason)
            }
        }
    }

    /// Drops the connection `generation` (its push found it broken), if it is still kept.
    pub(crate) async fn lost(&self, generation: u64) {
        let mut state = self.state.lock().await;
        if state
            .current
            .as_ref()
            .is_some_and(|(kept, _)| *kept == generation)
        {
            state.current = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Longer than any test: no connection here runs out of time unless it means to.
    const LONG: Duration = Duration::from_secs(3600);
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[tokio::test]
    async fn a_connection_is_made_once_kept_and_made_again_when_lost() {
        let kept = KeptConnection::<usize>::new();
        let made = AtomicUsize::new(0);
        let connect = || async { Ok::<_, String>(made.fetch_add(1, Ordering::SeqCst)) };
        let first = kept.get(|_| true, LONG, connect).await.unwrap();
        let again = kept.get(|_| true, LONG, connect).await.unwrap();
        assert_eq!((first.connection, again.connection), (0, 0));
        // A push reporting an older connection lost leaves the kept one alone.
        kept.lost(first.generation + 1).await;
        assert_eq!(
            kept.get(|_| true, LONG, connect).await.unwrap().connection,
            0
        );
        kept.lost(first.generation).await;
        assert_eq!(
            kept.get(|_| true, LONG, connect).await.unwrap().connection,
            1
        );
        // One that is no longer usable is replaced too.
        assert_eq!(
            kept.get(|_| false, LONG, connect).await.unwrap().connection,
            2
        );
    }

    #[tokio::test]
    async fn pushes_waiting_for_a_failing_connection_share_its_failure() {
        let kept = Arc::new(KeptConnection::<()>::new());
        let attempts = Arc::new(AtomicUsize::new(0));
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let first = {
            let (kept, attempts) = (kept.clone(), attempts.clone());
            tokio::spawn(async move {
                kept.get(
                    |_| true,
                    LONG,
                    || async move {
                        attempts.fetch_add(1, Ordering::SeqCst);
                        let _ = released.await;
                        Err::<(), _>("refused".to_owned())
                    },
                )
                .await
            })
        };
        // The first push holds the lock while it connects.
        while attempts.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        let waiting = {
            let (kept, attempts) = (kept.clone(), attempts.clone());
            tokio::spawn(async move {
                kept.get(
                    |_| true,
                    LONG,
                    || async move {
                        attempts.fetch_add(1, Ordering::SeqCst);
                        Ok(())
                    },
                )
                .await
            })
        };
        tokio::task::yield_now().await;
        release.send(()).unwrap();
        assert_eq!(first.await.unwrap().err().as_deref(), Some("refused"));
        assert_eq!(waiting.await.unwrap().err().as_deref(), Some("refused"));
        assert_eq!(attempts.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_that_never_comes_is_given_up_within_its_budget() {
        let kept = KeptConnection::<()>::new();
        let budget = Duration::from_secs(15);
        let given_up = kept
            .get(|_| true, budget, std::future::pending::<Result<(), String>>)
            .await;
        assert_eq!(given_up.err().as_deref(), Some("no connection within 15s"));
        // The next push connects afresh.
        let connected = kept.get(|_| true, LONG, || async { Ok(()) }).await;
        assert_eq!(connected.unwrap().generation, 1);
    }
}
