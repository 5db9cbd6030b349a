//! Delivery ids: what an Ack names, unique for the life of a data directory.
//!
//! An id is the boot of the data directory it was handed out in (high bits) and a count
//! within that boot (low [`COUNT_BITS`] bits). Each start records a boot one higher than any
//! the directory holds, durably, before delivery begins (see [`crate::local::store::Store::boot`]),
//! and snapshots carry the latest one, so an id from before a restart names no delivery of
//! this process: its Ack is answered as unknown and settles nothing. Without a data
//! directory there is nothing to count boots in: the boot is drawn at random instead, so an
//! id of an earlier process is unknown to this one with near certainty (2^-24 per restart).

use std::hash::{BuildHasher, Hasher};

/// Bits of a delivery id that count within one boot: 2^40 deliveries (a trillion) before
/// the count runs out and a new boot is recorded.
const COUNT_BITS: u32 = 40;

/// Bits left to number boots: ids repeat only after 2^24 (16.7 million) boots.
const BOOT_MASK: u64 = (1 << (u64::BITS - COUNT_BITS)) - 1;

/// Hands out delivery ids for one process, in increasing order within a boot.
pub(super) struct DeliveryIds {
    boot: u64,
    next_count: u64,
}

impl DeliveryIds {
    /// Ids of `boot` (a recorded boot, or [`unlogged_boot`] without a log).
    pub(super) fn new(boot: u64) -> Self {
        // Planted bug: every boot's ids are the first boot's.
        let boot = if crate::faults::planted("reuse-delivery-ids") {
            1
        } else {
            boot
        };
        Self {
            boot,
            next_count: 1,
        }
    }

    /// The next id; and, when this boot's count ran out, the new boot it belongs to, which
    /// the caller records before the id leaves tickd (so a restart starts past it).
    pub(super) fn next(&mut self) -> (u64, Option<u64>) {
        let mut new_boot = None;
        if self.next_count >> COUNT_BITS != 0 {
            self.boot += 1;
            self.next_count = 1;
            new_boot = Some(self.boot);
        }
        let id = ((self.boot & BOOT_MASK) << COUNT_BITS) | self.next_count;
        self.next_count += 1;
        (id, new_boot)
    }

    /// The first number of this boot's dead-list sequence: dead expirations are named by
    /// it (Pending lists them, Redrive takes them), so it must not repeat across boots
    /// either. Both sequences share the boot's high bits.
    pub(super) fn first_dead_seq(&self) -> u64 {
        (self.boot & BOOT_MASK) << COUNT_BITS
    }
}

/// A boot number for a process without a log: random, non-zero.
pub(crate) fn unlogged_boot() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    (hasher.finish() & BOOT_MASK).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_of_two_boots_never_meet() {
        let mut first = DeliveryIds::new(1);
        let mut second = DeliveryIds::new(2);
        let (a, _) = first.next();
        let (b, _) = second.next();
        assert_ne!(a, b);
        assert_eq!(a >> COUNT_BITS, 1);
        assert_eq!(b >> COUNT_BITS, 2);
        assert!(first.first_dead_seq() < second.first_dead_seq());
    }

    #[test]
    fn a_boot_whose_count_runs_out_moves_to_the_next_and_says_so() {
        let mut ids = DeliveryIds::new(7);
        ids.next_count = (1 << COUNT_BITS) - 1;
        let (last, none) = ids.next();
        assert_eq!(none, None);
        let (first_of_next, new_boot) = ids.next();
        assert_eq!(new_boot, Some(8));
        assert_eq!(first_of_next, (8 << COUNT_BITS) | 1);
        assert!(first_of_next > last);
    }

    #[test]
    fn unlogged_boots_are_never_zero_and_fit_their_bits() {
        let boot = unlogged_boot();
        assert!((1..=BOOT_MASK).contains(&boot));
    }
}
