//! How many due timers one firing statement takes: at most [`MAX_BATCH`], and as many as
//! the last statements say fit in a target time.
//!
//! A count alone does not bound a statement's time: the same 10,000 timers that fire in a
//! fraction of a second on an idle database take seconds on a busy one, on a slow disk,
//! or under a per-row trigger an operator added. A statement that outlasts the lease is
//! refused by the fence's bound (see `firing::statement_bound`) and fires nothing, and
//! the next one, larger by what waited meanwhile, would fare worse. So the batch follows
//! the database's measured pace: after each statement the time per timer it took says how
//! many fit in the target (a small fraction of the lease), and the limit moves there,
//! down at once and up at most doubling. A backlog then drains at the database's pace, in
//! statements that each end well inside the lease.

use std::time::Duration;

/// Timers fired in one statement at most, however fast the database is: larger batches
/// gain little per timer, and hold the wheel's next due timers behind them longer.
const MAX_BATCH: usize = 10_000;

/// The limit never goes below this: one statement's fixed cost (its round trip, the
/// buffered count, the commit) is paid for at least this many timers.
const MIN_BATCH: usize = 16;

/// The first limit, before any statement was measured.
const FIRST_BATCH: usize = 256;

/// The limit on one firing statement's batch.
#[derive(Debug)]
pub(crate) struct BatchSize {
    limit: usize,
    target: Duration,
}

impl BatchSize {
    /// A limit that aims for statements of `target` each.
    pub(crate) fn new(target: Duration) -> Self {
        Self {
            limit: FIRST_BATCH,
            target,
        }
    }

    /// How many timers the next statement takes at most.
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// A statement fired `timers` (the batch it was given) in `took`. Slower than the
    /// target: the limit falls to what would have fit. Within it, with a full batch (so
    /// more were waiting): the limit grows towards what would fit, at most doubling, since
    /// a statement's time is not quite proportional to its batch. A batch smaller than the
    /// limit and within the target says nothing new.
    pub(crate) fn ran(&mut self, timers: usize, took: Duration) {
        if timers == 0 {
            return;
        }
        let fits = timers as u128 * self.target.as_nanos() / took.as_nanos().max(1);
        let fits = usize::try_from(fits).unwrap_or(usize::MAX);
        if took > self.target {
            self.limit = fits.clamp(MIN_BATCH, self.limit);
        } else if timers >= self.limit {
            self.limit = fits.min(self.limit * 2).clamp(self.limit, MAX_BATCH);
        }
    }

    /// A statement of `timers` ran into the bound and was cancelled: it says only that the
    /// batch was far too large, so the limit falls to a quarter of it.
    pub(crate) fn cancelled(&mut self, timers: usize) {
        self.limit = (timers.min(self.limit) / 4).max(MIN_BATCH);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TARGET: Duration = Duration::from_millis(200);

    fn ms(millis: u64) -> Duration {
        Duration::from_millis(millis)
    }

    #[test]
    fn full_batches_within_the_target_grow_the_limit_at_most_doubling_up_to_the_maximum() {
        let mut size = BatchSize::new(TARGET);
        assert_eq!(size.limit(), FIRST_BATCH);
        // 256 timers in 2 ms: 25,600 would fit, but the limit only doubles.
        size.ran(FIRST_BATCH, ms(2));
        assert_eq!(size.limit(), 2 * FIRST_BATCH);
        for _ in 0..10 {
            let limit = size.limit();
            size.ran(limit, ms(2));
        }
        assert_eq!(size.limit(), MAX_BATCH);
        // Growth stops short of the target: 512 timers in 150 ms, 682 fit.
        let mut size = BatchSize::new(TARGET);
        size.ran(FIRST_BATCH, ms(2));
        size.ran(512, ms(150));
        assert_eq!(size.limit(), 682);
    }

    #[test]
    fn a_statement_over_the_target_brings_the_limit_down_to_what_fits() {
        let mut size = BatchSize::new(TARGET);
        size.ran(FIRST_BATCH, ms(1));
        size.ran(512, ms(1));
        assert_eq!(size.limit(), 1_024);
        // 1,024 timers in 800 ms: a quarter would have fit.
        size.ran(1_024, ms(800));
        assert_eq!(size.limit(), 256);
        // However slow, never below the minimum.
        size.ran(256, Duration::from_secs(60));
        assert_eq!(size.limit(), MIN_BATCH);
    }

    #[test]
    fn small_batches_within_the_target_leave_the_limit_alone() {
        let mut size = BatchSize::new(TARGET);
        size.ran(10, ms(1));
        size.ran(0, ms(500));
        assert_eq!(size.limit(), FIRST_BATCH);
        // A small batch over the target does say the database is slow.
        size.ran(10, ms(400));
        assert_eq!(size.limit(), MIN_BATCH);
    }

    #[test]
    fn a_cancelled_statement_quarters_its_batch() {
        let mut size = BatchSize::new(TARGET);
        size.ran(FIRST_BATCH, ms(1));
        size.cancelled(512);
        assert_eq!(size.limit(), 128);
        size.cancelled(20);
        assert_eq!(size.limit(), MIN_BATCH);
    }
}
