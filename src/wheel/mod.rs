//! A pure hierarchical hashed timing wheel: no clock, no IO, no runtime; the owner says what
//! time it is by calling [`Wheel::advance`].
//!
//! # Design
//!
//! Time is a plain `u64` in the caller's unit; the wheel only knows the length of one tick in that
//! unit. A deadline `d` belongs to tick `ceil(d / tick)` and the clock `now` is at tick
//! `floor(now / tick)` (the "elapsed tick"), so a timer can only fire once its whole tick has
//! passed.
//!
//! The wheel has 7 levels of 64 slots, as in the Linux and tokio wheels (`level`). A slot at
//! level `L` covers `64^L` ticks, so the wheel spans `2^42` ticks (about 139 years at 1 ms). A
//! timer for tick `when` goes to the level of the highest bit in which `when` differs from the
//! elapsed tick (`(elapsed ^ when) | 63`, so level 0 is the minimum), in slot `(when >> 6L) & 63`.
//! Each level keeps a `u64` occupancy bitmap, so the next non-empty slot of a level is one rotate
//! plus `trailing_zeros`: finding the next piece of work is O(levels) no matter how far away it
//! is, and catching up over a long gap jumps straight from one occupied slot to the next.
//!
//! When the clock reaches the start of an occupied slot above level 0, the slot is *cascaded*:
//! its timers are re-placed relative to the new elapsed tick, landing in lower levels or firing.
//! Cascades below the top level are prepared ahead of time, a budgeted chunk per `advance`, so
//! that reaching a slot of a million timers costs 64 list swaps rather than a million
//! re-placements while due timers wait (`staging`); [`Wheel::next_wakeup`] tells the owner
//! when such preparation is waiting.
//! Timers further away than the top level can express are *clamped* into the top-level slot just
//! before the current one and re-placed when that slot comes round (`level::top_level_slot_for`).
//! A gap of a whole wheel span or more is handled in one pass over every timer instead of slot by
//! slot.
//!
//! Timers inserted with a deadline at or before [`Wheel::now`] go on a separate "due now" list and
//! fire on the next [`Wheel::advance`].
//!
//! Timers live in a slab (`slab`, in fixed-size `chunks` so growing never moves them) with a free
//! list. Each slot, staging bucket and the due list is a vector of slab indices in one pool
//! (`lists`), and every entry records its list and its position there, so insert is a push and
//! cancel and reschedule are a `swap_remove` (all O(1)). A [`Handle`] carries the slab index and a
//! generation that is bumped whenever an entry is freed, so a stale handle never touches a timer
//! that reused its entry.
//!
//! # Guarantees
//!
//! * **Never early**: a timer fires only in an `advance(now)` with `deadline <= now`.
//! * **Less than one tick late**: after `advance(now)` returns, every timer whose deadline is at or
//!   before `tick * floor(now / tick)` has fired (and any timer inserted at or before the previous
//!   `now`), so lateness relative to the `advance` call is under one tick.
//! * **Ordered batches**: each batch appended by `advance` is sorted by deadline. The order among
//!   timers with *equal* deadlines is unspecified (removing a timer from a slot moves another one
//!   into its place, so slots do not keep insertion order).
//!
//! A deadline in the last, partial tick below `u64::MAX` (when `u64::MAX` is not a multiple of
//! the tick) belongs to a tick the clock can never reach, so such a timer stays pending until it is
//! cancelled or drained.

mod chunks;
mod geometry;
mod level;
mod lists;
mod slab;
mod staging;
#[cfg(test)]
mod tests;

use std::fmt;

use geometry::{LEVEL_COUNT, TOP_LEVEL, WHEEL_SPAN_TICKS};
use level::{level_for, slot_for, top_level_slot_for, Level};
use lists::{slot_of_home, ListId, ListPool, DUE_LIST};
use slab::{Slab, LOCATION_FREE};
use staging::Staging;

/// Entries whose deadlines are loaded together before any is re-placed (see `replace_all`).
const REPLACE_CHUNK: usize = 256;

/// A hierarchical hashed timing wheel holding values of type `T`. See the module docs.
pub struct Wheel<T> {
    tick: u64,
    max_pending: usize,
    /// Time passed to the last `advance` (never decreases).
    now: u64,
    /// Tick up to which the wheel has processed slots: `floor(now / tick)` between calls.
    elapsed_ticks: u64,
    slab: Slab<T>,
    /// Every list of slab indices: slots, due list, staging buckets. An entry's `location` is
    /// the id of the list it is on and its `position` is its index there.
    lists: ListPool,
    /// Which list serves each slot of each level, and which slots are occupied.
    levels: [Level; LEVEL_COUNT],
    /// Per level, the next cascade being prepared ahead of time, and its buckets.
    staging: Staging,
}

/// Names one scheduled timer. Stays unique across reuse of the timer's storage thanks to the
/// generation, so a handle to a fired or cancelled timer is simply stale.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Handle {
    index: u32,
    generation: u32,
}

impl Handle {
    /// Packs the handle into one integer (generation in the high half) for wire formats.
    pub fn to_u64(self) -> u64 {
        (u64::from(self.generation) << 32) | u64::from(self.index)
    }

    /// Inverse of [`Handle::to_u64`]. Any value is accepted; a nonsensical one is just stale.
    pub fn from_u64(raw: u64) -> Handle {
        Handle {
            index: raw as u32,
            generation: (raw >> 32) as u32,
        }
    }
}

/// A timer that fired (or was drained), with the handle it was scheduled under.
#[derive(Debug)]
pub struct Expired<T> {
    pub handle: Handle,
    pub deadline: u64,
    pub value: T,
}

/// Returned by [`Wheel::insert`] when `max_pending` timers are already pending.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("max pending timers reached (limit {limit})")]
pub struct WheelFull {
    pub limit: usize,
}

impl<T> Wheel<T> {
    /// `tick`: length of one tick in the caller's time unit (> 0). `max_pending`: insert beyond it
    /// fails with [`WheelFull`].
    ///
    /// # Panics
    /// If `tick` is zero.
    pub fn new(tick: u64, max_pending: usize) -> Self {
        Self::with_capacity(tick, max_pending, 0)
    }

    /// Like [`Wheel::new`] but pre-sizes the slab for `capacity` timers, so steady-state inserts
    /// up to that many never reallocate.
    ///
    /// # Panics
    /// If `tick` is zero.
    pub fn with_capacity(tick: u64, max_pending: usize, capacity: usize) -> Self {
        assert!(tick > 0, "wheel tick must be positive");
        Wheel {
            tick,
            max_pending,
            now: 0,
            elapsed_ticks: 0,
            slab: Slab::with_capacity(capacity),
            lists: ListPool::new(),
            levels: std::array::from_fn(Level::new),
            staging: Staging::new(),
        }
    }

    /// Sets how many timers of upcoming cascades one `advance` call moves into staging
    /// (default 1024, at least 1), which bounds the pause staging adds to a call. A slot
    /// holding no more than this is cascaded at its start, as without staging.
    pub fn set_staging_budget(&mut self, budget: usize) {
        self.staging.set_budget(budget);
    }

    /// Length of one tick in the caller's time unit.
    pub fn tick(&self) -> u64 {
        self.tick
    }

    /// The time of the last `advance` (starts at 0).
    pub fn now(&self) -> u64 {
        self.now
    }

    /// Number of pending (not yet fired or cancelled) timers.
    pub fn len(&self) -> usize {
        self.slab.live_count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn max_pending(&self) -> usize {
        self.max_pending
    }

    /// Schedules `value` for `deadline`. A deadline at or before `now()` is due at once: it fires
    /// on the next `advance`.
    pub fn insert(&mut self, deadline: u64, value: T) -> Result<Handle, WheelFull> {
        if self.len() >= self.max_pending {
            return Err(WheelFull {
                limit: self.max_pending,
            });
        }
        self.readmit(deadline, value)
    }

    /// Like [`Wheel::insert`], but past `max_pending`: for a timer that was admitted before
    /// (a repeating timer re-armed as it fires, a timer restored at start-up), which a limit
    /// lowered since, or the transient overlap of a replay, must not drop. Only the `u32`
    /// index space can refuse it.
    pub fn readmit(&mut self, deadline: u64, value: T) -> Result<Handle, WheelFull> {
        if !self.slab.has_room() {
            return Err(WheelFull {
                limit: self.max_pending,
            });
        }
        let index = self.slab.allocate(deadline, value);
        self.place_scheduled(index);
        let generation = self.slab.entry(index).generation;
        Ok(Handle { index, generation })
    }

    /// Removes a pending timer and returns its value. `None` if the handle is stale (fired,
    /// cancelled, or its slot reused), which makes cancel-versus-expiry races harmless.
    pub fn cancel(&mut self, handle: Handle) -> Option<T> {
        self.slab.live(handle.index, handle.generation)?;
        self.unlink_entry(handle.index);
        let (_, _, value) = self.slab.release(handle.index);
        Some(value)
    }

    /// Moves a pending timer to a new deadline keeping its handle; false if stale.
    pub fn reschedule(&mut self, handle: Handle, deadline: u64) -> bool {
        if self.slab.live(handle.index, handle.generation).is_none() {
            return false;
        }
        self.unlink_entry(handle.index);
        self.slab.entry_mut(handle.index).deadline = deadline;
        self.place_scheduled(handle.index);
        true
    }

    /// The deadline and value of a pending timer, or `None` if the handle is stale.
    pub fn get(&self, handle: Handle) -> Option<(u64, &T)> {
        let entry = self.slab.live(handle.index, handle.generation)?;
        Some((entry.deadline, entry.value.as_ref()?))
    }

    /// Like [`Wheel::get`] but lets the caller update the value in place.
    pub fn get_mut(&mut self, handle: Handle) -> Option<(u64, &mut T)> {
        let entry = self.slab.live_mut(handle.index, handle.generation)?;
        Some((entry.deadline, entry.value.as_mut()?))
    }

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

    /// Iterates pending timers in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (Handle, u64, &T)> {
        self.positions_from(0).filter_map(|(_, timer)| timer)
    }

    /// Every storage position from `start` on, with the timer held there if any: the way to
    /// page through the pending timers a bounded number of positions at a time (listings,
    /// snapshots). A timer keeps its position for as long as it is pending, rescheduling
    /// included, so a scan meets each timer that stays pending throughout exactly once.
    pub fn positions_from(
        &self,
        start: u32,
    ) -> impl Iterator<Item = (u32, Option<(Handle, u64, &T)>)> {
        self.slab.entries_from(start).map(|(index, entry)| {
            let timer = entry.value.as_ref().map(|value| {
                let handle = Handle {
                    index,
                    generation: entry.generation,
                };
                (handle, entry.deadline, value)
            });
            (index, timer)
        })
    }

    /// The tick a deadline belongs to: `ceil(deadline / tick)`, so firing at that tick's start is
    /// never early.
    fn deadline_tick(&self, deadline: u64) -> u64 {
        deadline.div_ceil(self.tick)
    }

    /// Links a freshly inserted or rescheduled (unlinked) entry: due list if its deadline has
    /// already passed, otherwise its wheel slot.
    fn place_scheduled(&mut self, index: u32) {
        let deadline = self.slab.entry(index).deadline;
        if deadline <= self.now {
            self.link_entry(index, DUE_LIST);
        } else {
            // deadline > now >= elapsed * tick, so its tick is strictly after the elapsed tick.
            let when = self.deadline_tick(deadline);
            self.link_entry(index, self.slot_location(when));
        }
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

    /// The list for tick `when`, which must be after the elapsed tick: its slot's list, or
    /// its staging bucket if that slot is being staged.
    fn slot_location(&self, when: u64) -> ListId {
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
    fn replace_list(&mut self, location: ListId, expired: &mut Vec<Expired<T>>) {
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

    /// Empties a list and returns its indices (see [`ListPool::take`]), clearing its slot's
    /// occupancy bit.
    fn detach_list(&mut self, location: ListId) -> Vec<u32> {
        let list = self.lists.take(location);
        self.note_list_emptied(location);
        list
    }

    /// Keeps the occupancy bitmaps in step with the lists: a list serving a slot just went
    /// from empty to holding a timer. Lists serving other homes have no bit.
    fn note_list_filled(&mut self, location: ListId) {
        if let Some((level, slot)) = slot_of_home(self.lists.home(location)) {
            self.levels[level].mark_occupied(slot);
        }
    }

    /// The counterpart of [`Wheel::note_list_filled`] for a list just emptied or taken off.
    fn note_list_emptied(&mut self, location: ListId) {
        if let Some((level, slot)) = slot_of_home(self.lists.home(location)) {
            self.levels[level].mark_empty(slot);
        }
    }

    /// Puts an unlinked entry at the end of a list.
    fn link_entry(&mut self, index: u32, location: ListId) {
        let entry = self.slab.entry_mut(index);
        if self.lists.link(location, index, entry) {
            self.note_list_filled(location);
        }
    }

    /// Takes a linked entry off its list, leaving its own `location` and `position` stale.
    fn unlink_entry(&mut self, index: u32) {
        let entry = self.slab.entry(index);
        let (location, position) = (entry.location, entry.position);
        debug_assert_ne!(location, LOCATION_FREE);
        if let Some(moved) = self.lists.swap_remove(location, position, index) {
            self.slab.entry_mut(moved).position = position;
        } else if self.lists.is_empty(location) {
            self.note_list_emptied(location);
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

impl<T> fmt::Debug for Wheel<T> {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("Wheel")
            .field("tick", &self.tick)
            .field("now", &self.now)
            .field("len", &self.len())
            .field("max_pending", &self.max_pending)
            .finish_non_exhaustive()
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
