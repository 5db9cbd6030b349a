//! Slab storage for timer entries.
//!
//! Every timer lives in one growable array of entries (in fixed-size [`Chunks`], so growing
//! never moves one); a timer is named by its index plus a generation counter. The wheel keeps
//! each slot as a `Vec<u32>` of entry indices (see `lists`), and every linked entry records its
//! `location` and `position` there, so removing a timer from the middle of a slot is a
//! `swap_remove` plus fixing the moved entry's position: O(1), no allocation. Freed entries are
//! chained through the same `position` field into a free list and reused before the array grows.

use super::chunks::Chunks;

/// Marks "no entry" at the end of the free list.
pub(crate) const NO_INDEX: u32 = u32::MAX;

/// The `location` of an entry that is on no list (free, or allocated but not yet placed).
pub(crate) const LOCATION_FREE: u16 = u16::MAX;

/// One timer slot in the slab.
///
/// Kept deliberately small (32 bytes for `T = u32`): the wheel touches these in bulk when it
/// cascades, so cache footprint matters more than convenience.
#[derive(Debug)]
pub(crate) struct Entry<T> {
    /// Exact deadline in the caller's time unit; the wheel derives the tick from it on demand.
    pub(crate) deadline: u64,
    /// While linked: the entry's index within its list's vector. While free: the next free
    /// entry, or `NO_INDEX`.
    pub(crate) position: u32,
    /// Bumped every time the entry is freed, so handles issued earlier stop matching.
    pub(crate) generation: u32,
    /// Which list the entry is on (a [`ListId`](super::lists::ListId)), or `LOCATION_FREE`.
    pub(crate) location: u16,
    /// The caller's payload; `None` exactly when the entry is free.
    pub(crate) value: Option<T>,
}

/// The entry vector, its free list and the count of live entries.
///
/// Entries at or after `fresh_from` are free but on no list: whenever the slab empties, the
/// free list (scattered in firing order) is forgotten and allocation restarts at index 0, so
/// a wheel that drains and refills writes its entries in sequence instead of all over memory.
#[derive(Debug)]
pub(crate) struct Slab<T> {
    entries: Chunks<Entry<T>>,
    free_head: u32,
    fresh_from: usize,
    live_count: usize,
}

impl<T> Slab<T> {
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Slab {
            entries: Chunks::with_capacity(capacity),
            free_head: NO_INDEX,
            fresh_from: 0,
            live_count: 0,
        }
    }

    pub(crate) fn live_count(&self) -> usize {
        self.live_count
    }

    /// True if another entry can be allocated without exhausting the `u32` index space
    /// (`NO_INDEX` itself is reserved).
    pub(crate) fn has_room(&self) -> bool {
        self.free_head != NO_INDEX
            || self.fresh_from < self.entries.len()
            || self.entries.len() < NO_INDEX as usize
    }

    /// Stores a new timer, on no list, and returns its index. The caller must check `has_room`.
    pub(crate) fn allocate(&mut self, deadline: u64, value: T) -> u32 {
        self.live_count += 1;
        if self.free_head != NO_INDEX {
            let index = self.free_head;
            let entry = &mut self.entries[index as usize];
            self.free_head = entry.position;
            entry.deadline = deadline;
            entry.value = Some(value);
            return index;
        }
        if let Some(entry) = self.entries.get_mut(self.fresh_from) {
            let index = self.fresh_from as u32;
            self.fresh_from += 1;
            entry.deadline = deadline;
            entry.value = Some(value);
            return index;
        }
        self.fresh_from += 1;
        let index = u32::try_from(self.entries.len()).expect("caller checked has_room");
        self.entries.push(Entry {
            deadline,
            position: NO_INDEX,
            generation: 0,
            location: LOCATION_FREE,
            value: Some(value),
        });
        index
    }

    /// Frees an entry that is already off its list (or on a detached one) and returns its
    /// deadline, the generation its handle carried, and its value.
    pub(crate) fn release(&mut self, index: u32) -> (u64, u32, T) {
        let entry = &mut self.entries[index as usize];
        let value = entry.value.take().expect("released entry must be live");
        let generation = entry.generation;
        entry.generation = generation.wrapping_add(1);
        entry.location = LOCATION_FREE;
        entry.position = self.free_head;
        self.free_head = index;
        self.live_count -= 1;
        let deadline = entry.deadline;
        if self.live_count == 0 {
            self.free_head = NO_INDEX;
            self.fresh_from = 0;
        }
        (deadline, generation, value)
    }

    /// The live entry at `index` if its generation still matches; `None` for stale handles.
    pub(crate) fn live(&self, index: u32, generation: u32) -> Option<&Entry<T>> {
        self.entries
            .get(index as usize)
            .filter(|entry| entry.generation == generation && entry.value.is_some())
    }

    /// Mutable form of [`Slab::live`].
    pub(crate) fn live_mut(&mut self, index: u32, generation: u32) -> Option<&mut Entry<T>> {
        self.entries
            .get_mut(index as usize)
            .filter(|entry| entry.generation == generation && entry.value.is_some())
    }

    pub(crate) fn entry(&self, index: u32) -> &Entry<T> {
        &self.entries[index as usize]
    }

    pub(crate) fn entry_mut(&mut self, index: u32) -> &mut Entry<T> {
        &mut self.entries[index as usize]
    }

    /// Every entry, live or free, from `start` to the end of the slab, with its index.
    pub(crate) fn entries_from(&self, start: u32) -> impl Iterator<Item = (u32, &Entry<T>)> {
        self.entries
            .iter_from(start as usize)
            .zip(start..)
            .map(|(entry, index)| (index, entry))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freed_entries_are_reused_with_a_new_generation() {
        let mut slab = Slab::with_capacity(2);
        let keep = slab.allocate(5, "keep");
        let first = slab.allocate(10, "a");
        assert_eq!(slab.release(first), (10, 0, "a"));
        let second = slab.allocate(20, "b");
        assert_eq!(second, first);
        assert!(slab.live(second, 0).is_none());
        assert_eq!(slab.live(second, 1).map(|entry| entry.deadline), Some(20));
        assert_eq!(slab.live(keep, 0).map(|entry| entry.deadline), Some(5));
    }

    #[test]
    fn free_list_is_lifo_and_emptying_restarts_at_zero() {
        let mut slab = Slab::with_capacity(4);
        let indices: Vec<u32> = (0..4).map(|n| slab.allocate(n, n)).collect();
        assert_eq!(indices, vec![0, 1, 2, 3]);
        slab.release(1);
        slab.release(3);
        assert_eq!(slab.allocate(7, 7), 3);
        assert_eq!(slab.allocate(8, 8), 1);
        for index in [0, 1, 2, 3] {
            slab.release(index);
        }
        assert_eq!(slab.live_count(), 0);
        // Sequential again from index 0, with the old entries' generations still bumped.
        assert_eq!(slab.allocate(9, 9), 0);
        assert_eq!(slab.allocate(9, 9), 1);
        assert!(slab.live(1, 2).is_some());
        let live = slab
            .entries_from(0)
            .filter(|(_, entry)| entry.value.is_some());
        assert_eq!(live.count(), 2);
        assert_eq!(
            slab.entries_from(3)
                .map(|(index, _)| index)
                .collect::<Vec<_>>(),
            [3]
        );
        assert_eq!(slab.entries_from(9).count(), 0);
    }

    #[test]
    fn entry_is_at_most_32_bytes_for_u32_values() {
        assert!(std::mem::size_of::<Entry<u32>>() <= 32);
    }
}
