//! The wheel's geometry: how many levels, how many slots a level has, and the ticks the
//! whole wheel spans. Every file of the wheel reads these; none of them owns them.

/// log2 of the slots per level.
pub(crate) const SLOT_BITS: u32 = 6;
/// Slots per level; a power of two so slot arithmetic is masking.
pub(crate) const SLOTS_PER_LEVEL: usize = 1 << SLOT_BITS;
/// Mask selecting a slot number from a shifted tick.
pub(crate) const SLOT_MASK: u64 = SLOTS_PER_LEVEL as u64 - 1;
/// Number of levels: 7 * 6 bits = 42 bits of ticks (about 139 years at 1 ms).
pub(crate) const LEVEL_COUNT: usize = 7;
/// The highest level, which also holds clamped far-future timers.
pub(crate) const TOP_LEVEL: usize = LEVEL_COUNT - 1;
/// Ticks spanned by the whole wheel. A clock jump at least this long visits every slot anyway,
/// so the wheel handles it by re-placing every timer at once.
pub(crate) const WHEEL_SPAN_TICKS: u64 = 1 << (SLOT_BITS * LEVEL_COUNT as u32);
