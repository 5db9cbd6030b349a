//! One level of the wheel.
//!
//! A [`Level`] owns its 64 slots and the occupancy bitmap over them. A slot at level `L` covers
//! `64^L` ticks. What a slot holds is the id of a list in the wheel's shared
//! [`ListPool`](super::lists::ListPool), not the list itself: staging hands whole lists from
//! the level above over to a level's slots (see [`super::staging`]), and the timers in them
//! keep naming their list by id, so the hand-over touches 64 ids instead of every timer.
//!
//! The bitmap makes "when does this level next have work" one rotate plus `trailing_zeros`,
//! however far away that is. Hidden contract: bit `s` is set exactly when the list serving slot
//! `s` is non-empty. The level cannot see the lists, so the wheel keeps the two in step: it
//! marks a slot occupied when its list gets its first timer and empty when the list is emptied
//! or taken off.
//!
//! The free functions map a tick to its level and slot as seen from the elapsed tick.

use super::geometry::{LEVEL_COUNT, SLOTS_PER_LEVEL, SLOT_BITS, SLOT_MASK, TOP_LEVEL};
use super::lists::{slot_home, ListId};

/// One level: which list serves each of its 64 slots, and which of those lists hold timers.
#[derive(Debug)]
pub(crate) struct Level {
    /// Bit `s` is set iff the list serving slot `s` is non-empty (kept so by the wheel).
    occupied_slots: u64,
    /// log2 of the ticks one slot of this level covers: `SLOT_BITS * level number`.
    slot_width_bits: u32,
    /// The list serving each slot. Starts as the list whose id is the slot's home; staging
    /// of the level above later hands other lists over (see [`Level::hand_over_slot_list`]).
    slot_lists: [ListId; SLOTS_PER_LEVEL],
}

impl Level {
    pub(crate) fn new(level: usize) -> Level {
        debug_assert!(level < LEVEL_COUNT);
        Level {
            occupied_slots: 0,
            slot_width_bits: SLOT_BITS * level as u32,
            slot_lists: std::array::from_fn(|slot| slot_home(level, slot)),
        }
    }

    /// The list currently serving `slot`.
    #[inline]
    pub(crate) fn slot_list(&self, slot: usize) -> ListId {
        self.slot_lists[slot]
    }

    /// Makes `list` (already filled with exactly the timers of `slot`) serve the slot, and
    /// returns the empty list it replaces so the caller can reuse it elsewhere. The slot must
    /// be empty: the caller then marks it occupied.
    pub(crate) fn hand_over_slot_list(&mut self, slot: usize, list: ListId) -> ListId {
        debug_assert!(
            !self.is_occupied(slot),
            "a slot handed a list must be empty"
        );
        std::mem::replace(&mut self.slot_lists[slot], list)
    }

    #[inline]
    pub(crate) fn is_occupied(&self, slot: usize) -> bool {
        self.occupied_slots & (1 << slot) != 0
    }

    /// Records that the list of `slot` just received its first timer.
    #[inline]
    pub(crate) fn mark_occupied(&mut self, slot: usize) {
        debug_assert!(
            !self.is_occupied(slot),
            "only an empty slot becomes occupied"
        );
        self.occupied_slots |= 1 << slot;
    }

    /// Records that the list of `slot` is empty (or was taken off). Idempotent: staging
    /// reports its source slot empty on every step once it has drained it.
    #[inline]
    pub(crate) fn mark_empty(&mut self, slot: usize) {
        self.occupied_slots &= !(1 << slot);
    }

    /// The tick at which the next occupied slot of this level starts, i.e. when `advance` must
    /// process it. Rotating the bitmap so the slot after the current one is bit 0 makes
    /// `trailing_zeros` the distance, wrap-around included (the current slot itself counts as a
    /// full rotation away: its present occurrence has already been processed). `None` if the
    /// level is empty or the start lies beyond `u64::MAX`.
    #[inline]
    pub(crate) fn next_slot_start(&self, elapsed_ticks: u64) -> Option<u64> {
        if self.occupied_slots == 0 {
            return None;
        }
        let current_slot = self.current_slot(elapsed_ticks);
        let rotated = self
            .occupied_slots
            .rotate_right(((current_slot + 1) & SLOT_MASK) as u32);
        let slots_ahead = u64::from(rotated.trailing_zeros()) + 1;
        let start = self
            .current_slot_start(elapsed_ticks)
            .checked_add(slots_ahead << self.slot_width_bits);
        debug_assert!(start.is_none_or(|start| start > elapsed_ticks));
        start
    }

    /// Every occupied slot's list with how many ticks after the start of the current slot the
    /// slot next starts, in bitmap order. Offsets from that one base compare like start ticks
    /// (across levels too) and cannot overflow, which start ticks near `u64::MAX` could.
    pub(crate) fn occupied_lists_with_offsets(
        &self,
        elapsed_ticks: u64,
    ) -> impl Iterator<Item = (u64, ListId)> + '_ {
        let current_slot = self.current_slot(elapsed_ticks);
        let mut remaining = self.occupied_slots;
        std::iter::from_fn(move || {
            if remaining == 0 {
                return None;
            }
            let slot = u64::from(remaining.trailing_zeros());
            remaining &= remaining - 1;
            let slots_ahead = (slot.wrapping_sub(current_slot + 1) & SLOT_MASK) + 1;
            Some((
                slots_ahead << self.slot_width_bits,
                self.slot_lists[slot as usize],
            ))
        })
    }

    /// The slot of this level the elapsed tick lies in.
    #[inline]
    fn current_slot(&self, elapsed_ticks: u64) -> u64 {
        (elapsed_ticks >> self.slot_width_bits) & SLOT_MASK
    }

    /// The first tick of the slot of this level the elapsed tick lies in.
    #[inline]
    fn current_slot_start(&self, elapsed_ticks: u64) -> u64 {
        (elapsed_ticks >> self.slot_width_bits) << self.slot_width_bits
    }
}

/// Level for tick `when` seen from `elapsed`: the 6-bit group of their highest differing bit,
/// at least 0 and possibly above `TOP_LEVEL` (the caller clamps, see [`top_level_slot_for`]).
#[inline]
pub(crate) fn level_for(elapsed: u64, when: u64) -> usize {
    let differing = (elapsed ^ when) | SLOT_MASK;
    let highest_bit = 63 - differing.leading_zeros();
    (highest_bit / SLOT_BITS) as usize
}

/// Slot of tick `when` within `level`.
#[inline]
pub(crate) fn slot_for(when: u64, level: usize) -> usize {
    ((when >> (SLOT_BITS * level as u32)) & SLOT_MASK) as usize
}

/// The top-level slot for a tick `when` after `elapsed` whose level is the top one or beyond.
/// Within one rotation of the top level that is `when`'s own slot (possibly in the next
/// rotation, which the wrap-around in [`Level::next_slot_start`] handles). Further away, the
/// timer is *clamped* into the farthest slot, the one just before the current, and re-placed
/// when that slot comes round: every such re-check moves it 63 top-level slots closer, so it
/// always ends up in its own slot.
#[inline]
pub(crate) fn top_level_slot_for(elapsed: u64, when: u64) -> usize {
    debug_assert!(when > elapsed);
    let top_shift = SLOT_BITS * TOP_LEVEL as u32;
    let current_top_slot = elapsed >> top_shift;
    let top_slots_ahead = (when >> top_shift) - current_top_slot;
    if top_slots_ahead < SLOTS_PER_LEVEL as u64 {
        return slot_for(when, TOP_LEVEL);
    }
    ((current_top_slot + SLOT_MASK) & SLOT_MASK) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_slot_start_skips_the_current_slot_and_wraps_around() {
        let mut level = Level::new(1);
        // Elapsed tick 200 lies in level-1 slot 3 (ticks 192..256).
        level.mark_occupied(3);
        assert_eq!(level.next_slot_start(200), Some(3 * 64 + 64 * 64));
        level.mark_occupied(5);
        assert_eq!(level.next_slot_start(200), Some(5 * 64));
        let offsets: Vec<u64> = level
            .occupied_lists_with_offsets(200)
            .map(|(offset, _)| offset)
            .collect();
        assert_eq!(offsets, [64 * 64, 2 * 64]);
        level.mark_empty(5);
        level.mark_empty(5);
        level.mark_empty(3);
        assert_eq!(level.next_slot_start(200), None);
    }

    #[test]
    fn far_timers_clamp_into_the_top_slot_before_the_current_one() {
        let top_slot_ticks = 1u64 << (SLOT_BITS * TOP_LEVEL as u32);
        let elapsed = 5 * top_slot_ticks + 17;
        assert_eq!(level_for(elapsed, elapsed + 1), 0);
        assert_eq!(level_for(elapsed, 70 * top_slot_ticks), 7);
        assert_eq!(top_level_slot_for(elapsed, 9 * top_slot_ticks), 9);
        assert_eq!(top_level_slot_for(elapsed, 66 * top_slot_ticks), 2);
        assert_eq!(top_level_slot_for(elapsed, 69 * top_slot_ticks), 4);
        assert_eq!(top_level_slot_for(elapsed, 1000 * top_slot_ticks), 4);
    }
}
