//! Limits on long-lived streams: Subscribe and KeepAlive, per connection and in total, and
//! observers in total.
//!
//! `--max-concurrent-calls` counts a call until its response headers go out, which for a
//! stream is at once; a stream then holds memory (its channel, its answers in flight) and,
//! for an observer, costs one send per expiration of its namespace, for as long as it
//! lives. So each stream holds a [`StreamPermit`] from its start to its end, and a stream
//! past a limit is refused with RESOURCE_EXHAUSTED naming the flag.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::Status;

/// The streams open on one connection; the server puts it in each request's extensions.
#[derive(Debug, Default)]
pub(crate) struct ConnectionStreams {
    subscribe: AtomicUsize,
    keepalive: AtomicUsize,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct StreamLimitsConfig {
    pub(crate) max_subscribe_streams: usize,
    pub(crate) max_subscribe_streams_per_connection: usize,
    pub(crate) max_keepalive_streams: usize,
    pub(crate) max_keepalive_streams_per_connection: usize,
    pub(crate) max_observers: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreamKind {
    Subscribe,
    Observer,
    KeepAlive,
}

/// The totals, shared by every connection.
#[derive(Debug, Clone)]
pub(crate) struct StreamLimits {
    config: StreamLimitsConfig,
    subscribe: Arc<Semaphore>,
    keepalive: Arc<Semaphore>,
    observers: Arc<Semaphore>,
}

impl StreamLimits {
    pub(crate) fn new(config: StreamLimitsConfig) -> Self {
        Self {
            config,
            subscribe: Arc::new(Semaphore::new(config.max_subscribe_streams)),
            keepalive: Arc::new(Semaphore::new(config.max_keepalive_streams)),
            observers: Arc::new(Semaphore::new(config.max_observers)),
        }
    }

    /// A place for one more stream of `kind`, or the refusal naming the limit it hit.
    /// An observer counts as a Subscribe stream too. Without `connection` (a request that
    /// did not come through tickd's listeners) only the totals apply.
    pub(crate) fn acquire(
        &self,
        kind: StreamKind,
        connection: Option<&Arc<ConnectionStreams>>,
    ) -> Result<StreamPermit, Status> {
        let (total, flag, per_connection, per_connection_flag) = match kind {
            StreamKind::Subscribe | StreamKind::Observer => (
                &self.subscribe,
                "--max-subscribe-streams",
                self.config.max_subscribe_streams_per_connection,
                "--max-subscribe-streams-per-connection",
            ),
            StreamKind::KeepAlive => (
                &self.keepalive,
                "--max-keepalive-streams",
                self.config.max_keepalive_streams_per_connection,
                "--max-keepalive-streams-per-connection",
            ),
        };
        let mut permit = StreamPermit {
            connection: None,
            kind,
            _total: Vec::with_capacity(2),
        };
        if let Some(streams) = connection {
            let open = streams.counter(kind).fetch_add(1, Ordering::AcqRel);
            // Counted first, so the permit gives it back however this ends.
            permit.connection = Some(streams.clone());
            if open >= per_connection {
                return Err(refusal(
                    kind,
                    per_connection,
                    per_connection_flag,
                    "on this connection",
                ));
            }
        }
        let limit = match kind {
            StreamKind::KeepAlive => self.config.max_keepalive_streams,
            _ => self.config.max_subscribe_streams,
        };
        permit._total.push(
            total
                .clone()
                .try_acquire_owned()
                .map_err(|_| refusal(kind, limit, flag, "in all"))?,
        );
        if kind == StreamKind::Observer {
            permit
                ._total
                .push(self.observers.clone().try_acquire_owned().map_err(|_| {
                    refusal(kind, self.config.max_observers, "--max-observers", "in all")
                })?);
        }
        Ok(permit)
    }
}

fn refusal(kind: StreamKind, limit: usize, flag: &str, scope: &str) -> Status {
    let what = match kind {
        StreamKind::Subscribe => "Subscribe streams",
        StreamKind::Observer => "observer Subscribe streams",
        StreamKind::KeepAlive => "KeepAlive streams",
    };
    Status::resource_exhausted(format!(
        "{limit} {what} are open {scope}, the limit ({flag}); close one or raise the limit"
    ))
}

impl ConnectionStreams {
    fn counter(&self, kind: StreamKind) -> &AtomicUsize {
        match kind {
            StreamKind::Subscribe | StreamKind::Observer => &self.subscribe,
            StreamKind::KeepAlive => &self.keepalive,
        }
    }
}

/// One stream's place; dropping it (when the stream ends) gives the place back.
#[derive(Debug)]
pub(crate) struct StreamPermit {
    connection: Option<Arc<ConnectionStreams>>,
    kind: StreamKind,
    _total: Vec<OwnedSemaphorePermit>,
}

impl Drop for StreamPermit {
    fn drop(&mut self) {
        if let Some(streams) = &self.connection {
            streams.counter(self.kind).fetch_sub(1, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> StreamLimits {
        StreamLimits::new(StreamLimitsConfig {
            max_subscribe_streams: 3,
            max_subscribe_streams_per_connection: 2,
            max_keepalive_streams: 1,
            max_keepalive_streams_per_connection: 1,
            max_observers: 1,
        })
    }

    #[test]
    fn refuses_past_each_limit_and_gives_places_back() {
        let limits = limits();
        let (first, second) = (Arc::default(), Arc::default());
        let a = limits.acquire(StreamKind::Subscribe, Some(&first)).unwrap();
        let _b = limits.acquire(StreamKind::Subscribe, Some(&first)).unwrap();
        let refused = limits
            .acquire(StreamKind::Subscribe, Some(&first))
            .unwrap_err();
        assert!(refused
            .message()
            .contains("--max-subscribe-streams-per-connection"));
        // The refusal took nothing: one more on another connection fits the total of 3.
        let _c = limits.acquire(StreamKind::Observer, Some(&second)).unwrap();
        let refused = limits
            .acquire(StreamKind::Subscribe, Some(&second))
            .unwrap_err();
        assert!(refused.message().contains("(--max-subscribe-streams)"));
        drop(a);
        let refused = limits
            .acquire(StreamKind::Observer, Some(&second))
            .unwrap_err();
        assert!(refused.message().contains("--max-observers"));
        let _d = limits
            .acquire(StreamKind::Subscribe, Some(&second))
            .unwrap();
        assert_eq!(first.subscribe.load(Ordering::Relaxed), 1);
        assert_eq!(second.subscribe.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn keepalive_streams_have_their_own_limits() {
        let limits = limits();
        let connection = Arc::default();
        let _subscribe = limits
            .acquire(StreamKind::Subscribe, Some(&connection))
            .unwrap();
        let keepalive = limits.acquire(StreamKind::KeepAlive, None).unwrap();
        let refused = limits
            .acquire(StreamKind::KeepAlive, Some(&connection))
            .unwrap_err();
        assert!(refused.message().contains("(--max-keepalive-streams)"));
        drop(keepalive);
        limits
            .acquire(StreamKind::KeepAlive, Some(&connection))
            .unwrap();
    }
}
