//! The staging state of every level (see `staging.rs` for what staging is and how
//! `advance` drives it): which slot each level is preparing, and its 64 buckets.

use super::geometry::{LEVEL_COUNT, SLOTS_PER_LEVEL, TOP_LEVEL};
use super::level::slot_for;
use super::lists::{bucket_home, ListId};

/// Entries moved into the staging buckets per `advance` call by default: about 20-30 µs of
/// work, so timers due meanwhile wait no longer than that.
pub(crate) const DEFAULT_STAGING_BUDGET: usize = 1024;

/// The staging state of every level: which slot each is preparing, and its buckets.
#[derive(Debug)]
pub(crate) struct Staging {
    /// Per level, the slot whose cascade is being prepared. Always `None` for level 0 (it
    /// never cascades) and the top level.
    pub(super) in_progress: [Option<StagedSlot>; LEVEL_COUNT],
    /// The list serving each staging bucket of each level; bucket `b` of level `L` receives
    /// the timers bound for slot `b` of level `L - 1`.
    pub(super) bucket_lists: [[ListId; SLOTS_PER_LEVEL]; LEVEL_COUNT],
    /// Timers moved into buckets per `advance` call (at least 1).
    pub(super) budget: usize,
}

/// A level's slot whose cascade is being prepared.
#[derive(Clone, Copy, Debug)]
pub(crate) struct StagedSlot {
    /// Tick at which the slot starts, when its buckets are handed over.
    pub(super) start_tick: u64,
    pub(super) slot: usize,
}

impl Staging {
    pub(crate) fn new() -> Self {
        Staging {
            in_progress: [None; LEVEL_COUNT],
            bucket_lists: std::array::from_fn(|level| {
                std::array::from_fn(|bucket| bucket_home(level, bucket))
            }),
            budget: DEFAULT_STAGING_BUDGET,
        }
    }

    pub(crate) fn set_budget(&mut self, budget: usize) {
        self.budget = budget.max(1);
    }

    /// Where a timer for tick `when`, which belongs at `level` below the top, must go instead
    /// of its slot: its bucket if that slot is being staged.
    #[inline]
    pub(crate) fn bucket_for(&self, level: usize, when: u64) -> Option<ListId> {
        debug_assert!(level < TOP_LEVEL);
        let staged = self.in_progress[level]?;
        (staged.slot == slot_for(when, level))
            .then(|| self.bucket_lists[level][slot_for(when, level - 1)])
    }

    /// The staging that finishes first, as (start tick, level).
    #[inline]
    pub(crate) fn earliest(&self) -> Option<(u64, usize)> {
        (1..TOP_LEVEL)
            .filter_map(|level| Some((self.in_progress[level]?.start_tick, level)))
            .min()
    }

    /// Every bucket's list, of every level.
    pub(crate) fn bucket_lists(&self) -> impl Iterator<Item = ListId> + '_ {
        self.bucket_lists.iter().flatten().copied()
    }

    /// Forgets every staging under way, for when every timer is taken off the wheel at once
    /// (a long jump, a drain): the buckets' timers go with the rest.
    pub(crate) fn abandon_all(&mut self) {
        self.in_progress = [None; LEVEL_COUNT];
    }
}
