//! Linking timers to the wheel's lists, and keeping the levels' occupancy bitmaps in step
//! with them: a slot's bit is set exactly when the list serving it holds a timer. Every
//! change to a list goes through here, so that contract holds in one place.

use super::geometry::TOP_LEVEL;
use super::level::{level_for, slot_for, top_level_slot_for};
use super::lists::{slot_of_home, ListId, DUE_LIST};
use super::slab::LOCATION_FREE;
use super::state::Wheel;

impl<T> Wheel<T> {
    /// The tick a deadline belongs to: `ceil(deadline / tick)`, so firing at that tick's start is
    /// never early.
    pub(super) fn deadline_tick(&self, deadline: u64) -> u64 {
        deadline.div_ceil(self.tick)
    }

    /// Links a freshly inserted or rescheduled (unlinked) entry: due list if its deadline has
    /// already passed, otherwise its wheel slot.
    pub(super) fn place_scheduled(&mut self, index: u32) {
        let deadline = self.slab.entry(index).deadline;
        if deadline <= self.now {
            self.link_entry(index, DUE_LIST);
        } else {
            // deadline > now >= elapsed * tick, so its tick is strictly after the elapsed tick.
            let when = self.deadline_tick(deadline);
            self.link_entry(index, self.slot_location(when));
        }
    }

    /// The list for tick `when`, which must be after the elapsed tick: its slot's list, or
    /// its staging bucket if that slot is being staged.
    pub(super) fn slot_location(&self, when: u64) -> ListId {
        debug_assert!(when > self.elapsed_ticks);
        let level = level_for(self.elapsed_ticks, when);
        if level >= TOP_LEVEL {
            let slot = top_level_slot_for(self.elapsed_ticks, when);
            return self.levels[TOP_LEVEL].slot_list(slot);
        }
        if let Some(bucket) = self.staging.bucket_for(level, when) {
            return bucket;
        }
        self.levels[level].slot_list(slot_for(when, level))
    }

    /// Empties a list and returns its indices (see [`ListPool::take`]), clearing its slot's
    /// occupancy bit.
    pub(super) fn detach_list(&mut self, location: ListId) -> Vec<u32> {
        let list = self.lists.take(location);
        self.note_list_emptied(location);
        list
    }

    /// Keeps the occupancy bitmaps in step with the lists: a list serving a slot just went
    /// from empty to holding a timer. Lists serving other homes have no bit.
    fn note_list_filled(&mut self, location: ListId) {
        debug_assert!(!self.lists.is_empty(location));
        if let Some((level, slot)) = slot_of_home(self.lists.home(location)) {
            self.levels[level].mark_occupied(slot);
        }
    }

    /// The counterpart of [`Wheel::note_list_filled`] for a list just emptied or taken off.
    fn note_list_emptied(&mut self, location: ListId) {
        debug_assert!(self.lists.is_empty(location));
        if let Some((level, slot)) = slot_of_home(self.lists.home(location)) {
            self.levels[level].mark_empty(slot);
        }
    }

    /// Puts an unlinked entry at the end of a list.
    pub(super) fn link_entry(&mut self, index: u32, location: ListId) {
        let entry = self.slab.entry_mut(index);
        if self.lists.link(location, index, entry) {
            self.note_list_filled(location);
        }
    }

    /// Takes a linked entry off its list, leaving its own `location` and `position` stale.
    pub(super) fn unlink_entry(&mut self, index: u32) {
        let entry = self.slab.entry(index);
        let (location, position) = (entry.location, entry.position);
        debug_assert_ne!(location, LOCATION_FREE);
        if let Some(moved) = self.lists.swap_remove(location, position, index) {
            self.slab.entry_mut(moved).position = position;
        } else if self.lists.is_empty(location) {
            self.note_list_emptied(location);
        }
    }
}
