//! Moving the wheel's clock: [`Wheel::advance`] fires what is due and cascades the slots
//! it reaches, [`Wheel::next_expiration`] and [`Wheel::next_wakeup`] say when that is
//! next worth calling, and [`Wheel::drain`] takes everything off at once.

use super::geometry::{LEVEL_COUNT, WHEEL_SPAN_TICKS};
use super::handle::{Expired, Handle};
use super::level::slot_for;
use super::lists::{ListId, DUE_LIST};
use super::state::Wheel;

/// Entries whose deadlines are loaded together before any is re-placed (see `replace_all`).
const REPLACE_CHUNK: usize = 256;

impl<T> Wheel<T> {
    /// Fires every timer whose tick is at or before `floor(now / tick)`, plus every timer inserted
    /// with a deadline at or before the previous `now()`, appending them to `expired` sorted by
    /// deadline (equal deadlines in no particular order). A `now` earlier than `now()` is treated
    /// as `now()`: time never goes back.
    pub fn advance(&mut self, now: u64, expired: &mut Vec<Expired<T>>) {
        let now = now.max(self.now);
        let target_tick = now / self.tick;
        let batch_start = expired.len();
        if target_tick - self.elapsed_ticks >= WHEEL_SPAN_TICKS {
            self.jump_to(target_tick, expired);
        } else {
            self.step_to(target_tick, expired);
        }
        self.elapsed_ticks = target_tick;
        self.now = now;
        self.fire_list(DUE_LIST, expired);
        self.stage_next_cascades();
        sort_by_deadline(&mut expired[batch_start..]);
    }

    /// The earliest time at which `advance` could have work to do (fire or cascade): `None` if
    /// empty, at or before `now()` if something is already due. O(levels) via the bitmaps.
    pub fn next_expiration(&self) -> Option<u64> {
        if self.is_empty() {
            return None;
        }
        if !self.lists.is_empty(DUE_LIST) {
            return Some(self.now);
        }
        let slot_start_tick = self.earliest_slot_start().map(|(start, _)| start);
        let staged_start = self.staging.earliest().map(|(start, _)| start);
        let earliest = earlier(slot_start_tick, staged_start)?;
        Some(earliest.saturating_mul(self.tick))
    }

    /// When the owner of the wheel should next call `advance`: [`Wheel::next_expiration`],
    /// now while a cascade is still being prepared, or when the lead time of the next big
    /// one begins (see the `staging` module), so that the preparation proceeds in small steps between
    /// the owner's other work instead of all at once when the slot comes due.
    pub fn next_wakeup(&self) -> Option<u64> {
        earlier(self.next_expiration(), self.next_staging_time())
    }

    /// Removes and returns every pending timer, sorted by deadline (Netty's `stop()`).
    pub fn drain(&mut self) -> Vec<Expired<T>> {
        let mut drained = Vec::with_capacity(self.len());
        for location in self.occupied_locations_in_processing_order() {
            self.fire_list(location, &mut drained);
        }
        self.fire_list(DUE_LIST, &mut drained);
        self.staging.abandon_all();
        sort_by_deadline(&mut drained);
        drained
    }

    /// Re-places or fires every entry of a detached list (see `replace_or_fire`).
    ///
    /// Works in chunks: first the chunk's deadlines are loaded in a tight loop, whose loads are
    /// independent so the CPU keeps many cache misses in flight (a big slot's entries are
    /// scattered over the slab), then each entry is placed, touching lines that are now cached.
    fn replace_all(&mut self, list: &[u32], expired: &mut Vec<Expired<T>>) {
        let mut deadlines = [0u64; REPLACE_CHUNK];
        for chunk in list.chunks(REPLACE_CHUNK) {
            for (deadline, &index) in deadlines.iter_mut().zip(chunk) {
                *deadline = self.slab.entry(index).deadline;
            }
            for (&index, &deadline) in chunk.iter().zip(&deadlines) {
                self.replace_or_fire(index, deadline, expired);
            }
        }
    }

    /// Re-places an entry (whose deadline is `deadline`) taken off a slot during `advance`: fires
    /// it if its tick has come, otherwise links it relative to the (new) elapsed tick.
    fn replace_or_fire(&mut self, index: u32, deadline: u64, expired: &mut Vec<Expired<T>>) {
        let when = self.deadline_tick(deadline);
        if when <= self.elapsed_ticks {
            expired.push(self.release_expired(index));
        } else {
            self.link_entry(index, self.slot_location(when));
        }
    }

    /// Processes occupied slots one start tick at a time up to `target_tick`. Only occupied slots
    /// are visited, so a long gap costs O(timers * levels), not O(gap).
    fn step_to(&mut self, target_tick: u64, expired: &mut Vec<Expired<T>>) {
        loop {
            let slot_event = self.earliest_slot_start();
            // A staged slot is finished at its start once every slot starting earlier has
            // been processed (occupied slots of lower levels may start before it).
            if let Some((start, level)) = self.staging.earliest() {
                let slots_first = slot_event.is_some_and(|(slot_start, _)| slot_start < start);
                if start <= target_tick && !slots_first {
                    self.elapsed_ticks = start;
                    self.finish_staging(level, expired);
                    continue;
                }
            }
            let Some((slot_start_tick, levels)) = slot_event else {
                break;
            };
            if slot_start_tick > target_tick {
                break;
            }
            self.elapsed_ticks = slot_start_tick;
            // Lowest level first, matching the order of deadlines between levels.
            for level in (0..LEVEL_COUNT).filter(|level| levels & (1 << level) != 0) {
                let slot = slot_for(slot_start_tick, level);
                self.replace_list(self.levels[level].slot_list(slot), expired);
            }
        }
    }

    /// Handles a clock jump of at least a whole wheel span: every slot would be processed at
    /// least once, so detach every slot list (in the order they would have been processed) and
    /// re-place each timer relative to the target tick.
    fn jump_to(&mut self, target_tick: u64, expired: &mut Vec<Expired<T>>) {
        let detached: Vec<(ListId, Vec<u32>)> = self
            .occupied_locations_in_processing_order()
            .into_iter()
            .map(|location| (location, self.detach_list(location)))
            .collect();
        self.staging.abandon_all();
        self.elapsed_ticks = target_tick;
        for (location, list) in detached {
            self.replace_all(&list, expired);
            self.lists.give_back(location, list);
        }
    }

    /// Takes a slot list off the wheel and re-places or fires each of its timers.
    pub(super) fn replace_list(&mut self, location: ListId, expired: &mut Vec<Expired<T>>) {
        let list = self.detach_list(location);
        self.replace_all(&list, expired);
        self.lists.give_back(location, list);
    }

    /// Fires every timer on a list, in list order.
    fn fire_list(&mut self, location: ListId, expired: &mut Vec<Expired<T>>) {
        let list = self.detach_list(location);
        expired.reserve(list.len());
        for &index in &list {
            expired.push(self.release_expired(index));
        }
        self.lists.give_back(location, list);
    }

    fn release_expired(&mut self, index: u32) -> Expired<T> {
        let (deadline, generation, value) = self.slab.release(index);
        Expired {
            handle: Handle { index, generation },
            deadline,
            value,
        }
    }

    /// The earliest slot start over all levels, with a bitmask of the levels that start a slot
    /// then (several levels can share a start tick).
    fn earliest_slot_start(&self) -> Option<(u64, u8)> {
        let mut earliest: Option<(u64, u8)> = None;
        for (level, level_slots) in self.levels.iter().enumerate() {
            let Some(start) = level_slots.next_slot_start(self.elapsed_ticks) else {
                continue;
            };
            earliest = match earliest {
                Some((best, levels)) if best < start => Some((best, levels)),
                Some((best, levels)) if best == start => Some((best, levels | (1 << level))),
                _ => Some((start, 1 << level)),
            };
        }
        earliest
    }

    /// Every occupied slot list, ordered by when `advance` would process it (ties: lower level
    /// first), then the non-empty staging buckets.
    fn occupied_locations_in_processing_order(&self) -> Vec<ListId> {
        let mut slots: Vec<(u64, ListId)> = self
            .levels
            .iter()
            .flat_map(|level| level.occupied_lists_with_offsets(self.elapsed_ticks))
            .collect();
        slots.sort_unstable();
        let staged = self
            .staging
            .bucket_lists()
            .filter(|&bucket| !self.lists.is_empty(bucket));
        slots
            .into_iter()
            .map(|(_, location)| location)
            .chain(staged)
            .collect()
    }
}

/// Sorts a batch by deadline. Batches are mostly runs that are already sorted (or nearly), which
/// the standard sort detects.
fn sort_by_deadline<T>(batch: &mut [Expired<T>]) {
    batch.sort_unstable_by_key(|fired| fired.deadline);
}

/// The earlier of two optional times.
fn earlier(first: Option<u64>, second: Option<u64>) -> Option<u64> {
    first.into_iter().chain(second).min()
}
