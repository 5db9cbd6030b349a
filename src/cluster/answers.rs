//! When the database last answered any statement of a replica's connections
//! ([`Answers`]): what readiness follows. Shared by the [`Database`](super::database)
//! the connections are opened from and each connection that records its answers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// When the database last answered a statement of any of the connections opened from one
/// [`Database`] (and the variants made from it: every connection of a replica).
///
/// Readiness follows this, not the lease round: what a client needs is a database that
/// answers its registrations and deliveries. A statement that waits on a lock is still
/// being served, and whichever of the replica's statements come back meanwhile show the
/// database reachable; a database that answers nothing (down, cut off, frozen) shows as
/// silence on every connection at once. The lease round runs every third of the lease,
/// so an idle replica with a reachable database is never silent for longer than that.
/// An error the server sends (a statement refused or cancelled) is an answer too; a
/// connection that closed or never answered is not.
#[derive(Clone)]
pub(crate) struct Answers {
    origin: Instant,
    /// Milliseconds after `origin` of the last answer.
    last_ms: Arc<AtomicU64>,
}

impl Default for Answers {
    fn default() -> Self {
        Self {
            origin: Instant::now(),
            last_ms: Arc::new(AtomicU64::new(0)),
        }
    }
}

impl Answers {
    /// Records `result` if it is the database's answer; passes it on.
    pub(super) fn record<T>(
        &self,
        result: Result<T, tokio_postgres::Error>,
    ) -> Result<T, tokio_postgres::Error> {
        let answered = match &result {
            Ok(_) => true,
            Err(error) => error.as_db_error().is_some(),
        };
        if answered {
            self.now();
        }
        result
    }

    /// The database answered just now (a statement, or a connection it accepted).
    pub(super) fn now(&self) {
        let now = self.origin.elapsed().as_millis() as u64;
        self.last_ms.fetch_max(now, Ordering::AcqRel);
    }

    /// How long since the database last answered (since these connections were opened,
    /// if it never has).
    pub(crate) fn silent_for(&self) -> Duration {
        let last = Duration::from_millis(self.last_ms.load(Ordering::Acquire));
        self.origin.elapsed().saturating_sub(last)
    }
}
