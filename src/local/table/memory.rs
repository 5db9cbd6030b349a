//! The table's share of the memory budget (see [`crate::budget`]): every pending timer is
//! charged its [`held_bytes`](crate::budget::memory::held_bytes) as it is admitted, and
//! given back as it leaves (`unindex`). A one-shot timer that fires hands its bytes to
//! its expiration instead, so firing never needs room; a repeating one stays, and its
//! firing is charged anew (see `expire`).

use std::sync::Arc;

use super::timer_table::TimerTable;
use crate::budget::{MemoryBudget, Refusal};
use crate::domain::TimerError;

impl TimerTable {
    /// Charges timers to `budget` (by default an unlimited one, which only counts).
    pub fn with_memory_budget(mut self, budget: Arc<MemoryBudget>) -> Self {
        debug_assert!(self.wheel.is_empty(), "the budget is set before any timer");
        self.memory = budget;
        self
    }

    /// Takes `bytes` from the memory budget, or refuses (and counts the refusal).
    pub(super) fn charge_memory(&self, bytes: u64) -> Result<(), TimerError> {
        self.memory.try_charge(bytes).map_err(|exhausted| {
            self.metrics.budgets.refused(Refusal::Memory);
            TimerError::from(exhausted)
        })
    }

    /// A timer's size changes from `before` to `after` bytes (a new payload or schedule):
    /// growing is charged, and may be refused; shrinking gives back at once.
    pub(super) fn recharge_memory(&self, before: u64, after: u64) -> Result<(), TimerError> {
        match after.checked_sub(before) {
            Some(grown) if grown > 0 => self.charge_memory(grown),
            _ => {
                self.memory.release(before - after);
                Ok(())
            }
        }
    }
}
