//! Staging: big cascades prepared ahead of time, a budgeted chunk per `advance`.
//!
//! Cascading a slot at level `L >= 1` re-places every timer in it, tens of nanoseconds each
//! (they are scattered over the slab): a slot of a million timers would stall the wheel, and
//! every timer due at that moment, for tens of milliseconds. So once the next slot of a level
//! holds more timers than one `advance` may move, and its start is within a lead time (see
//! [`staging_lead_ticks`]), `advance` moves its timers a budgeted chunk at a time into that
//! level's 64 staging buckets, one per slot of level `L - 1` in the block the slot covers.
//! Timers that would be placed in the slot meanwhile go straight into their bucket
//! ([`Staging::bucket_for`]). Every level stages on its own, so a long staging of a coarse slot
//! never holds up the frequent cascades of fine ones.
//!
//! When the clock reaches the slot's start `T`, each bucket's list is handed over to its slot
//! one level down: 64 list swaps, whatever the number of timers. Those slots are empty then.
//! The lead is at most one level-`L` slot, so staging began inside the slot just before `T`; no
//! multiple of `64^L` lies between then and `T`, so nothing cascades meanwhile from level `L`
//! or above (and slot 0 of a level below the top is never occupied, so nothing else starts at
//! `T`); every timer due before `T` sits in a slot that starts before `T` and is processed
//! first; and every timer due in `[T, T + 64^L)` is placed in the staged slot, that is, in its
//! bucket. Debug builds assert that the receiving slots are empty; should one not be, release
//! builds merge the bucket into it, so the wheel stays exact even if that reasoning had a hole.
//!
//! The top level is never staged: its clamped timers are re-checked rather than cascaded.

use super::geometry::{LEVEL_COUNT, SLOTS_PER_LEVEL, SLOT_BITS, TOP_LEVEL};
use super::handle::Expired;
use super::level::slot_for;
use super::lists::{bucket_home, slot_home};
use super::staging_levels::StagedSlot;
use super::state::Wheel;

impl<T> Wheel<T> {
    /// When staging next has work: now while a staged slot still holds timers, otherwise
    /// when the lead time of the next slot big enough to stage begins.
    pub(crate) fn next_staging_time(&self) -> Option<u64> {
        (1..TOP_LEVEL)
            .filter_map(|level| match self.staging.in_progress[level] {
                Some(staged) => {
                    let source = self.levels[level].slot_list(staged.slot);
                    (!self.lists.is_empty(source)).then_some(self.now)
                }
                None => {
                    let (start_tick, _) = self.next_to_stage(level)?;
                    let lead_start = start_tick.saturating_sub(staging_lead_ticks(level));
                    Some(lead_start.saturating_mul(self.tick).max(self.now))
                }
            })
            .min()
    }

    /// Starts staging the next big slot of each level whose lead time has begun, then moves
    /// up to the budget of timers into buckets, the staging that finishes first served first.
    pub(crate) fn stage_next_cascades(&mut self) {
        for level in 1..TOP_LEVEL {
            if let Some((start_tick, slot)) = self.next_to_stage(level) {
                if start_tick - self.elapsed_ticks <= staging_lead_ticks(level) {
                    self.staging.in_progress[level] = Some(StagedSlot { start_tick, slot });
                }
            }
        }
        let mut order: [(u64, usize); LEVEL_COUNT] = std::array::from_fn(|level| {
            let start =
                self.staging.in_progress[level].map_or(u64::MAX, |staged| staged.start_tick);
            (start, level)
        });
        order.sort_unstable();
        let mut budget = self.staging.budget;
        for (_, level) in order {
            if budget == 0 {
                break;
            }
            budget -= self.stage_entries(level, budget);
        }
    }

    /// At a staged slot's start (the elapsed tick): moves what is left into the buckets,
    /// hands each bucket's list over to its slot one level down, and re-places the first
    /// bucket's timers, whose slot starts now.
    pub(crate) fn finish_staging(&mut self, level: usize, expired: &mut Vec<Expired<T>>) {
        debug_assert_eq!(
            self.staging.in_progress[level].map(|staged| staged.start_tick),
            Some(self.elapsed_ticks),
            "a staging finishes exactly at its slot's start"
        );
        self.stage_entries(level, usize::MAX);
        self.staging.in_progress[level] = None;
        for bucket in 1..SLOTS_PER_LEVEL {
            self.hand_over_bucket(level, bucket);
        }
        self.replace_list(self.staging.bucket_lists[level][0], expired);
    }

    /// Makes the list of bucket `bucket` of `level` serve slot `bucket` one level down, and
    /// that slot's empty list serve the bucket.
    fn hand_over_bucket(&mut self, level: usize, bucket: usize) {
        let bucket_list = self.staging.bucket_lists[level][bucket];
        if self.lists.is_empty(bucket_list) {
            return;
        }
        let lower = level - 1;
        let vacant = self.levels[lower].slot_list(bucket);
        debug_assert!(
            self.lists.is_empty(vacant),
            "slot {bucket} of level {lower} was filled before the staging above it ended"
        );
        if !self.lists.is_empty(vacant) {
            for index in self.detach_list(bucket_list) {
                self.link_entry(index, vacant);
            }
            return;
        }
        self.levels[lower].hand_over_slot_list(bucket, bucket_list);
        self.staging.bucket_lists[level][bucket] = vacant;
        self.lists.rehome(bucket_list, slot_home(lower, bucket));
        self.lists.rehome(vacant, bucket_home(level, bucket));
        self.levels[lower].mark_occupied(bucket);
    }

    /// The next slot of `level` to start, with its start tick, if it is big enough to stage
    /// (it holds more timers than one `advance` may move) and no staging of that level is
    /// under way.
    fn next_to_stage(&self, level: usize) -> Option<(u64, usize)> {
        if self.staging.in_progress[level].is_some() {
            return None;
        }
        let start_tick = self.levels[level].next_slot_start(self.elapsed_ticks)?;
        let slot = slot_for(start_tick, level);
        let timers = self.lists.len(self.levels[level].slot_list(slot));
        (timers > self.staging.budget).then_some((start_tick, slot))
    }

    /// Moves up to `budget` timers from a level's staged slot into its buckets, from the end
    /// of the slot's list, so no other entry changes position. Returns how many it moved.
    fn stage_entries(&mut self, level: usize, budget: usize) -> usize {
        let Some(staged) = self.staging.in_progress[level] else {
            return 0;
        };
        let source = self.levels[level].slot_list(staged.slot);
        let mut moved = 0;
        while moved < budget {
            let Some(index) = self.lists.pop(source) else {
                break;
            };
            let when = self.deadline_tick(self.slab.entry(index).deadline);
            debug_assert_eq!(slot_for(when, level), staged.slot);
            let bucket = self.staging.bucket_lists[level][slot_for(when, level - 1)];
            self.link_entry(index, bucket);
            moved += 1;
        }
        if self.lists.is_empty(source) {
            self.levels[level].mark_empty(staged.slot);
        }
        moved
    }
}

/// How long before a slot of `level` starts its staging may begin: a slot below it (at least
/// 64 ticks), ample time at a budget per `advance`, yet late enough that timers cancelled or
/// moved long before their cascade are never staged for nothing.
fn staging_lead_ticks(level: usize) -> u64 {
    1u64 << (SLOT_BITS * (level.max(2) as u32 - 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wheel::handle::Handle;
    use crate::wheel::staging_levels::DEFAULT_STAGING_BUDGET;
    use crate::wheel::tests::advance_collect;

    #[test]
    fn a_big_cascade_is_staged_in_steps_and_swapped_in_at_its_start() {
        let mut wheel = Wheel::new(1, usize::MAX);
        let count = 5 * DEFAULT_STAGING_BUDGET as u64;
        // All in the level-1 slot starting at tick 128.
        let handles: Vec<Handle> = (0..count)
            .map(|value| wheel.insert(128 + value % 64, value as u32).unwrap())
            .collect();
        assert_eq!(wheel.next_wakeup(), Some(64), "staging starts a slot ahead");
        assert!(advance_collect(&mut wheel, 63).is_empty());
        assert_eq!(wheel.next_wakeup(), Some(64));
        assert!(advance_collect(&mut wheel, 64).is_empty());
        let mut steps = 1;
        while wheel.next_wakeup() == Some(wheel.now()) {
            let now = wheel.now();
            assert!(advance_collect(&mut wheel, now).is_empty());
            steps += 1;
        }
        assert_eq!(steps, 5, "one budget per advance");
        assert_eq!(wheel.next_wakeup(), Some(128));
        // Staged timers can still be cancelled and rescheduled, and new ones join them.
        assert_eq!(wheel.cancel(handles[3]), Some(3));
        assert!(wheel.reschedule(handles[4], 129));
        wheel.insert(130, 99_999).unwrap();
        assert!(advance_collect(&mut wheel, 127).is_empty());
        let at_start = advance_collect(&mut wheel, 128);
        assert_eq!(
            at_start.len(),
            (count / 64) as usize,
            "tick 128 fires at once"
        );
        assert!(at_start.iter().all(|&(deadline, _)| deadline == 128));
        let rest = advance_collect(&mut wheel, 191);
        assert_eq!(rest.len() + at_start.len(), count as usize);
        assert!(rest.windows(2).all(|pair| pair[0].0 <= pair[1].0));
        assert!(rest.contains(&(129, 4)) && rest.contains(&(130, 99_999)));
        assert!(wheel.is_empty());
    }

    #[test]
    fn each_level_stages_its_own_next_slot_and_every_timer_fires_in_its_tick() {
        let mut wheel = Wheel::new(1, usize::MAX);
        wheel.set_staging_budget(8);
        let level_3_start = 1u64 << 18;
        // Timers spread over the last level-2 slot before a level-3 slot and into it.
        let deadlines: Vec<u64> = (0..3000u64)
            .map(|value| level_3_start - 4000 + value * 3)
            .collect();
        for (value, &deadline) in deadlines.iter().enumerate() {
            wheel.insert(deadline, value as u32).unwrap();
        }
        let mut fired = Vec::new();
        let mut both_levels_staging = false;
        let mut level_3_fully_staged_in_time = false;
        for now in level_3_start - 4100..=level_3_start + 5000 {
            loop {
                let mut expired = Vec::new();
                wheel.advance(now, &mut expired);
                for timer in expired {
                    assert_eq!(timer.deadline, now, "fires in its own tick, never early");
                    fired.push(timer.value);
                }
                if wheel.next_wakeup() != Some(now) {
                    break;
                }
            }
            both_levels_staging |=
                wheel.staging.in_progress[1].is_some() && wheel.staging.in_progress[3].is_some();
            if now == level_3_start - 1 {
                let staged = wheel.staging.in_progress[3].expect("the level-3 slot is staged");
                let source = wheel.levels[3].slot_list(staged.slot);
                level_3_fully_staged_in_time = wheel.lists.is_empty(source);
            }
        }
        assert!(
            both_levels_staging,
            "a coarse staging does not hold up fine ones"
        );
        assert!(level_3_fully_staged_in_time);
        fired.sort_unstable();
        assert_eq!(fired, (0..3000).collect::<Vec<u32>>());
    }

    #[test]
    fn a_lower_slot_starting_before_a_staged_one_is_processed_first() {
        let mut wheel = Wheel::new(1, usize::MAX);
        wheel.set_staging_budget(1);
        wheel.insert(128, 1).unwrap();
        wheel.insert(129, 2).unwrap();
        assert!(advance_collect(&mut wheel, 64).is_empty());
        assert!(
            wheel.staging.in_progress[1].is_some(),
            "the slot at 128 is staged"
        );
        wheel.insert(100, 3).unwrap();
        assert_eq!(
            advance_collect(&mut wheel, 200),
            vec![(100, 3), (128, 1), (129, 2)]
        );
    }
}
