//! The table's index from timer id to the timer's handle in the wheel.
//!
//! Why not one hash map: ids are issued in sequence, and a hash map scatters consecutive
//! ids over its whole table, so at hundreds of thousands of pending timers every
//! registration's insert was a cache miss (and, while the map grew, page faults and
//! rehashes): about half of the worker's time in a burst of registrations, and the largest
//! part of what a NewTimeout costs beyond an empty call (`docs/performance.md`).
//!
//! So ids live in pages of [`PAGE_IDS`] consecutive ids, each a plain array of handles: a
//! burst of registrations fills one page after another in order, and a lookup is a small
//! map's hit plus one array read. A page that empties is freed. One that thins out below a
//! quarter full (timers that fire or are cancelled out of order leave a few behind) hands
//! its survivors to a hash map, [`ById`], and is freed, so that a page never costs more
//! than four slots per pending timer: as much as the hash map would.
//!
//! The invariants (checked by `debug_assert!` and the tests below):
//! - an id is in at most one place: its page, or the hash map;
//! - a page exists only while it holds a handle, and every page but the newest holds at
//!   least a quarter of its ids (the newest is looked at again once a newer one starts);
//! - a page is handed over only when it is older than the newest page, and no page older
//!   than the newest is ever created again, so the hash map never holds an id whose page
//!   exists. Ids that arrive out of order (replaying a snapshot) go to the hash map
//!   unless their page exists.

use rustc_hash::FxHashMap;

use super::by_id::ById;
use crate::wheel::Handle;

const PAGE_BITS: u32 = 10;
/// Consecutive ids a page holds.
const PAGE_IDS: usize = 1 << PAGE_BITS;
/// A page with fewer handles than this, older than the newest, moves them to the hash map.
const THIN_PAGE: u32 = (PAGE_IDS / 4) as u32;
/// An empty slot: a handle's packed form never has every bit set (the wheel's storage
/// index would be `u32::MAX`).
const EMPTY: u64 = u64::MAX;

struct Page {
    live: u32,
    slots: Box<[u64; PAGE_IDS]>,
}

impl Page {
    fn new() -> Self {
        Self {
            live: 0,
            slots: Box::new([EMPTY; PAGE_IDS]),
        }
    }
}

#[derive(Default)]
pub(super) struct IdIndex {
    pages: FxHashMap<u64, Page>,
    /// The highest page number created so far.
    newest_page: u64,
    /// Handles of ids whose page was handed over, or never created.
    scattered: ById<Handle>,
}

fn page_and_slot(id: u64) -> (u64, usize) {
    (id >> PAGE_BITS, (id as usize) & (PAGE_IDS - 1))
}

impl IdIndex {
    pub(super) fn get(&self, id: u64) -> Option<Handle> {
        let (page, slot) = page_and_slot(id);
        match self.pages.get(&page) {
            Some(page) => match page.slots[slot] {
                EMPTY => None,
                packed => Some(Handle::from_u64(packed)),
            },
            None => self.scattered.get(id).copied(),
        }
    }

    /// Sets the handle of `id`, replacing the one it had.
    pub(super) fn insert(&mut self, id: u64, handle: Handle) {
        let packed = handle.to_u64();
        debug_assert_ne!(packed, EMPTY, "a handle never packs to the empty slot");
        let (number, slot) = page_and_slot(id);
        if !self.pages.contains_key(&number) {
            if number < self.newest_page {
                self.scattered.insert(id, handle);
                return;
            }
            // Pages only ever start newer than the newest, and the map holds ids of older
            // pages only: an id of a page not yet started cannot be in it.
            debug_assert!(self.scattered.get(id).is_none());
            // The page that was the newest may have thinned out while it was: it goes now.
            let previous = self.newest_page;
            self.newest_page = number;
            self.pages.insert(number, Page::new());
            if self
                .pages
                .get(&previous)
                .is_some_and(|page| page.live < THIN_PAGE && previous < number)
            {
                self.hand_over(previous);
            }
        }
        let page = self
            .pages
            .get_mut(&number)
            .expect("present or just created");
        if page.slots[slot] == EMPTY {
            page.live += 1;
        }
        page.slots[slot] = packed;
        debug_assert!(self.scattered.get(id).is_none(), "id {id} in two places");
    }

    pub(super) fn remove(&mut self, id: u64) -> Option<Handle> {
        let (number, slot) = page_and_slot(id);
        let Some(page) = self.pages.get_mut(&number) else {
            return self.scattered.remove(id);
        };
        let packed = std::mem::replace(&mut page.slots[slot], EMPTY);
        if packed == EMPTY {
            return None;
        }
        page.live -= 1;
        if page.live == 0 {
            self.pages.remove(&number);
        } else if page.live < THIN_PAGE && number < self.newest_page {
            self.hand_over(number);
        }
        Some(Handle::from_u64(packed))
    }

    /// Moves a thinned-out page's handles to the hash map and frees the page.
    fn hand_over(&mut self, number: u64) {
        let page = self.pages.remove(&number).expect("handed over once");
        let first_id = number << PAGE_BITS;
        for (slot, &packed) in page.slots.iter().enumerate() {
            if packed != EMPTY {
                self.scattered
                    .insert(first_id + slot as u64, Handle::from_u64(packed));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn handle(n: u64) -> Handle {
        Handle::from_u64(n)
    }

    #[test]
    fn a_burst_fills_pages_in_order_and_emptied_pages_are_freed() {
        let mut index = IdIndex::default();
        for id in 1..=10 * PAGE_IDS as u64 {
            index.insert(id, handle(id));
        }
        assert_eq!(index.pages.len(), 11);
        assert_eq!(index.get(5), Some(handle(5)));
        for id in 1..=10 * PAGE_IDS as u64 {
            assert_eq!(index.remove(id), Some(handle(id)));
        }
        assert!(index.pages.is_empty());
        assert_eq!(index.get(5), None);
        assert_eq!(index.remove(5), None);
    }

    #[test]
    fn a_thinned_out_page_hands_its_survivors_to_the_hash_map() {
        let mut index = IdIndex::default();
        let ids = 2 * PAGE_IDS as u64;
        for id in 0..ids {
            index.insert(id, handle(id));
        }
        // Page 0 loses all but every eighth id: below a quarter, it goes.
        for id in (0..PAGE_IDS as u64).filter(|id| id % 8 != 0) {
            index.remove(id);
        }
        assert!(!index.pages.contains_key(&0));
        for id in (0..PAGE_IDS as u64).step_by(8) {
            assert_eq!(index.get(id), Some(handle(id)));
        }
        // Re-arming an id of the handed-over page replaces it where it is.
        index.insert(8, handle(99));
        assert_eq!(index.get(8), Some(handle(99)));
        assert!(!index.pages.contains_key(&0));
        // The newest page never goes to the hash map while it is the newest.
        for id in (PAGE_IDS as u64..ids).filter(|id| id % 8 != 0) {
            index.remove(id);
        }
        assert!(index.pages.contains_key(&1));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64),
        Remove(u64),
    }

    fn ops() -> impl Strategy<Value = Vec<Op>> {
        // Ids in a few pages' range, so pages fill, thin out and empty.
        let id = 0..(5 * PAGE_IDS as u64);
        prop::collection::vec(
            prop_oneof![
                3 => id.clone().prop_map(Op::Insert),
                2 => id.prop_map(Op::Remove),
            ],
            0..4000,
        )
    }

    proptest! {
        /// Whatever the order of inserts and removes, the index answers as a map would,
        /// and no page is kept empty or thinner than a quarter unless it is the newest.
        #[test]
        fn answers_as_a_map_would(ops in ops(), sequential in 0..3000u64) {
            let mut index = IdIndex::default();
            let mut model = HashMap::new();
            // A burst of consecutive ids first, as registrations make.
            for id in 0..sequential {
                index.insert(id, handle(id));
                model.insert(id, handle(id));
            }
            for (step, op) in ops.into_iter().enumerate() {
                match op {
                    Op::Insert(id) => {
                        let value = handle(id ^ (step as u64) << 20);
                        index.insert(id, value);
                        model.insert(id, value);
                    }
                    Op::Remove(id) => prop_assert_eq!(index.remove(id), model.remove(&id)),
                }
            }
            for id in 0..(5 * PAGE_IDS as u64) {
                prop_assert_eq!(index.get(id), model.get(&id).copied());
            }
            for (&number, page) in &index.pages {
                let held = page.slots.iter().filter(|&&slot| slot != EMPTY).count() as u32;
                prop_assert_eq!(page.live, held);
                prop_assert!(page.live > 0);
                prop_assert!(page.live >= THIN_PAGE || number == index.newest_page);
            }
        }
    }
}
