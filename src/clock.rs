//! Where time enters tickd. The wheel never reads a clock itself; the worker, the store's
//! interval fsync, delivery's ack deadlines and the namespace registry ask a [`Clock`], so
//! that tests and the simulation (the `sim` feature) can drive time by hand with a
//! [`ManualClock`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// One reading of the clock, both as the monotonic time the wheel runs on and as the
/// wall-clock time that deadlines are reported (and stored) in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Now {
    /// Nanoseconds since the clock's origin; never goes back.
    pub monotonic: u64,
    /// Nanoseconds since the Unix epoch.
    pub unix: u64,
}

impl Now {
    /// The monotonic time at which the wall-clock instant `unix` falls, as seen from this
    /// reading. Wall-clock instants already past map to now.
    pub(crate) fn monotonic_at(self, unix: u64) -> u64 {
        self.monotonic
            .saturating_add(unix.saturating_sub(self.unix))
    }
}

pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> Now;
    /// Just the monotonic part of [`Clock::now`], for paths that need no wall clock.
    fn monotonic(&self) -> u64 {
        self.now().monotonic
    }
}

/// The real clock: `Instant` for the wheel, `SystemTime` for deadlines shown to clients.
#[derive(Clone, Copy)]
pub struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn monotonic(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }

    fn now(&self) -> Now {
        let unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since_epoch| since_epoch.as_nanos() as u64);
        Now {
            monotonic: self.monotonic(),
            unix,
        }
    }
}

/// A clock that only moves when told to; clones share the same time.
#[derive(Clone, Default)]
pub struct ManualClock {
    monotonic: Arc<AtomicU64>,
    unix_origin: u64,
}

impl ManualClock {
    /// Starts at monotonic zero, at the wall-clock time `unix_origin`.
    pub fn starting_at_unix(unix_origin: u64) -> Self {
        Self {
            monotonic: Arc::default(),
            unix_origin,
        }
    }

    pub fn advance(&self, nanos: u64) {
        self.monotonic.fetch_add(nanos, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Now {
        let monotonic = self.monotonic.load(Ordering::SeqCst);
        Now {
            monotonic,
            unix: self.unix_origin + monotonic,
        }
    }
}
