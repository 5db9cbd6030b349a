//! A pure hierarchical hashed timing wheel.
//!
//! # Design
//!
//! Time is a plain `u64` in the caller's unit; the wheel only knows the length of one tick in that
//! unit. A deadline `d` belongs to tick `ceil(d / tick)` and the clock `now` is at tick
//! `floor(now / tick)` (the "elapsed tick"), so a timer can only fire once its whole tick has
//! passed.
//!
//! The wheel has 7 levels of 64 slots, as in the Linux and tokio wheels. A slot at level `L`
//! covers `64^L` ticks, so the wheel spans `2^42` ticks (about 139 years at 1 ms). A timer for
//! tick `when` goes to the level of the highest bit in which `when` differs from the elapsed tick
//! (`(elapsed ^ when) | 63`, so level 0 is the minimum), in slot `(when >> 6L) & 63`. Each level
//! keeps a `u64` occupancy bitmap, so the next non-empty slot of a level is one rotate plus
//! `trailing_zeros`: finding the next piece of work is O(levels) no matter how far away it is,
//! and catching up over a long gap jumps straight from one occupied slot to the next.
//!
//! When the clock reaches the start of an occupied slot above level 0, the slot is *cascaded*:
//! its timers are re-placed relative to the new elapsed tick, landing in lower levels or firing.
//! Cascades below the top level are prepared ahead of time, a budgeted chunk per `advance`, so
//! that reaching a slot of a million timers costs 64 list swaps rather than a million
//! re-placements while due timers wait (see [`Staging`]); [`Wheel::next_wakeup`] tells the owner
//! when such preparation is waiting.
//! Timers further away than the top level can express are *clamped* into the top-level slot just
//! before the current one (the farthest slot) and simply re-placed when that slot comes round;
//! every re-check moves them 63 top-level slots closer, so this always terminates. A gap of a whole
//! wheel span or more is handled in one pass over every timer instead of slot by slot.
//!
//! Timers inserted with a deadline at or before [`Wheel::now`] go on a separate "due now" list and
//! fire on the next [`Wheel::advance`].
//!
//! Timers live in a slab (fixed-size chunks, so growing never moves them) with a free list.
//! Each slot (and the due list) is a `Vec<u32>` of slab indices, and every entry records the
//! number of its list and its position in that vector, so insert is a push,
//! cancel and reschedule are a `swap_remove` plus fixing the moved entry's position (all O(1)),
//! and cascading or firing a slot iterates a dense array of indices: the loads of the entries are
//! independent, so the CPU overlaps their cache misses instead of chasing a linked list. A slot's
//! vector keeps its allocation across rotations (shrunk when far larger than needed), so steady
//! state allocates nothing. A [`Handle`] carries the slab index and a generation that is bumped
//! whenever an entry is freed, so a stale handle never touches a timer that reused its entry.
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
mod slab;

use std::fmt;

use slab::{Slab, LOCATION_FREE};

/// log2 of the slots per level.
const SLOT_BITS: u32 = 6;
/// Slots per level; a power of two so slot arithmetic is masking.
const SLOTS_PER_LEVEL: usize = 1 << SLOT_BITS;
/// Mask selecting a slot number from a shifted tick.
const SLOT_MASK: u64 = SLOTS_PER_LEVEL as u64 - 1;
/// Number of levels: 7 * 6 bits = 42 bits of ticks.
const LEVEL_COUNT: usize = 7;
/// The highest level, which also holds clamped far-future timers.
const TOP_LEVEL: usize = LEVEL_COUNT - 1;
/// Ticks spanned by the whole wheel. A clock jump at least this long visits every slot anyway,
/// so it is handled by re-placing every timer at once.
const WHEEL_SPAN_TICKS: u64 = 1 << (SLOT_BITS * LEVEL_COUNT as u32);
/// Number of slot lists (`level * 64 + slot` names each one's home).
const SLOT_LIST_COUNT: usize = LEVEL_COUNT * SLOTS_PER_LEVEL;
/// The "due now" list, right after the slot lists (it never moves).
const DUE_LIST: u16 = SLOT_LIST_COUNT as u16;
/// Homes of the staging buckets (see [`Staging`]) follow the due list: 64 per level, those of
/// level `L` receiving the timers of a level-`L` slot being staged.
const STAGING_BASE: u16 = DUE_LIST + 1;
/// Every list: slots, due, staging buckets.
const LIST_COUNT: usize = SLOT_LIST_COUNT + 1 + SLOT_LIST_COUNT;
/// Entries moved into the staging buckets per `advance` call by default: about 20-30 µs of
/// work, so timers due meanwhile wait no longer than that.
const STAGING_BUDGET: usize = 1024;
/// A list's vector keeps its allocation across rotations unless its capacity exceeds both this
/// and four times what the list last held.
const RETAINED_CAPACITY_FLOOR: usize = 1024;
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
    /// Every list of slab indices, named by number: an entry's `location` is the number of
    /// the list it is on and its `position` is its index there. Which slot (or staging
    /// bucket) a list serves is its *home*; staging swaps homes, never entries.
    lists: Vec<Vec<u32>>,
    /// The home of each list: `level * 64 + slot`, `DUE_LIST`, or
    /// `STAGING_BASE + level * 64 + bucket`.
    homes: Vec<u16>,
    /// The list serving each slot of each level.
    slot_lists: [[u16; SLOTS_PER_LEVEL]; LEVEL_COUNT],
    /// The list serving each staging bucket of each level.
    staging_lists: [[u16; SLOTS_PER_LEVEL]; LEVEL_COUNT],
    /// Bit `s` of `occupied_slots[L]` is set iff slot `s` of level `L` is non-empty.
    occupied_slots: [u64; LEVEL_COUNT],
    /// Per level, the next cascade of that level being prepared ahead of time.
    staging: [Option<Staging>; LEVEL_COUNT],
    /// Timers staged per `advance` call.
    staging_budget: usize,
}

/// A cascade prepared ahead of time. Cascading a slot at level `L >= 1` re-places every
/// timer in it, tens of nanoseconds each (they are scattered over the slab): a slot of a
/// million timers would stall the wheel, and every timer due at that moment, for tens of
/// milliseconds. So once the next slot of a level holds more timers than one `advance` may
/// move, and its start is within a lead time (see [`staging_lead_ticks`]), `advance` moves
/// its timers a budgeted chunk at a time into that level's 64 staging buckets, one per slot
/// of level `L - 1` in the block the slot covers. Timers that would be placed in the slot
/// meanwhile go straight into their bucket. Every level stages on its own, so a long
/// staging of a coarse slot never holds up the frequent cascades of fine ones.
///
/// When the clock reaches the slot's start `T`, each bucket simply becomes the list of its
/// slot one level down: 64 list swaps, whatever the number of timers. Those slots are empty
/// then. The lead is at most one level-`L` slot, so staging began inside the slot just before
/// `T`; no multiple of `64^L` lies between then and `T`, so nothing cascades meanwhile from
/// level `L` or above (and slot 0 of a level below the top is never occupied, so nothing
/// else starts at `T`); every timer due before `T` sits in a slot that starts before `T` and
/// is processed first; and every timer due in `[T, T + 64^L)` is placed in the staged slot,
/// that is, in its bucket. A bucket whose slot were not empty all the same is merged into it
/// rather than swapped, so the wheel stays exact even if that reasoning had a hole.
#[derive(Clone, Copy, Debug)]
struct Staging {
    /// Tick at which the source slot starts.
    start_tick: u64,
    slot: usize,
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
            lists: (0..LIST_COUNT).map(|_| Vec::new()).collect(),
            homes: (0..LIST_COUNT as u16).collect(),
            slot_lists: std::array::from_fn(|level| {
                std::array::from_fn(|slot| slot_home(level, slot))
            }),
            staging_lists: std::array::from_fn(|level| {
                std::array::from_fn(|bucket| STAGING_BASE + slot_home(level, bucket))
            }),
            occupied_slots: [0; LEVEL_COUNT],
            staging: [None; LEVEL_COUNT],
            staging_budget: STAGING_BUDGET,
        }
    }

    /// Sets how many timers of upcoming cascades one `advance` call moves into staging
    /// (default 1024, at least 1), which bounds the pause staging adds to a call. A slot
    /// holding no more than this is cascaded at its start, as without staging.
    pub fn set_staging_budget(&mut self, budget: usize) {
        self.staging_budget = budget.max(1);
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
        self.stage_next_cascades(self.staging_budget);
        sort_by_deadline(&mut expired[batch_start..]);
    }

    /// The earliest time at which `advance` could have work to do (fire or cascade): `None` if
    /// empty, at or before `now()` if something is already due. O(levels) via the bitmaps.
    pub fn next_expiration(&self) -> Option<u64> {
        if self.is_empty() {
            return None;
        }
        if !self.lists[usize::from(DUE_LIST)].is_empty() {
            return Some(self.now);
        }
        let slot_start_tick = self.earliest_slot_start().map(|(start, _)| start);
        let staged_start = self.earliest_staging().map(|(start, _)| start);
        let earliest = earlier(slot_start_tick, staged_start)?;
        Some(earliest.saturating_mul(self.tick))
    }

    /// When the owner of the wheel should next call `advance`: [`Wheel::next_expiration`],
    /// now while a cascade is still being prepared, or when the lead time of the next big
    /// one begins (see [`Staging`]), so that the preparation proceeds in small steps between
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
        self.staging = [None; LEVEL_COUNT];
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
    fn slot_location(&self, when: u64) -> u16 {
        debug_assert!(when > self.elapsed_ticks);
        let level = level_for(self.elapsed_ticks, when);
        if level < TOP_LEVEL {
            let slot = slot_for(when, level);
            if self.staging[level].is_some_and(|staging| staging.slot == slot) {
                return self.staging_lists[level][slot_for(when, level - 1)];
            }
            return self.slot_lists[level][slot];
        }
        let top_shift = SLOT_BITS * TOP_LEVEL as u32;
        let current_top_slot = self.elapsed_ticks >> top_shift;
        let top_slots_ahead = (when >> top_shift) - current_top_slot;
        if top_slots_ahead < SLOTS_PER_LEVEL as u64 {
            // Within one rotation of the top level: the slot's next occurrence is exactly `when`'s
            // (possibly in the next rotation, which the wrap-around in `next_slot_start` handles).
            return self.slot_lists[TOP_LEVEL][slot_for(when, TOP_LEVEL)];
        }
        // Too far: clamp into the farthest slot and re-check when it comes round.
        let farthest_slot = (current_top_slot + SLOT_MASK) & SLOT_MASK;
        self.slot_lists[TOP_LEVEL][farthest_slot as usize]
    }

    /// Processes occupied slots one start tick at a time up to `target_tick`. Only occupied slots
    /// are visited, so a long gap costs O(timers * levels), not O(gap).
    fn step_to(&mut self, target_tick: u64, expired: &mut Vec<Expired<T>>) {
        loop {
            let slot_event = self.earliest_slot_start();
            // A staged slot is finished at its start once every slot starting earlier has
            // been processed (occupied slots of lower levels may start before it).
            if let Some((start, level)) = self.earliest_staging() {
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
                self.replace_list(self.slot_lists[level][slot], expired);
            }
        }
    }

    /// The staging that finishes first, as (start tick, level).
    fn earliest_staging(&self) -> Option<(u64, usize)> {
        (1..TOP_LEVEL)
            .filter_map(|level| Some((self.staging[level]?.start_tick, level)))
            .min()
    }

    /// The list of the slot a level is staging.
    fn staged_source(&self, level: usize, staging: Staging) -> u16 {
        self.slot_lists[level][staging.slot]
    }

    /// The next slot of `level` to start, with its start tick, if it is big enough to stage
    /// (it holds more timers than one `advance` may move) and no staging of that level is
    /// under way. Levels 1 up to, not including, the top: the top level's clamped timers are
    /// re-checked rather than cascaded.
    fn next_to_stage(&self, level: usize) -> Option<(u64, usize)> {
        if self.staging[level].is_some() {
            return None;
        }
        let start_tick = self.next_slot_start(level)?;
        let slot = slot_for(start_tick, level);
        let timers = self.lists[usize::from(self.slot_lists[level][slot])].len();
        (timers > self.staging_budget).then_some((start_tick, slot))
    }

    /// When staging next has work: now while a staged slot still holds timers, otherwise
    /// when the lead time of the next slot big enough to stage begins.
    fn next_staging_time(&self) -> Option<u64> {
        (1..TOP_LEVEL)
            .filter_map(|level| match self.staging[level] {
                Some(staging) => {
                    let source = self.staged_source(level, staging);
                    (!self.lists[usize::from(source)].is_empty()).then_some(self.now)
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
    /// up to `budget` timers into buckets, the staging that finishes first served first.
    fn stage_next_cascades(&mut self, mut budget: usize) {
        for level in 1..TOP_LEVEL {
            if let Some((start_tick, slot)) = self.next_to_stage(level) {
                if start_tick - self.elapsed_ticks <= staging_lead_ticks(level) {
                    self.staging[level] = Some(Staging { start_tick, slot });
                }
            }
        }
        let mut order: [(u64, usize); LEVEL_COUNT] = std::array::from_fn(|level| {
            let start = self.staging[level].map_or(u64::MAX, |staging| staging.start_tick);
            (start, level)
        });
        order.sort_unstable();
        for (_, level) in order {
            if budget == 0 {
                break;
            }
            budget -= self.stage_entries(level, budget);
        }
    }

    /// Moves up to `budget` timers from a level's staged slot into its buckets, from the end
    /// of the slot's list, so no other entry changes position. Returns how many it moved.
    fn stage_entries(&mut self, level: usize, budget: usize) -> usize {
        let Some(staging) = self.staging[level] else {
            return 0;
        };
        let source = self.staged_source(level, staging);
        let mut moved = 0;
        while moved < budget {
            let Some(index) = self.lists[usize::from(source)].pop() else {
                break;
            };
            let when = self.deadline_tick(self.slab.entry(index).deadline);
            let bucket = self.staging_lists[level][slot_for(when, level - 1)];
            self.link_entry(index, bucket);
            moved += 1;
        }
        if self.lists[usize::from(source)].is_empty() {
            self.set_occupied(source, false);
        }
        moved
    }

    /// At a staged slot's start (the elapsed tick): moves what is left into the buckets,
    /// makes each bucket the list of its slot one level down, and re-places the first
    /// bucket's timers, whose slot starts now.
    fn finish_staging(&mut self, level: usize, expired: &mut Vec<Expired<T>>) {
        self.stage_entries(level, usize::MAX);
        self.staging[level] = None;
        let lower = level - 1;
        for slot in 1..SLOTS_PER_LEVEL {
            let bucket = self.staging_lists[level][slot];
            if self.lists[usize::from(bucket)].is_empty() {
                continue;
            }
            let vacant = self.slot_lists[lower][slot];
            if !self.lists[usize::from(vacant)].is_empty() {
                // Not expected (see `Staging`); merging keeps the wheel exact regardless.
                for index in self.detach_list(bucket) {
                    self.link_entry(index, vacant);
                }
                continue;
            }
            self.slot_lists[lower][slot] = bucket;
            self.staging_lists[level][slot] = vacant;
            self.homes[usize::from(bucket)] = slot_home(lower, slot);
            self.homes[usize::from(vacant)] = STAGING_BASE + slot_home(level, slot);
            self.set_occupied(bucket, true);
        }
        self.replace_list(self.staging_lists[level][0], expired);
    }

    /// Handles a clock jump of at least a whole wheel span: every slot would be processed at
    /// least once, so detach every slot list (in the order they would have been processed) and
    /// re-place each timer relative to the target tick.
    fn jump_to(&mut self, target_tick: u64, expired: &mut Vec<Expired<T>>) {
        let detached: Vec<(u16, Vec<u32>)> = self
            .occupied_locations_in_processing_order()
            .into_iter()
            .map(|location| (location, self.detach_list(location)))
            .collect();
        self.staging = [None; LEVEL_COUNT];
        self.elapsed_ticks = target_tick;
        for (location, list) in detached {
            self.replace_all(&list, expired);
            self.return_list(location, list);
        }
    }

    /// Takes a slot list off the wheel and re-places or fires each of its timers.
    fn replace_list(&mut self, location: u16, expired: &mut Vec<Expired<T>>) {
        let list = self.detach_list(location);
        self.replace_all(&list, expired);
        self.return_list(location, list);
    }

    /// Fires every timer on a list, in list order.
    fn fire_list(&mut self, location: u16, expired: &mut Vec<Expired<T>>) {
        let list = self.detach_list(location);
        expired.reserve(list.len());
        for &index in &list {
            expired.push(self.release_expired(index));
        }
        self.return_list(location, list);
    }

    fn release_expired(&mut self, index: u32) -> Expired<T> {
        let (deadline, generation, value) = self.slab.release(index);
        Expired {
            handle: Handle { index, generation },
            deadline,
            value,
        }
    }

    /// Empties a list and returns its indices; the entries still record their old location and
    /// position until they are re-linked or released.
    fn detach_list(&mut self, location: u16) -> Vec<u32> {
        let list = std::mem::take(&mut self.lists[usize::from(location)]);
        self.set_occupied(location, false);
        list
    }

    /// Keeps the occupancy bitmap of a slot list's home up to date (other lists have none).
    fn set_occupied(&mut self, location: u16, occupied: bool) {
        let home = self.homes[usize::from(location)];
        if home < DUE_LIST {
            let (level, slot) = level_and_slot(home);
            if occupied {
                self.occupied_slots[level] |= 1 << slot;
            } else {
                self.occupied_slots[level] &= !(1 << slot);
            }
        }
    }

    /// Gives a detached list's allocation back to its (still empty) slot so the next rotation
    /// does not reallocate, unless its capacity is far above what the slot just needed.
    fn return_list(&mut self, location: u16, mut list: Vec<u32>) {
        let used = list.len();
        list.clear();
        if list.capacity() > RETAINED_CAPACITY_FLOOR && list.capacity() / 4 > used {
            list.shrink_to(used.max(RETAINED_CAPACITY_FLOOR));
        }
        let slot = &mut self.lists[usize::from(location)];
        if slot.is_empty() && slot.capacity() < list.capacity() {
            *slot = list;
        }
    }

    fn link_entry(&mut self, index: u32, location: u16) {
        let list = &mut self.lists[usize::from(location)];
        let entry = self.slab.entry_mut(index);
        entry.location = location;
        // A list never holds more than the slab's entries, whose indices fit in a u32.
        entry.position = list.len() as u32;
        list.push(index);
        if list.len() == 1 {
            self.set_occupied(location, true);
        }
    }

    fn unlink_entry(&mut self, index: u32) {
        let entry = self.slab.entry(index);
        let (location, position) = (entry.location, entry.position);
        debug_assert_ne!(location, LOCATION_FREE);
        let list = &mut self.lists[usize::from(location)];
        debug_assert_eq!(list[position as usize], index);
        list.swap_remove(position as usize);
        if let Some(&moved) = list.get(position as usize) {
            self.slab.entry_mut(moved).position = position;
        } else if list.is_empty() {
            self.set_occupied(location, false);
        }
    }

    /// The tick at which the next occupied slot of `level` starts, i.e. when `advance` must
    /// process it. Rotating the bitmap so the slot after the current one is bit 0 makes
    /// `trailing_zeros` the distance, wrap-around included (the current slot itself counts as a
    /// full rotation away: its present occurrence has already been processed).
    fn next_slot_start(&self, level: usize) -> Option<u64> {
        let occupied = self.occupied_slots[level];
        if occupied == 0 {
            return None;
        }
        let shift = SLOT_BITS * level as u32;
        let current_slot = (self.elapsed_ticks >> shift) & SLOT_MASK;
        let rotated = occupied.rotate_right(((current_slot + 1) & SLOT_MASK) as u32);
        let slots_ahead = u64::from(rotated.trailing_zeros()) + 1;
        let current_slot_start = (self.elapsed_ticks >> shift) << shift;
        current_slot_start.checked_add(slots_ahead << shift)
    }

    /// The earliest slot start over all levels, with a bitmask of the levels that start a slot
    /// then (several levels can share a start tick).
    fn earliest_slot_start(&self) -> Option<(u64, u8)> {
        let mut earliest: Option<(u64, u8)> = None;
        for level in 0..LEVEL_COUNT {
            let Some(start) = self.next_slot_start(level) else {
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
    fn occupied_locations_in_processing_order(&self) -> Vec<u16> {
        let mut slots: Vec<(u64, u16)> = Vec::new();
        for (level, &occupied) in self.occupied_slots.iter().enumerate() {
            let shift = SLOT_BITS * level as u32;
            let current_slot = (self.elapsed_ticks >> shift) & SLOT_MASK;
            let mut remaining = occupied;
            while remaining != 0 {
                let slot = u64::from(remaining.trailing_zeros());
                remaining &= remaining - 1;
                let slots_ahead = (slot.wrapping_sub(current_slot + 1) & SLOT_MASK) + 1;
                let location = self.slot_lists[level][slot as usize];
                slots.push((slots_ahead << shift, location));
            }
        }
        // Offsets from the same base compare like start ticks and cannot overflow.
        slots.sort_unstable();
        let staged = self
            .staging_lists
            .iter()
            .flatten()
            .copied()
            .filter(|&bucket| !self.lists[usize::from(bucket)].is_empty());
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

/// Level for tick `when` seen from `elapsed`: the 6-bit group of their highest differing bit,
/// at least 0 and possibly above `TOP_LEVEL` (the caller clamps).
fn level_for(elapsed: u64, when: u64) -> usize {
    let differing = (elapsed ^ when) | SLOT_MASK;
    let highest_bit = 63 - differing.leading_zeros();
    (highest_bit / SLOT_BITS) as usize
}

/// Slot of tick `when` within `level`.
fn slot_for(when: u64, level: usize) -> usize {
    ((when >> (SLOT_BITS * level as u32)) & SLOT_MASK) as usize
}

/// Sorts a batch by deadline. Batches are mostly runs that are already sorted (or nearly), which
/// the standard sort detects.
fn sort_by_deadline<T>(batch: &mut [Expired<T>]) {
    batch.sort_unstable_by_key(|fired| fired.deadline);
}

/// How long before a slot of `level` starts its staging may begin: a slot below it (at least
/// 64 ticks), ample time at a budget per `advance`, yet late enough that timers cancelled or
/// moved long before their cascade are never staged for nothing.
fn staging_lead_ticks(level: usize) -> u64 {
    1u64 << (SLOT_BITS * (level.max(2) as u32 - 1))
}

/// The earlier of two optional times.
fn earlier(first: Option<u64>, second: Option<u64>) -> Option<u64> {
    first.into_iter().chain(second).min()
}

/// The home number of a slot.
fn slot_home(level: usize, slot: usize) -> u16 {
    (level * SLOTS_PER_LEVEL + slot) as u16
}

fn level_and_slot(location: u16) -> (usize, usize) {
    let location = usize::from(location);
    (location / SLOTS_PER_LEVEL, location % SLOTS_PER_LEVEL)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn advance_collect(wheel: &mut Wheel<u32>, now: u64) -> Vec<(u64, u32)> {
        let mut expired = Vec::new();
        wheel.advance(now, &mut expired);
        expired
            .into_iter()
            .map(|fired| (fired.deadline, fired.value))
            .collect()
    }

    #[test]
    fn entry_is_at_most_32_bytes_for_u32_values() {
        assert!(std::mem::size_of::<slab::Entry<u32>>() <= 32);
    }

    #[test]
    fn handle_round_trips_through_u64() {
        let handle = Handle {
            index: 7,
            generation: 0xdead_beef,
        };
        assert_eq!(Handle::from_u64(handle.to_u64()), handle);
    }

    #[test]
    fn zero_and_past_deadlines_fire_on_next_advance() {
        let mut wheel = Wheel::new(1000, 16);
        wheel.insert(0, 1).unwrap();
        assert_eq!(wheel.next_expiration(), Some(0));
        assert_eq!(advance_collect(&mut wheel, 0), vec![(0, 1)]);

        assert!(advance_collect(&mut wheel, 1500).is_empty());
        wheel.insert(1200, 2).unwrap();
        wheel.insert(0, 3).unwrap();
        assert!(wheel.next_expiration().unwrap() <= wheel.now());
        // Time going back is treated as no time passing; the due timers still fire, in order.
        assert_eq!(advance_collect(&mut wheel, 10), vec![(0, 3), (1200, 2)]);
        assert!(wheel.is_empty());
        assert_eq!(wheel.now(), 1500);
    }

    #[test]
    fn never_fires_before_its_tick() {
        let mut wheel = Wheel::new(10, 16);
        wheel.insert(25, 1).unwrap();
        assert!(advance_collect(&mut wheel, 29).is_empty());
        assert_eq!(wheel.next_expiration(), Some(30));
        assert_eq!(advance_collect(&mut wheel, 30), vec![(25, 1)]);
    }

    #[test]
    fn max_deadline_and_far_future_fire_exactly_when_due() {
        let mut wheel = Wheel::new(1, 16);
        let far = 5 * WHEEL_SPAN_TICKS + 12_345;
        wheel.insert(u64::MAX, 1).unwrap();
        wheel.insert(far, 2).unwrap();
        // Several clamped re-checks, both stepped and jumped.
        for now in [
            WHEEL_SPAN_TICKS / 2,
            WHEEL_SPAN_TICKS,
            3 * WHEEL_SPAN_TICKS,
            far - 1,
        ] {
            assert!(
                advance_collect(&mut wheel, now).is_empty(),
                "early at {now}"
            );
            assert!(wheel.next_expiration().unwrap() <= far);
        }
        assert_eq!(advance_collect(&mut wheel, far), vec![(far, 2)]);
        assert!(advance_collect(&mut wheel, u64::MAX - 1).is_empty());
        assert_eq!(wheel.next_expiration(), Some(u64::MAX));
        assert_eq!(advance_collect(&mut wheel, u64::MAX), vec![(u64::MAX, 1)]);
        assert_eq!(wheel.next_expiration(), None);
    }

    #[test]
    fn clamped_timer_survives_small_steps() {
        let mut wheel = Wheel::new(1, 4);
        let deadline = WHEEL_SPAN_TICKS + 100;
        wheel.insert(deadline, 1).unwrap();
        let mut now = 0;
        while let Some(next) = wheel.next_expiration() {
            assert!(next > now);
            now = next;
            let fired = advance_collect(&mut wheel, now);
            if !fired.is_empty() {
                assert_eq!(fired, vec![(deadline, 1)]);
                assert_eq!(now, deadline);
            }
        }
        assert_eq!(now, deadline);
    }

    #[test]
    fn stale_handle_does_not_touch_reused_slot() {
        let mut wheel = Wheel::new(1, 16);
        let old = wheel.insert(100, 1).unwrap();
        assert_eq!(wheel.cancel(old), Some(1));
        let new = wheel.insert(200, 2).unwrap();
        assert_ne!(old, new);
        assert_eq!(wheel.cancel(old), None);
        assert!(!wheel.reschedule(old, 5));
        assert_eq!(wheel.get(old), None);
        assert!(wheel.get_mut(old).is_none());
        assert_eq!(wheel.get(new), Some((200, &2)));
        assert_eq!(advance_collect(&mut wheel, 200), vec![(200, 2)]);
    }

    #[test]
    fn max_pending_rejects_then_recovers_after_cancel() {
        let mut wheel = Wheel::new(1, 2);
        let first = wheel.insert(10, 1).unwrap();
        wheel.insert(20, 2).unwrap();
        assert_eq!(wheel.insert(30, 3), Err(WheelFull { limit: 2 }));
        assert_eq!(wheel.len(), 2);
        wheel.cancel(first).unwrap();
        wheel.insert(30, 3).unwrap();
        assert_eq!(wheel.len(), 2);
    }

    #[test]
    fn cancel_after_fire_returns_none() {
        let mut wheel = Wheel::new(1, 4);
        let handle = wheel.insert(5, 1).unwrap();
        let mut expired = Vec::new();
        wheel.advance(5, &mut expired);
        assert_eq!(expired[0].handle, handle);
        assert_eq!(wheel.cancel(handle), None);
        assert!(!wheel.reschedule(handle, 50));
    }

    /// Like `advance_collect`, with equal deadlines ordered by value (their relative order is
    /// unspecified), after checking that the batch is sorted by deadline.
    fn advance_collect_normalized(wheel: &mut Wheel<u32>, now: u64) -> Vec<(u64, u32)> {
        let mut fired = advance_collect(wheel, now);
        assert!(fired.windows(2).all(|pair| pair[0].0 <= pair[1].0));
        fired.sort_unstable();
        fired
    }

    #[test]
    fn same_tick_timers_fire_in_deadline_order() {
        let mut wheel = Wheel::new(1000, 16);
        wheel.insert(1900, 1).unwrap();
        wheel.insert(1100, 2).unwrap();
        wheel.insert(1500, 3).unwrap();
        wheel.insert(1100, 4).unwrap();
        assert_eq!(
            advance_collect_normalized(&mut wheel, 2000),
            vec![(1100, 2), (1100, 4), (1500, 3), (1900, 1)]
        );
    }

    #[test]
    fn equal_deadlines_from_different_levels_fire_together() {
        let mut wheel = Wheel::new(1, 16);
        wheel.insert(5000, 1).unwrap(); // placed at level 2
        advance_collect(&mut wheel, 4990);
        wheel.insert(5000, 2).unwrap(); // placed after 1 has cascaded
        wheel.insert(4995, 3).unwrap();
        assert_eq!(
            advance_collect_normalized(&mut wheel, 6000),
            vec![(4995, 3), (5000, 1), (5000, 2)]
        );
    }

    #[test]
    fn cancel_from_the_middle_of_a_slot_keeps_the_others() {
        let mut wheel = Wheel::new(1, 64);
        // Same level-1 slot: cancel moves the last timer into the freed position.
        let handles: Vec<Handle> = (0..10)
            .map(|value| wheel.insert(100 + u64::from(value), value).unwrap())
            .collect();
        assert_eq!(wheel.cancel(handles[3]), Some(3));
        assert_eq!(wheel.cancel(handles[0]), Some(0));
        assert_eq!(wheel.cancel(handles[9]), Some(9));
        assert!(wheel.reschedule(handles[5], 50));
        assert!(wheel.reschedule(handles[1], 30));
        assert_eq!(wheel.cancel(handles[1]), Some(1));
        assert_eq!(wheel.get(handles[8]), Some((108, &8)));
        assert_eq!(advance_collect(&mut wheel, 50), vec![(50, 5)]);
        assert_eq!(
            advance_collect(&mut wheel, 200),
            vec![(102, 2), (104, 4), (106, 6), (107, 7), (108, 8)]
        );
        assert!(wheel.is_empty());
    }

    #[test]
    fn slot_vectors_keep_modest_allocations_across_rotations() {
        let mut wheel = Wheel::new(1, 1 << 16);
        for round in 0..3u64 {
            let base = wheel.now() + 64;
            for value in 0..5000u32 {
                wheel
                    .insert(base + 70 + u64::from(value) % 50, value)
                    .unwrap();
            }
            let mut expired = Vec::new();
            wheel.advance(base + 200, &mut expired);
            assert_eq!(expired.len(), 5000, "round {round}");
            assert!(wheel.is_empty());
        }
        let largest = |wheel: &Wheel<u32>| wheel.lists.iter().map(Vec::capacity).max().unwrap();
        assert!(
            largest(&wheel) >= 4096,
            "the cascaded slot kept its allocation"
        );
        // A small load afterwards shrinks the big vectors the next time their slot is processed.
        for _ in 0..300 {
            wheel.insert(wheel.now() + 70, 1).unwrap();
            let mut expired = Vec::new();
            wheel.advance(wheel.now() + 64, &mut expired);
        }
        let retained = largest(&wheel);
        assert!(retained <= RETAINED_CAPACITY_FLOOR, "retained {retained}");
    }

    #[test]
    fn a_big_cascade_is_staged_in_steps_and_swapped_in_at_its_start() {
        let mut wheel = Wheel::new(1, usize::MAX);
        let count = 5 * STAGING_BUDGET as u64;
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
            both_levels_staging |= wheel.staging[1].is_some() && wheel.staging[3].is_some();
            if now == level_3_start - 1 {
                let staging = wheel.staging[3].expect("the level-3 slot is staged");
                let source = wheel.staged_source(3, staging);
                level_3_fully_staged_in_time = wheel.lists[usize::from(source)].is_empty();
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
        assert!(wheel.staging[1].is_some(), "the slot at 128 is staged");
        wheel.insert(100, 3).unwrap();
        assert_eq!(
            advance_collect(&mut wheel, 200),
            vec![(100, 3), (128, 1), (129, 2)]
        );
    }

    #[test]
    fn next_expiration_is_none_when_empty() {
        let mut wheel: Wheel<u32> = Wheel::new(1, 4);
        assert_eq!(wheel.next_expiration(), None);
        let handle = wheel.insert(70, 1).unwrap();
        // Level 1: work (a cascade) starts at the slot start, not later than the deadline.
        assert_eq!(wheel.next_expiration(), Some(64));
        wheel.cancel(handle);
        assert_eq!(wheel.next_expiration(), None);
    }

    #[test]
    fn catches_up_after_a_long_jump() {
        let mut wheel = Wheel::new(1, 1024);
        let deadlines = [1, 63, 64, 4095, 4096, 1 << 20, (1 << 30) + 7, 1 << 41];
        for (value, &deadline) in deadlines.iter().enumerate() {
            wheel.insert(deadline, value as u32).unwrap();
        }
        wheel.insert(1 << 50, 99).unwrap();
        let fired = advance_collect(&mut wheel, 1 << 42);
        let expected: Vec<(u64, u32)> = deadlines
            .iter()
            .enumerate()
            .map(|(value, &deadline)| (deadline, value as u32))
            .collect();
        assert_eq!(fired, expected);
        assert_eq!(wheel.len(), 1);
        assert_eq!(advance_collect(&mut wheel, 1 << 50), vec![(1 << 50, 99)]);
    }

    #[test]
    fn reschedule_earlier_and_later_keeps_handle() {
        let mut wheel = Wheel::new(10, 4);
        let early = wheel.insert(5000, 1).unwrap();
        let late = wheel.insert(50, 2).unwrap();
        assert!(wheel.reschedule(early, 30));
        assert!(wheel.reschedule(late, 100_000));
        assert_eq!(wheel.get(early), Some((30, &1)));
        let mut expired = Vec::new();
        wheel.advance(5000, &mut expired);
        assert_eq!(expired.len(), 1);
        assert_eq!(expired[0].handle, early);
        assert!(advance_collect(&mut wheel, 99_999).is_empty());
        assert_eq!(advance_collect(&mut wheel, 100_000), vec![(100_000, 2)]);
    }

    #[test]
    fn drain_returns_everything_sorted() {
        let mut wheel = Wheel::new(1, 16);
        for (value, deadline) in [(1, 1 << 45), (2, 0), (3, 70), (4, 5)] {
            wheel.insert(deadline, value).unwrap();
        }
        if let Some((_, value)) = wheel.get_mut(Handle::from_u64(0)) {
            *value = 10;
        }
        assert_eq!(wheel.iter().count(), 4);
        let drained: Vec<(u64, u32)> = wheel
            .drain()
            .into_iter()
            .map(|fired| (fired.deadline, fired.value))
            .collect();
        assert_eq!(drained, vec![(0, 2), (5, 4), (70, 3), (1 << 45, 10)]);
        assert!(wheel.is_empty());
        assert_eq!(wheel.next_expiration(), None);
    }
}
