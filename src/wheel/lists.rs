//! The pool of timer lists behind the wheel's slots, its "due now" list and its staging
//! buckets, and the *home* (the slot, due list or bucket) each list currently serves.
//!
//! A list is a `Vec<u32>` of slab indices named by a [`ListId`]. Every linked entry records
//! the id of its list (`location`) and its index there (`position`), so inserting is a push and
//! removing from the middle is a `swap_remove` plus fixing the one entry moved into the gap,
//! all O(1). Cascading or firing iterates a dense array whose entry loads are independent, so
//! the CPU overlaps their cache misses instead of chasing a linked list.
//!
//! Why ids and homes rather than lists stored in their slots: staging fills a level's buckets
//! ahead of time and then hands each bucket's list over to a slot one level down (see
//! [`super::staging`]). Entries name their list by id, so the hand-over changes one home and
//! one slot's id per bucket instead of every timer's `location`. A [`Level`](super::level::Level)
//! and the [`Staging`](super::staging_levels::Staging) therefore hold ids into this one pool.
//!
//! Ids and homes share one numbering: `level * 64 + slot` for slots, then [`DUE_LIST`], then
//! `level * 64 + bucket` after it for the staging buckets of each level. At start every list
//! serves the home equal to its id; the due list never moves.
//!
//! A list keeps its allocation when it is emptied, so steady state allocates nothing (see
//! [`ListPool::give_back`] for when it is shrunk instead).

use super::geometry::{LEVEL_COUNT, SLOTS_PER_LEVEL};
use super::slab::Entry;

/// Names one list of the pool; also the type of an entry's `location`.
pub(crate) type ListId = u16;

/// Number of slot homes; also of bucket homes (64 buckets per level).
const SLOT_HOME_COUNT: usize = LEVEL_COUNT * SLOTS_PER_LEVEL;
/// The "due now" list, right after the slot homes. It is never handed over, so it is both a
/// list id and a home.
pub(crate) const DUE_LIST: ListId = SLOT_HOME_COUNT as u16;
/// The first bucket home, right after the due list.
const BUCKET_HOME_BASE: u16 = DUE_LIST + 1;
/// Every list: slots, due, staging buckets.
const LIST_COUNT: usize = SLOT_HOME_COUNT + 1 + SLOT_HOME_COUNT;
/// A list keeps its allocation across rotations unless its capacity exceeds both this and
/// four times what the list last held.
pub(crate) const RETAINED_CAPACITY_FLOOR: usize = 1024;

/// The home of slot `slot` of `level`.
#[inline]
pub(crate) fn slot_home(level: usize, slot: usize) -> u16 {
    (level * SLOTS_PER_LEVEL + slot) as u16
}

/// The home of staging bucket `bucket` of `level` (the one feeding slot `bucket` of
/// `level - 1`).
pub(crate) fn bucket_home(level: usize, bucket: usize) -> u16 {
    BUCKET_HOME_BASE + slot_home(level, bucket)
}

/// The level and slot a home names, or `None` for the due list and the buckets, which have no
/// occupancy bit.
#[inline]
pub(crate) fn slot_of_home(home: u16) -> Option<(usize, usize)> {
    let home = usize::from(home);
    (home < SLOT_HOME_COUNT).then_some((home / SLOTS_PER_LEVEL, home % SLOTS_PER_LEVEL))
}

/// Every list of slab indices, by id, with the home each serves.
#[derive(Debug)]
pub(crate) struct ListPool {
    lists: Vec<Vec<u32>>,
    /// The home of each list, by id.
    homes: Vec<u16>,
}

impl ListPool {
    pub(crate) fn new() -> Self {
        ListPool {
            lists: (0..LIST_COUNT).map(|_| Vec::new()).collect(),
            homes: (0..LIST_COUNT as u16).collect(),
        }
    }

    #[inline]
    pub(crate) fn len(&self, list: ListId) -> usize {
        self.lists[usize::from(list)].len()
    }

    #[inline]
    pub(crate) fn is_empty(&self, list: ListId) -> bool {
        self.lists[usize::from(list)].is_empty()
    }

    /// The slot, due list or bucket `list` serves.
    #[inline]
    pub(crate) fn home(&self, list: ListId) -> u16 {
        self.homes[usize::from(list)]
    }

    /// Records that `list` now serves `home` (staging's hand-over).
    pub(crate) fn rehome(&mut self, list: ListId, home: u16) {
        self.homes[usize::from(list)] = home;
    }

    /// Appends the slab index `index` to `list` and records in its entry where it went.
    /// Returns true if the list was empty before, so that its slot's occupancy bit can be set.
    #[inline]
    pub(crate) fn link<T>(&mut self, list: ListId, index: u32, entry: &mut Entry<T>) -> bool {
        let indices = &mut self.lists[usize::from(list)];
        entry.location = list;
        // A list never holds more than the slab's entries, whose indices fit in a u32.
        entry.position = indices.len() as u32;
        indices.push(index);
        indices.len() == 1
    }

    /// Removes `index`, found at `position`, by moving the last index into its place. Returns
    /// the moved index, whose entry must record `position`, or `None` if `index` was last.
    #[inline]
    pub(crate) fn swap_remove(&mut self, list: ListId, position: u32, index: u32) -> Option<u32> {
        let list = &mut self.lists[usize::from(list)];
        debug_assert_eq!(list[position as usize], index, "entry position out of date");
        list.swap_remove(position as usize);
        list.get(position as usize).copied()
    }

    /// Removes the last index, which moves no other entry.
    #[inline]
    pub(crate) fn pop(&mut self, list: ListId) -> Option<u32> {
        self.lists[usize::from(list)].pop()
    }

    /// Empties a list and returns its indices; their entries still record the old location
    /// and position until they are re-linked or released. Hand the vector back with
    /// [`ListPool::give_back`] to keep its allocation.
    pub(crate) fn take(&mut self, list: ListId) -> Vec<u32> {
        std::mem::take(&mut self.lists[usize::from(list)])
    }

    /// Gives a taken vector's allocation back to its list so the next rotation does not
    /// reallocate, unless its capacity is far above what the list just needed. The list may
    /// have been refilled meanwhile (a re-placed timer can land back in it): then the list
    /// keeps what it has unless it is still empty and smaller.
    pub(crate) fn give_back(&mut self, list: ListId, mut taken: Vec<u32>) {
        let used = taken.len();
        taken.clear();
        if taken.capacity() > RETAINED_CAPACITY_FLOOR && taken.capacity() / 4 > used {
            taken.shrink_to(used.max(RETAINED_CAPACITY_FLOOR));
        }
        let list = &mut self.lists[usize::from(list)];
        if list.is_empty() && list.capacity() < taken.capacity() {
            *list = taken;
        }
    }

    /// The largest capacity any list holds on to.
    #[cfg(test)]
    pub(crate) fn largest_capacity(&self) -> usize {
        self.lists.iter().map(Vec::capacity).max().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wheel::slab::LOCATION_FREE;

    #[test]
    fn homes_number_slots_then_the_due_list_then_buckets() {
        assert_eq!(slot_of_home(slot_home(3, 17)), Some((3, 17)));
        assert_eq!(slot_of_home(DUE_LIST), None);
        assert_eq!(bucket_home(1, 0), DUE_LIST + 1 + 64);
        assert_eq!(slot_of_home(bucket_home(1, 5)), None);
        let pool = ListPool::new();
        assert_eq!(pool.home(bucket_home(6, 63)), bucket_home(6, 63));
        assert_eq!(usize::from(bucket_home(6, 63)) + 1, LIST_COUNT);
    }

    #[test]
    fn link_records_the_position_and_swap_remove_reports_the_index_moved_into_the_gap() {
        let mut pool = ListPool::new();
        let list = slot_home(0, 1);
        let mut entries: Vec<Entry<()>> = (0..3)
            .map(|_| Entry {
                deadline: 0,
                position: 0,
                generation: 0,
                location: LOCATION_FREE,
                value: Some(()),
            })
            .collect();
        let first_links: Vec<bool> = (0..3)
            .map(|index| pool.link(list, 10 + index, &mut entries[index as usize]))
            .collect();
        assert_eq!(first_links, [true, false, false]);
        assert_eq!(entries[2].location, list);
        assert_eq!(entries[2].position, 2);
        assert_eq!(pool.swap_remove(list, 0, 10), Some(12));
        assert_eq!(pool.swap_remove(list, 1, 11), None);
        assert_eq!(pool.pop(list), Some(12));
        assert!(pool.is_empty(list));
    }
}
