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
//!
//! # Files
//!
//! The [`Wheel`] type and its interface for one timer are in `state`, moving the clock in
//! `advance`, linking timers to lists (and the bitmaps' contract) in `links`, and what the
//! owner gets back in `handle`; the storage and staging are in the files named above.

mod advance;
mod chunks;
mod geometry;
mod handle;
mod level;
mod links;
mod lists;
mod slab;
mod staging;
mod staging_levels;
mod state;
#[cfg(test)]
mod tests;

pub use handle::{Expired, Handle, WheelFull};
pub use state::Wheel;
