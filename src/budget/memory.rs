//! The memory budget: one counter of the bytes tickd holds for its users, shared by every
//! holder. A holder reserves before it keeps anything (a registration's timer, a fired
//! expiration waiting for delivery, a request's payload on its way to the log) and
//! releases when it lets go; whoever would cross the limit is refused, and nothing of what
//! it asked for takes effect.
//!
//! The figures are estimates of what each thing costs in the process (see
//! `docs/operations.md`, "Sizing"), counted the same way on admission and release so the
//! counter always returns to what is really held. RSS stays within the budget plus the
//! process's own fixed overhead (runtime, buffers, allocator slack).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use prometheus_client::metrics::gauge::Gauge;
use tracing::{info, warn};

use super::size::ByteCount;

/// Where the limit came from, for the start-up line and every refusal's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BudgetSource {
    /// `--max-memory` as given.
    Flag,
    /// The default: a share of a limit tickd found (`what` names it).
    Derived { what: String },
    /// `--max-memory 0`: no budget.
    Off,
}

/// The bytes tickd may hold, and those it holds now.
#[derive(Debug)]
pub struct MemoryBudget {
    /// 0: no limit (the counter still counts, for the metric).
    limit: u64,
    source: BudgetSource,
    /// `tickd_memory_used_bytes`; the counter itself, so a scrape reads it directly.
    used: Gauge,
    /// Set by the first refusal, cleared once a twentieth of the budget is free again:
    /// each crossing is logged once, not each refusal.
    reached: AtomicBool,
}

/// Refused: the bytes asked for would take the budget past its limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryExhausted {
    pub asked: u64,
    pub used: u64,
    pub limit: u64,
    source_note: String,
}

impl std::fmt::Display for MemoryExhausted {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            formatter,
            "memory budget reached: {} held of {}, {} more asked for (--max-memory {}{}); \
             cancel timers or acknowledge expirations to make room, or raise --max-memory",
            ByteCount(self.used),
            ByteCount(self.limit),
            ByteCount(self.asked),
            ByteCount(self.limit),
            self.source_note,
        )
    }
}

impl MemoryBudget {
    /// `limit` 0 turns the budget off. `used` is the gauge the metrics expose.
    pub fn new(limit: u64, source: BudgetSource, used: Gauge) -> Arc<Self> {
        Arc::new(Self {
            limit,
            source,
            used,
            reached: AtomicBool::new(false),
        })
    }

    /// A budget that refuses nothing, counting into a gauge of its own (tests, tools).
    pub fn unlimited() -> Arc<Self> {
        Self::new(0, BudgetSource::Off, Gauge::default())
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    pub fn source(&self) -> &BudgetSource {
        &self.source
    }

    pub fn used(&self) -> u64 {
        self.used.get().max(0) as u64
    }

    /// Whether the limit is reached (for health and the start-up check).
    pub fn is_reached(&self) -> bool {
        self.limit > 0 && self.used() >= self.limit
    }

    /// Takes `bytes` if they fit, else refuses and takes nothing.
    pub fn try_charge(&self, bytes: u64) -> Result<(), MemoryExhausted> {
        let counter = self.used.inner();
        let asked = i64::try_from(bytes).unwrap_or(i64::MAX);
        if self.limit == 0 {
            counter.fetch_add(asked, Ordering::Relaxed);
            return Ok(());
        }
        let mut used = counter.load(Ordering::Relaxed);
        loop {
            let after = used.saturating_add(asked);
            if after.max(0) as u64 > self.limit {
                let used = used.max(0) as u64;
                if !self.reached.swap(true, Ordering::Relaxed) {
                    warn!(
                        used = %ByteCount(used),
                        max_memory = %ByteCount(self.limit),
                        "memory budget reached: registrations are refused until memory is freed"
                    );
                }
                return Err(self.exhausted(bytes, used));
            }
            match counter.compare_exchange_weak(used, after, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Ok(()),
                Err(now) => used = now,
            }
        }
    }

    /// Takes `bytes` whether or not they fit: for what was admitted before and must come
    /// back (recovery), or moves from one holder to another that cannot be refused.
    pub fn charge(&self, bytes: u64) {
        self.used
            .inner()
            .fetch_add(i64::try_from(bytes).unwrap_or(i64::MAX), Ordering::Relaxed);
    }

    /// Gives back bytes taken by [`Self::try_charge`] or [`Self::charge`].
    pub fn release(&self, bytes: u64) {
        let before = self
            .used
            .inner()
            .fetch_sub(i64::try_from(bytes).unwrap_or(i64::MAX), Ordering::Relaxed);
        debug_assert!(
            before >= bytes as i64,
            "released {bytes} bytes with only {before} held"
        );
        if self.reached.load(Ordering::Relaxed) {
            let used = (before.max(0) as u64).saturating_sub(bytes);
            if used <= self.limit - self.limit / 20 && self.reached.swap(false, Ordering::Relaxed) {
                info!(
                    used = %ByteCount(used),
                    max_memory = %ByteCount(self.limit),
                    "memory budget has room again: registrations are accepted"
                );
            }
        }
    }

    /// Reserves `bytes` until the reservation is dropped: for buffers in flight.
    pub fn try_reserve(self: &Arc<Self>, bytes: u64) -> Result<MemoryReservation, MemoryExhausted> {
        self.try_charge(bytes)?;
        Ok(MemoryReservation {
            budget: Some(self.clone()),
            bytes,
        })
    }

    /// The refusal for `asked` more bytes with `used` held.
    pub fn exhausted(&self, asked: u64, used: u64) -> MemoryExhausted {
        MemoryExhausted {
            asked,
            used,
            limit: self.limit,
            source_note: match &self.source {
                BudgetSource::Derived { what } => format!(", by default {what}"),
                BudgetSource::Flag | BudgetSource::Off => String::new(),
            },
        }
    }
}

/// What one pending timer is counted as holding: its record in the wheel and its place in
/// the id index ([`TIMER_BYTES`]), its key twice (in the record and in the key index, with
/// the index's entry: [`KEY_INDEX_BYTES`]), its payload, an eighth of key and payload for
/// the allocator's rounding, and a cron schedule ([`CALENDAR_BYTES`]).
///
/// Measured against it (`docs/performance.md`): 146 bytes of RSS per pending timer with a
/// 16-byte payload and no key, counted here as 210.
pub fn held_bytes(key_len: usize, payload_len: usize, calendar: bool) -> u64 {
    let (key, payload) = (key_len as u64, payload_len as u64);
    let key_cost = if key > 0 {
        2 * key + KEY_INDEX_BYTES
    } else {
        0
    };
    let spilled = if key + payload > 16 { key + payload } else { 0 };
    TIMER_BYTES + key_cost + payload + spilled / 8 + if calendar { CALENDAR_BYTES } else { 0 }
}

/// What one fired expiration is counted as holding until it is settled: its timer's
/// figure (the same key and payload, copied out of the record) and [`EXPIRATION_BYTES`]
/// of delivery bookkeeping. Measured: 555 bytes of RSS per waiting expiration with a
/// 16-byte payload (counted 594), 4,944 with 4 KiB (counted 5,184).
pub fn expiration_held_bytes(key_len: usize, payload_len: usize, calendar: bool) -> u64 {
    held_bytes(key_len, payload_len, calendar) + EXPIRATION_BYTES
}

/// With a log, the store also keeps each unsettled firing's frame (to write it into
/// snapshots until it is settled): a second copy of its key and payload, counted on top of
/// [`expiration_held_bytes`].
pub fn logged_firing_bytes(key_len: usize, payload_len: usize) -> u64 {
    (key_len + payload_len) as u64 + LOGGED_FIRING_BYTES
}

/// A logged firing's frames and map entry beyond its key and payload: the `Fired` frame's
/// fixed fields, the entry with its two frame vectors, and once it has been delivered its
/// `Attempted` frame (about 20 bytes, in a 32-byte allocation).
pub const LOGGED_FIRING_BYTES: u64 = 192;

/// An expiration's `Arc`, its place in its namespace's queues and delivery maps, beyond
/// what its timer was counted.
pub const EXPIRATION_BYTES: u64 = 384;

/// A timer's fixed cost: its 96-byte wheel entry, its id index slot, its share of the
/// namespace's bookkeeping and, once fired, its `Arc<Expiration>` and queue entries.
pub const TIMER_BYTES: u64 = 192;
/// A key's entry in its namespace's key index, besides the key's own bytes.
pub const KEY_INDEX_BYTES: u64 = 64;
/// A cron timer's parsed schedule and time zone.
pub const CALENDAR_BYTES: u64 = 512;

/// Bytes held from the budget until dropped (or none: [`Default`]).
///
/// A clone holds nothing: what is cloned (an expiration, whose payload `Bytes` are
/// shared) costs nothing more, and the bytes are given back once, by the original.
#[derive(Debug, Default)]
pub struct MemoryReservation {
    budget: Option<Arc<MemoryBudget>>,
    bytes: u64,
}

impl Clone for MemoryReservation {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl MemoryReservation {
    /// Charges `bytes` whether or not they fit (see [`MemoryBudget::charge`]), until dropped.
    pub fn forced(budget: &Arc<MemoryBudget>, bytes: u64) -> Self {
        budget.charge(bytes);
        Self {
            budget: Some(budget.clone()),
            bytes,
        }
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Keeps the bytes charged for good: their holder now releases them itself.
    pub fn keep(mut self) -> u64 {
        self.budget = None;
        self.bytes
    }
}

impl Drop for MemoryReservation {
    fn drop(&mut self) {
        if let Some(budget) = &self.budget {
            budget.release(self.bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_charge_past_the_limit_is_refused_whole_and_release_makes_room() {
        let budget = MemoryBudget::new(1000, BudgetSource::Flag, Gauge::default());
        budget.try_charge(600).unwrap();
        let refused = budget.try_charge(401).unwrap_err();
        assert_eq!(budget.used(), 600, "the refusal took nothing");
        let message = refused.to_string();
        assert!(
            message.contains("memory budget") && message.contains("--max-memory"),
            "{message}"
        );
        budget.try_charge(400).unwrap();
        assert!(budget.is_reached());
        budget.release(500);
        budget.try_charge(401).unwrap();
        assert_eq!(budget.used(), 901);
    }

    #[test]
    fn forced_charges_pass_the_limit_and_reservations_give_back_on_drop() {
        let budget = MemoryBudget::new(100, BudgetSource::Flag, Gauge::default());
        budget.charge(150);
        assert!(budget.try_charge(1).is_err());
        budget.release(150);
        let reservation = budget.try_reserve(80).unwrap();
        assert!(budget.try_reserve(21).is_err());
        drop(reservation);
        assert_eq!(budget.used(), 0);
        let kept = budget.try_reserve(30).unwrap().keep();
        assert_eq!((kept, budget.used()), (30, 30));
    }

    #[test]
    fn an_unlimited_budget_counts_and_refuses_nothing() {
        let budget = MemoryBudget::unlimited();
        budget.try_charge(u64::MAX / 4).unwrap();
        assert!(!budget.is_reached());
    }

    #[test]
    fn a_timer_counts_its_key_twice_its_payload_and_spilled_bytes_and_a_clone_counts_nothing() {
        assert_eq!(held_bytes(0, 16, false), TIMER_BYTES + 16);
        assert_eq!(held_bytes(0, 17, false), TIMER_BYTES + 17 + 2);
        assert_eq!(
            held_bytes(8, 800, true),
            TIMER_BYTES + 16 + KEY_INDEX_BYTES + 800 + 101 + CALENDAR_BYTES
        );
        assert_eq!(
            expiration_held_bytes(0, 16, false),
            held_bytes(0, 16, false) + EXPIRATION_BYTES
        );
        let budget = MemoryBudget::new(100, BudgetSource::Flag, Gauge::default());
        let held = MemoryReservation::forced(&budget, 60);
        let copy = held.clone();
        drop(held);
        assert_eq!(budget.used(), 0, "the original gave its bytes back");
        drop(copy);
        assert_eq!(budget.used(), 0, "and the clone had none to give");
    }
}
