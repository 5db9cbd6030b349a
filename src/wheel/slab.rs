//! Slab storage for timer entries and the intrusive doubly linked lists threaded through them.
//!
//! Every timer lives in one `Vec<Entry<T>>`; a timer is named by its index plus a generation
//! counter. Slot lists link entries by index (`prev`/`next`), so moving a timer between lists or
//! removing it from the middle of one is O(1) and costs no allocation. Freed entries are chained
//! through their `next` field into a free list and reused before the vector grows.

/// Marks "no entry" in `prev`/`next` links and list ends.
pub(super) const NO_INDEX: u32 = u32::MAX;

/// The `location` of an entry that is on the free list (holds no timer).
pub(super) const LOCATION_FREE: u16 = u16::MAX;

/// One timer slot in the slab.
///
/// Kept deliberately small (32 bytes for `T = u32`): the wheel touches these in bulk when it
/// cascades, so cache footprint matters more than convenience.
#[derive(Debug)]
pub(super) struct Entry<T> {
    /// Exact deadline in the caller's time unit; the wheel derives the tick from it on demand.
    pub(super) deadline: u64,
    /// Previous entry in the same list, or `NO_INDEX`.
    pub(super) prev: u32,
    /// Next entry in the same list (or in the free list), or `NO_INDEX`.
    pub(super) next: u32,
    /// Bumped every time the entry is freed, so handles issued earlier stop matching.
    pub(super) generation: u32,
    /// Which list the entry is on (see `Wheel`'s list numbering), or `LOCATION_FREE`.
    pub(super) location: u16,
    /// The caller's payload; `None` exactly when the entry is free.
    pub(super) value: Option<T>,
}

/// Head and tail of one intrusive list. Appending at the tail keeps insertion order, which the
/// wheel relies on to fire equal deadlines in the order they were scheduled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ListEnds {
    pub(super) head: u32,
    pub(super) tail: u32,
}

impl ListEnds {
    pub(super) const EMPTY: ListEnds = ListEnds {
        head: NO_INDEX,
        tail: NO_INDEX,
    };

    pub(super) fn is_empty(self) -> bool {
        self.head == NO_INDEX
    }
}

/// The entry vector, its free list and the count of live entries.
///
/// Entries at or after `fresh_from` are free but on no list: whenever the slab empties, the
/// free list (scattered in firing order) is forgotten and allocation restarts at index 0, so
/// a wheel that drains and refills writes its entries in sequence instead of all over memory.
#[derive(Debug)]
pub(super) struct Slab<T> {
    entries: Vec<Entry<T>>,
    free_head: u32,
    fresh_from: usize,
    live_count: usize,
}

impl<T> Slab<T> {
    pub(super) fn with_capacity(capacity: usize) -> Self {
        Slab {
            entries: Vec::with_capacity(capacity),
            free_head: NO_INDEX,
            fresh_from: 0,
            live_count: 0,
        }
    }

    pub(super) fn live_count(&self) -> usize {
        self.live_count
    }

    /// True if another entry can be allocated without exhausting the `u32` index space
    /// (`NO_INDEX` itself is reserved).
    pub(super) fn has_room(&self) -> bool {
        self.free_head != NO_INDEX
            || self.fresh_from < self.entries.len()
            || self.entries.len() < NO_INDEX as usize
    }

    /// Stores a new timer, unlinked, and returns its index. The caller must check `has_room`.
    pub(super) fn allocate(&mut self, deadline: u64, value: T) -> u32 {
        self.live_count += 1;
        if self.free_head != NO_INDEX {
            let index = self.free_head;
            let entry = &mut self.entries[index as usize];
            self.free_head = entry.next;
            entry.deadline = deadline;
            entry.prev = NO_INDEX;
            entry.next = NO_INDEX;
            entry.value = Some(value);
            return index;
        }
        if let Some(entry) = self.entries.get_mut(self.fresh_from) {
            let index = self.fresh_from as u32;
            self.fresh_from += 1;
            entry.deadline = deadline;
            entry.prev = NO_INDEX;
            entry.next = NO_INDEX;
            entry.value = Some(value);
            return index;
        }
        self.fresh_from += 1;
        let index = u32::try_from(self.entries.len()).expect("caller checked has_room");
        self.entries.push(Entry {
            deadline,
            prev: NO_INDEX,
            next: NO_INDEX,
            generation: 0,
            location: LOCATION_FREE,
            value: Some(value),
        });
        index
    }

    /// Frees an entry that is already unlinked (or on a detached list) and returns its deadline,
    /// the generation its handle carried, and its value.
    pub(super) fn release(&mut self, index: u32) -> (u64, u32, T) {
        let entry = &mut self.entries[index as usize];
        let value = entry.value.take().expect("released entry must be live");
        let generation = entry.generation;
        entry.generation = generation.wrapping_add(1);
        entry.location = LOCATION_FREE;
        entry.prev = NO_INDEX;
        entry.next = self.free_head;
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
    pub(super) fn live(&self, index: u32, generation: u32) -> Option<&Entry<T>> {
        self.entries
            .get(index as usize)
            .filter(|entry| entry.generation == generation && entry.value.is_some())
    }

    /// Mutable form of [`Slab::live`].
    pub(super) fn live_mut(&mut self, index: u32, generation: u32) -> Option<&mut Entry<T>> {
        self.entries
            .get_mut(index as usize)
            .filter(|entry| entry.generation == generation && entry.value.is_some())
    }

    pub(super) fn entry(&self, index: u32) -> &Entry<T> {
        &self.entries[index as usize]
    }

    pub(super) fn entry_mut(&mut self, index: u32) -> &mut Entry<T> {
        &mut self.entries[index as usize]
    }

    /// Appends an unlinked entry to the tail of `list` and records `location` on it.
    pub(super) fn push_back(&mut self, list: &mut ListEnds, index: u32, location: u16) {
        let old_tail = list.tail;
        {
            let entry = self.entry_mut(index);
            entry.prev = old_tail;
            entry.next = NO_INDEX;
            entry.location = location;
        }
        if old_tail == NO_INDEX {
            list.head = index;
        } else {
            self.entry_mut(old_tail).next = index;
        }
        list.tail = index;
    }

    /// Removes an entry from the middle, head or tail of `list` in O(1).
    pub(super) fn unlink(&mut self, list: &mut ListEnds, index: u32) {
        let (prev, next) = {
            let entry = self.entry(index);
            (entry.prev, entry.next)
        };
        if prev == NO_INDEX {
            list.head = next;
        } else {
            self.entry_mut(prev).next = next;
        }
        if next == NO_INDEX {
            list.tail = prev;
        } else {
            self.entry_mut(next).prev = prev;
        }
        let entry = self.entry_mut(index);
        entry.prev = NO_INDEX;
        entry.next = NO_INDEX;
    }

    /// Live entries with their indices, in slab order.
    pub(super) fn iter_live(&self) -> impl Iterator<Item = (u32, &Entry<T>)> {
        self.entries
            .iter()
            .enumerate()
            .filter(|(_, entry)| entry.value.is_some())
            .map(|(index, entry)| (index as u32, entry))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freed_entries_are_reused_with_a_new_generation() {
        let mut slab = Slab::with_capacity(2);
        let first = slab.allocate(10, "a");
        assert_eq!(slab.release(first), (10, 0, "a"));
        let second = slab.allocate(20, "b");
        assert_eq!(second, first);
        assert!(slab.live(second, 0).is_none());
        assert_eq!(slab.live(second, 1).map(|entry| entry.deadline), Some(20));
    }

    #[test]
    fn unlink_from_middle_keeps_the_rest_in_order() {
        let mut slab = Slab::with_capacity(3);
        let mut list = ListEnds::EMPTY;
        let indices: Vec<u32> = (0..3).map(|n| slab.allocate(n, n)).collect();
        for &index in &indices {
            slab.push_back(&mut list, index, 0);
        }
        slab.unlink(&mut list, indices[1]);
        assert_eq!(list.head, indices[0]);
        assert_eq!(slab.entry(indices[0]).next, indices[2]);
        assert_eq!(slab.entry(indices[2]).prev, indices[0]);
        assert_eq!(list.tail, indices[2]);
    }
}
