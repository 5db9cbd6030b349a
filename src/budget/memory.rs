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

use std::sync::atomic::Ordering;
use std::sync::Arc;

use prometheus_client::metrics::gauge::Gauge;

use super::ByteCount;
use crate::domain::TimerError;

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

impl From<MemoryExhausted> for TimerError {
    fn from(exhausted: MemoryExhausted) -> Self {
        TimerError::ResourceExhausted(exhausted.to_string())
    }
}

impl MemoryBudget {
    /// `limit` 0 turns the budget off. `used` is the gauge the metrics expose.
    pub fn new(limit: u64, source: BudgetSource, used: Gauge) -> Arc<Self> {
        Arc::new(Self {
            limit,
            source,
            used,
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
                return Err(self.exhausted(bytes, used.max(0) as u64));
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
    }

    /// Reserves `bytes` until the reservation is dropped: for buffers in flight.
    pub fn try_reserve(self: &Arc<Self>, bytes: u64) -> Result<MemoryReservation, MemoryExhausted> {
        self.try_charge(bytes)?;
        Ok(MemoryReservation {
            budget: self.clone(),
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

/// Bytes held from the budget until dropped.
#[derive(Debug)]
pub struct MemoryReservation {
    budget: Arc<MemoryBudget>,
    bytes: u64,
}

impl MemoryReservation {
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Keeps the bytes charged for good: their holder now releases them itself.
    pub fn keep(mut self) -> u64 {
        std::mem::take(&mut self.bytes)
    }
}

impl Drop for MemoryReservation {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.budget.release(self.bytes);
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
}
