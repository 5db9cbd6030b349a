//! A broker sink's one connection, kept between pushes and made again when lost.
//!
//! The NATS and Redis sinks each hold one connection (or client) per sink that every push
//! shares. Pushes that find it missing wait for one of them to connect rather than each
//! dialling, and a failed connection is the answer of every push that waited for it, so a
//! sink that is down costs one connection attempt at a time, not one per push in flight.
//! Each connection is made by the caller's `connect`, which resolves the sink's host and
//! checks it against `--sink-allow` each time ([`super::allow::SinkAllow::allowed_addresses`]).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
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
    /// The newest connection a push found broken, by generation: apart from the lock so
    /// that reporting it never waits behind a connection being made, and a connection
    /// made after it (a higher generation) is untouched.
    lost: AtomicU64,
}

struct Kept<C> {
    current: Option<(u64, C)>,
    /// Counts the connections made (each one's generation).
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
            lost: AtomicU64::new(0),
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
        // Each address has its own connection timeout; `within` bounds them all, and the
        // wait behind another push's connection, so that a push stays within its budget.
        let asked = Instant::now();
        let deadline = asked + within;
        let no_connection = || {
            format!(
                "no connection within {}",
                humantime::format_duration(within)
            )
        };
        let Ok(mut state) = tokio::time::timeout_at(deadline, self.state.lock()).await else {
            return Err(no_connection());
        };
        if let Some((generation, connection)) = &state.current {
            if *generation > self.lost.load(Ordering::Acquire) && usable(connection) {
                return Ok(InUse {
                    connection: connection.clone(),
                    generation: *generation,
                });
            }
            state.current = None;
        }
        // Those who waited while it was tried share the last attempt's failure.
        if let Some((failed_at, reason)) = &state.failed {
            if *failed_at >= asked {
                return Err(reason.clone());
            }
        }
        // An attempt given less than an address's time (its push had waited long for the
        // lock) that runs out says nothing of the sink: those behind it dial themselves.
        let fair_attempt = deadline.saturating_duration_since(Instant::now()) >= CONNECT_TIMEOUT;
        let connected = match tokio::time::timeout_at(deadline, connect()).await {
            Ok(connected) => connected,
            Err(_elapsed) if !fair_attempt => return Err(no_connection()),
            Err(_elapsed) => Err(no_connection()),
        };
        match connected {
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

    /// Drops the connection `generation` (its push found it broken), if it is still kept;
    /// the next push makes another. Never waits.
    pub(crate) fn lost(&self, generation: u64) {
        self.lost.fetch_max(generation, Ordering::AcqRel);
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
        kept.lost(first.generation);
        let second = kept.get(|_| true, LONG, connect).await.unwrap();
        assert_eq!(second.connection, 1);
        // A push reporting the older connection lost late leaves the newer one alone.
        kept.lost(again.generation);
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

    /// A push on a task of its own, within `within`, whose connection (if it makes one)
    /// counts itself in `attempts` and then ends as `connect` does.
    fn push_connecting(
        kept: &Arc<KeptConnection<()>>,
        attempts: &Arc<AtomicUsize>,
        within: Duration,
        connect: impl Future<Output = Result<(), String>> + Send + 'static,
    ) -> tokio::task::JoinHandle<Result<InUse<()>, String>> {
        let (kept, attempts) = (kept.clone(), attempts.clone());
        tokio::spawn(async move {
            kept.get(
                |_| true,
                within,
                || async move {
                    attempts.fetch_add(1, Ordering::SeqCst);
                    connect.await
                },
            )
            .await
        })
    }

    /// Two pushes: the first holds the lock connecting until `first_connect` ends; the
    /// second waits behind it, and then `then` runs. Both answers, and how many
    /// connections were tried.
    async fn one_waiting_behind_another(
        first_within: Duration,
        first_connect: impl Future<Output = Result<(), String>> + Send + 'static,
        then: impl FnOnce(),
    ) -> (Result<InUse<()>, String>, Result<InUse<()>, String>, usize) {
        let kept = Arc::new(KeptConnection::<()>::new());
        let attempts = Arc::new(AtomicUsize::new(0));
        let first = push_connecting(&kept, &attempts, first_within, first_connect);
        while attempts.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        let waiting = push_connecting(&kept, &attempts, LONG, async { Ok(()) });
        tokio::task::yield_now().await;
        then();
        let (first, waiting) = (first.await.unwrap(), waiting.await.unwrap());
        (first, waiting, attempts.load(Ordering::SeqCst))
    }

    #[tokio::test]
    async fn pushes_waiting_for_a_failing_connection_share_its_failure() {
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let refused = async move {
            let _ = released.await;
            Err("refused".to_owned())
        };
        let (first, waiting, attempts) =
            one_waiting_behind_another(LONG, refused, || release.send(()).unwrap()).await;
        assert_eq!(first.err().as_deref(), Some("refused"));
        assert_eq!(waiting.err().as_deref(), Some("refused"));
        assert_eq!(attempts, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_that_never_comes_is_given_up_within_its_budget() {
        let kept = KeptConnection::<()>::new();
        let budget = Duration::from_secs(15);
        let given_up = kept
            .get(|_| true, budget, std::future::pending::<Result<(), String>>)
            .await;
        assert_eq!(given_up.err().as_deref(), Some("no connection within 15s"));
        // A push that asks after that failure connects afresh.
        tokio::time::advance(Duration::from_millis(1)).await;
        let connected = kept.get(|_| true, LONG, || async { Ok(()) }).await;
        assert_eq!(connected.unwrap().generation, 1);
    }

    /// A connection cut off by its push's budget is a failed attempt like any other: a
    /// push that waited behind it gets its failure rather than dialling again.
    #[tokio::test(start_paused = true)]
    async fn pushes_waiting_for_a_connection_that_ran_out_of_time_share_that() {
        let never = std::future::pending::<Result<(), String>>();
        let (first, waiting, attempts) =
            one_waiting_behind_another(Duration::from_secs(15), never, || ()).await;
        let expected = Some("no connection within 15s");
        assert_eq!(first.err().as_deref(), expected);
        assert_eq!(waiting.err().as_deref(), expected);
        assert_eq!(attempts, 1, "one attempt, shared");
    }

    /// An attempt left less than an address's time by its wait for the lock, which runs
    /// out, is not shared: the push behind it dials for itself.
    #[tokio::test(start_paused = true)]
    async fn an_attempt_cut_short_by_its_wait_is_not_shared() {
        let kept = Arc::new(KeptConnection::<()>::new());
        let attempts = Arc::new(AtomicUsize::new(0));
        // Holds the lock for 14 s, then connects.
        let slow = async {
            tokio::time::sleep(Duration::from_secs(14)).await;
            Ok(())
        };
        let first = push_connecting(&kept, &attempts, LONG, slow);
        while attempts.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        // Finds that connection unusable with 1 s of its 15 left, and dials in vain.
        let late = {
            let (kept, attempts) = (kept.clone(), attempts.clone());
            tokio::spawn(async move {
                kept.get(
                    |_| false,
                    Duration::from_secs(15),
                    || async move {
                        attempts.fetch_add(1, Ordering::SeqCst);
                        std::future::pending::<Result<(), String>>().await
                    },
                )
                .await
            })
        };
        tokio::task::yield_now().await;
        let behind = push_connecting(&kept, &attempts, LONG, async { Ok(()) });
        tokio::task::yield_now().await;
        assert_eq!(first.await.unwrap().unwrap().generation, 1);
        let late = late.await.unwrap();
        assert_eq!(late.err().as_deref(), Some("no connection within 15s"));
        assert_eq!(
            behind.await.unwrap().unwrap().generation,
            2,
            "dialled itself"
        );
        assert_eq!(attempts.load(Ordering::SeqCst), 3);
    }

    /// Reporting a connection lost never waits, even while the lock is held (by a push
    /// making a connection, say), and the connection it names is not handed out again
    /// though it would still pass as usable.
    #[tokio::test]
    async fn a_lost_connection_is_reported_while_the_lock_is_held_and_not_used_again() {
        let kept = KeptConnection::<usize>::new();
        let first = kept.get(|_| true, LONG, || async { Ok(0) }).await.unwrap();
        let held = kept.state.lock().await;
        kept.lost(first.generation);
        drop(held);
        let next = kept.get(|_| true, LONG, || async { Ok(1) }).await.unwrap();
        assert_eq!((next.connection, next.generation), (1, 2));
    }
}
