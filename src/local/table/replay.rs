//! Start-up and snapshots: the table rebuilt from the log's records, and the snapshot
//! streamed out of the wheel a chunk at a time while the worker keeps firing.

use std::sync::Arc;

use tracing::warn;

use super::journal::{SNAPSHOT_CHUNK_BYTES, SNAPSHOT_CHUNK_TIMERS};
use super::namespaces::Admission;
use super::record::{recovered_expiration, timer_fields, OptionalNanos, TimerRecord};
use super::timer_table::{TimerTable, SCAN_POSITIONS};
use super::traces::trace_held_bytes;
use crate::budget::memory::{expiration_held_bytes, logged_firing_bytes};
use crate::budget::{MemoryBudget, MemoryReservation};
use crate::clock::Now;
use crate::domain::{Expiration, TraceContext};
use crate::local::store::records::{self as durable, record::Kind, Record};
use crate::local::store::RecoveredFiring;
use crate::wheel::Handle;

impl TimerTable {
    /// Applies one record from the store at start-up. Replay is idempotent per timer, so a
    /// record already reflected in a (fuzzy) snapshot changes nothing.
    pub fn replay(&mut self, record: Record, now: Now) {
        match record.kind {
            Some(Kind::Registered(timer)) => self.restore(timer, now),
            Some(Kind::Cancelled(cancelled)) => {
                if let Some(handle) = self.find(&cancelled.namespace, cancelled.id) {
                    let record = self.wheel.cancel(handle).expect("indexed handles are live");
                    self.unindex(&record, now);
                }
            }
            Some(Kind::Touched(touched)) => {
                let current = self.find(&touched.namespace, touched.id).filter(|&handle| {
                    // A snapshot may already hold a later firing of a repeating timer; a
                    // heartbeat from before that firing must not move it back.
                    self.wheel
                        .get(handle)
                        .is_some_and(|(_, record)| record.fired_count <= touched.fired_count)
                });
                if let Some(handle) = current {
                    self.move_deadline(handle, touched.deadline_unix_nanos, now);
                    if touched.ttl_nanos > 0 {
                        if let Some((_, record)) = self.wheel.get_mut(handle) {
                            record.ttl = OptionalNanos(touched.ttl_nanos);
                        }
                    }
                }
            }
            Some(Kind::Fired(fired)) => self.replay_fired(fired, now),
            // What delivery and the store follow themselves (see `store::scan`).
            Some(Kind::Settled(_) | Kind::Attempted(_) | Kind::Boot(_)) | None => {}
            Some(Kind::NextId(next_id)) => self.next_id = self.next_id.max(next_id),
        }
    }

    pub(super) fn find(&self, namespace: &str, id: u64) -> Option<Handle> {
        let namespace = self.namespaces.slot(namespace)?;
        self.handle_in(namespace, id)
    }

    /// The pending timer with this id, if it belongs to this namespace.
    pub(super) fn handle_in(&self, namespace: u32, id: u64) -> Option<Handle> {
        let handle = self.handles.get(id)?;
        let (_, record) = self.wheel.get(handle)?;
        (record.namespace == namespace).then_some(handle)
    }

    pub(super) fn replay_fired(&mut self, fired: durable::Fired, now: Now) {
        let Some(timer) = fired.timer else {
            return;
        };
        let Some(handle) = self.find(&timer.namespace, timer.id) else {
            return;
        };
        let (_, record) = self
            .wheel
            .get_mut(handle)
            .expect("indexed handles are live");
        if record.fired_count >= timer.fired_count {
            return;
        }
        record.fired_count = timer.fired_count;
        match fired.rearmed_deadline_unix_nanos {
            0 => {
                let record = self.wheel.cancel(handle).expect("indexed handles are live");
                self.unindex(&record, now);
            }
            rearmed => self.move_deadline(handle, rearmed, now),
        }
    }

    pub(super) fn move_deadline(&mut self, handle: Handle, deadline_unix: u64, now: Now) {
        if let Some((_, record)) = self.wheel.get_mut(handle) {
            record.deadline_unix = deadline_unix;
            record.late = deadline_unix < now.unix;
        }
        self.wheel
            .reschedule(handle, now.monotonic_at(deadline_unix));
    }

    /// Puts a whole timer back (replacing an older copy of it). A copy from before a
    /// firing the table has already seen (a fuzzy snapshot holds the later state) is
    /// older and changes nothing.
    ///
    /// A cron timer's schedule is parsed once per distinct expression and zone, not at
    /// every record of it (see [`super::stored_schedules`]).
    pub(super) fn restore(&mut self, timer: durable::Timer, now: Now) {
        if let Some(handle) = self.find(&timer.namespace, timer.id) {
            let (_, current) = self.wheel.get(handle).expect("indexed handles are live");
            if current.fired_count > timer.fired_count {
                return;
            }
            let record = self.wheel.cancel(handle).expect("indexed handles are live");
            self.unindex(&record, now);
        }
        let calendar = self.stored_schedules.stored(&timer.cron, &timer.time_zone);
        let namespace = self
            .namespaces
            .intern(&timer.namespace, Admission::Restored)
            .expect("restoring is never refused");
        let (key_and_payload, key_len) = TimerRecord::pack(Some(&timer.key), &timer.payload);
        let record = TimerRecord {
            id: timer.id,
            namespace,
            key_and_payload,
            key_len,
            deadline_unix: timer.deadline_unix_nanos,
            repeat: OptionalNanos(timer.repeat_nanos),
            ttl: OptionalNanos(timer.ttl_nanos),
            fired_count: timer.fired_count,
            late: timer.deadline_unix_nanos < now.unix,
            calendar: calendar.is_some(),
        };
        self.next_id = self.next_id.max(timer.id + 1);
        // Recovery restores what was accepted before, even past a since-lowered limit (and
        // through the overlap a fuzzy snapshot's replay can briefly have).
        let (id, deadline) = (timer.id, now.monotonic_at(timer.deadline_unix_nanos));
        match self.wheel.readmit(deadline, record) {
            Ok(handle) => {
                if let Some(calendar) = calendar {
                    self.calendars.insert(id, calendar);
                }
                let trace =
                    TraceContext::stored(&timer.traceparent, &timer.tracestate, &timer.baggage);
                // Charged even past the budget: what was accepted comes back whole, and
                // registrations are refused until enough of it has left.
                let (_, record) = self.wheel.get(handle).expect("just readmitted");
                self.memory
                    .charge(record.held_bytes() + trace_held_bytes(trace.as_ref()));
                self.replace_trace(id, trace);
                self.index(handle);
            }
            Err(full) => {
                warn!(id, error = %full, "timer not restored: no index space left");
                self.namespaces.queue_if_empty(namespace, now.monotonic);
            }
        }
    }

    /// Schedules recovery may read back without parsing them: the simulation's few, parsed
    /// once a run. A stored expression and zone equal to one of these parse to the same
    /// schedule, and parsing is most of what a simulated restart would cost otherwise.
    #[cfg(any(test, feature = "sim"))]
    pub(crate) fn knowing_schedules(
        &mut self,
        calendars: impl IntoIterator<Item = crate::domain::Calendar>,
    ) {
        for calendar in calendars {
            self.stored_schedules.know(calendar);
        }
    }

    /// The fired expirations recovery found unsettled, each with the deliveries it had, held
    /// again until settled: each charged to `memory` (even past its limit: nothing accepted
    /// is dropped to fit). The last step of recovery: the schedules it read back are let go.
    pub(crate) fn held_again(
        &mut self,
        unsettled: Vec<RecoveredFiring>,
        memory: &Arc<MemoryBudget>,
    ) -> Vec<(Expiration, u32)> {
        let mut schedules = std::mem::take(&mut self.stored_schedules);
        unsettled
            .into_iter()
            .filter_map(|(fired, attempts)| {
                let mut expiration = recovered_expiration(fired, &mut schedules)?;
                let key = expiration.key.as_ref().map_or(0, String::len);
                let payload = expiration.payload.len();
                let held = expiration_held_bytes(key, payload, expiration.calendar.is_some())
                    + logged_firing_bytes(key, payload)
                    + 2 * trace_held_bytes(expiration.trace.as_ref());
                expiration.memory = MemoryReservation::forced(memory, held);
                Some((expiration, attempts))
            })
            .collect()
    }

    /// Streams the next chunk of a snapshot in progress, if any is due at `now`: up to a
    /// chunk of timers from the storage position where the last chunk ended. In a round
    /// that `handed_over` expirations, the chunk waits for the next round, a few times in
    /// a row at most (see [`crate::local::table::journal::Journal::defer_chunk`]).
    pub(super) fn continue_snapshot(&mut self, now: u64, handed_over: bool) {
        let Some(journal) = &mut self.journal else {
            return;
        };
        let Some(start) = journal.snapshot_cursor(now) else {
            return;
        };
        if journal.snapshot_backlogged() || (handed_over && journal.defer_chunk()) {
            return;
        }
        let size = SNAPSHOT_CHUNK_TIMERS;
        let mut timers = Vec::with_capacity(size);
        let mut bytes = 0;
        let mut resume_at = None;
        for (position, timer) in self.wheel.positions_from(start).take(SCAN_POSITIONS) {
            if timers.len() == size || bytes >= SNAPSHOT_CHUNK_BYTES {
                resume_at = Some(position);
                break;
            }
            resume_at = position.checked_add(1);
            if let Some((_, _, record)) = timer {
                bytes += record.key_and_payload.len()
                    + self
                        .traces
                        .get(record.id)
                        .map_or(0, |trace| trace.stored_bytes());
                timers.push(timer_fields(
                    &self.namespaces,
                    &self.calendars,
                    &self.traces,
                    record,
                ));
            }
        }
        let more =
            resume_at.filter(|&position| self.wheel.positions_from(position).next().is_some());
        let journal = self.journal.as_mut().expect("checked above");
        journal.write_snapshot_chunk(timers, more, now);
    }
}
