//! The [`Wheel`] type: what it holds (the slab, the list pool, the levels, the staging),
//! and its interface for one timer at a time: insert, cancel, reschedule, look up, and
//! iterate. Moving the clock is in `advance`; keeping lists and bitmaps in step, in
//! `links`.

use std::fmt;

use super::geometry::LEVEL_COUNT;
use super::handle::{Handle, WheelFull};
use super::level::Level;
use super::lists::ListPool;
use super::slab::Slab;
use super::staging_levels::Staging;

/// A hierarchical hashed timing wheel holding values of type `T`. See the module docs.
pub struct Wheel<T> {
    pub(super) tick: u64,
    pub(super) max_pending: usize,
    /// Time passed to the last `advance` (never decreases).
    pub(super) now: u64,
    /// Tick up to which the wheel has processed slots: `floor(now / tick)` between calls.
    pub(super) elapsed_ticks: u64,
    pub(super) slab: Slab<T>,
    /// Every list of slab indices: slots, due list, staging buckets. An entry's `location` is
    /// the id of the list it is on and its `position` is its index there.
    pub(super) lists: ListPool,
    /// Which list serves each slot of each level, and which slots are occupied.
    pub(super) levels: [Level; LEVEL_COUNT],
    /// Per level, the next cascade being prepared ahead of time, and its buckets.
    pub(super) staging: Staging,
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
