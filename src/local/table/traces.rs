//! The trace contexts of pending timers, by id, beside the wheel as the cron schedules
//! are: most timers have none, so a record stays 72 bytes and pays nothing for them.
//!
//! Each kept context is charged to the memory budget on its own ([`TraceContext::held_bytes`]),
//! apart from its record's charge: it comes and goes with registration, replacement,
//! reschedule and the timer's end, and its firings share it (an `Arc`, not a copy).

use std::sync::Arc;

use super::by_id::ById;
use super::timer_table::TimerTable;
use crate::domain::TraceContext;

/// The trace contexts of the pending timers that have one, counted: while none has one
/// (no client sends a context), every lookup of a registration, firing or snapshot is a
/// comparison with zero rather than a probe of the map.
#[derive(Default)]
pub(super) struct Traces {
    by_id: ById<Arc<TraceContext>>,
    kept: usize,
}

impl Traces {
    pub(super) fn get(&self, id: u64) -> Option<&Arc<TraceContext>> {
        if self.kept == 0 {
            return None;
        }
        self.by_id.get(id)
    }

    pub(super) fn insert(&mut self, id: u64, trace: Arc<TraceContext>) {
        // A replacing registration's context takes the place of the one before.
        self.remove(id);
        debug_assert!(self.by_id.get(id).is_none(), "kept counts every context");
        self.by_id.insert(id, trace);
        self.kept += 1;
    }

    pub(super) fn remove(&mut self, id: u64) -> Option<Arc<TraceContext>> {
        if self.kept == 0 {
            return None;
        }
        let removed = self.by_id.remove(id);
        if removed.is_some() {
            self.kept -= 1;
        }
        removed
    }
}

/// What a trace context, if any, costs the memory budget.
pub(super) fn trace_held_bytes(trace: Option<&Arc<TraceContext>>) -> u64 {
    trace.map_or(0, |trace| trace.held_bytes())
}

impl TimerTable {
    /// What timer `id`'s context costs the memory budget now.
    pub(super) fn trace_bytes_of(&self, id: u64) -> u64 {
        trace_held_bytes(self.traces.get(id))
    }

    /// Gives timer `id` the context `trace` in place of the one it had (`None`: it keeps
    /// none). The caller has charged the difference, together with the rest of its
    /// change, so that a refusal changes nothing.
    pub(super) fn replace_trace(&mut self, id: u64, trace: Option<Arc<TraceContext>>) {
        match trace {
            Some(trace) => self.traces.insert(id, trace),
            None => drop(self.traces.remove(id)),
        }
    }

    /// Forgets timer `id`'s context, giving back its charge: the timer has ended.
    pub(super) fn forget_trace(&mut self, id: u64) {
        if let Some(trace) = self.traces.remove(id) {
            self.memory.release(trace.held_bytes());
        }
    }
}
