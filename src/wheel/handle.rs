//! What the wheel gives its owner back: a [`Handle`] naming a scheduled timer, the
//! [`Expired`] timers `advance` and `drain` hand over, and the [`WheelFull`] refusal.

/// Names one scheduled timer. Stays unique across reuse of the timer's storage thanks to the
/// generation, so a handle to a fired or cancelled timer is simply stale.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Handle {
    pub(super) index: u32,
    pub(super) generation: u32,
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
