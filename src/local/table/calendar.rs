//! Moving and reshaping pending timers: cron timers' schedules and their firings,
//! Reschedule (a new next firing, perhaps a new payload), and a registration that replaces
//! the pending timer under its key.
//!
//! Schedules live beside the wheel, by timer id (see [`super::record::Calendars`]). Each of these changes is logged as the whole timer (a
//! `Registered` record), which replay puts back in place of the older copy: each grows the
//! log, so each asks the disk budget first ([`TimerTable::admit_to_log`]).

use std::sync::Arc;

use bytes::Bytes;

use super::record::{duration_nanos, timer_fields, TimerRecord};
use super::timer_table::TimerTable;
use super::traces::trace_held_bytes;
use crate::budget::memory::held_bytes;
use crate::clock::Now;
use crate::domain::{
    Calendar, Due, NewTimer, Registered, TimerError, TimerRef, TimerView, TraceContext,
};
use crate::wheel::Handle;

/// What a new timer's record and trace context cost the memory budget.
pub(super) fn new_timer_held_bytes(timer: &NewTimer) -> u64 {
    held_bytes(
        timer.key.as_ref().map_or(0, String::len),
        timer.payload.len(),
        timer.calendar.is_some(),
    ) + trace_held_bytes(timer.trace.as_ref())
}

/// When a timer is next due `due` from `now`, as (monotonic, wall clock); for a cron timer,
/// the first cron time at or after that.
pub(super) fn first_deadline(
    due: Due,
    calendar: Option<&Calendar>,
    now: Now,
) -> Result<(u64, u64), TimerError> {
    let earliest = match due {
        Due::After(delay) => now.unix.saturating_add(duration_nanos(delay)),
        Due::AtUnix(unix) => unix,
    };
    let deadline_unix = match calendar {
        None => earliest,
        Some(calendar) => calendar.first_firing(earliest)?,
    };
    let deadline_monotonic = match due {
        // A delay counts on the monotonic clock, so a wall-clock step does not move it.
        Due::After(delay) if calendar.is_none() => {
            now.monotonic.saturating_add(duration_nanos(delay))
        }
        _ => now.monotonic_at(deadline_unix),
    };
    Ok((deadline_monotonic, deadline_unix))
}

/// A cron timer's next firing after the one happening at `now`, as (wall clock,
/// monotonic): the first cron time after now, so that firings missed while tickd was down
/// (or stalled) collapse into the one that just happened.
pub(super) fn next_firing(
    calendar: &Calendar,
    record: &TimerRecord,
    now: Now,
) -> Option<(u64, u64)> {
    let next = calendar.next_firing(record.deadline_unix, now.unix)?;
    debug_assert!(
        next > record.deadline_unix,
        "cron firings strictly increase"
    );
    Some((next, now.monotonic_at(next)))
}

impl TimerTable {
    /// Moves a pending timer's next firing to `due`, and replaces its payload if one is
    /// given. A lease keeps its ttl (its next heartbeat moves it again); a cron timer moves
    /// this firing only, and follows its schedule after it.
    pub(super) fn reschedule(
        &mut self,
        timer: &TimerRef,
        due: Due,
        payload: Option<Bytes>,
        trace: Option<Arc<TraceContext>>,
        now: Now,
    ) -> Result<TimerView, TimerError> {
        let handle = self.lookup_pending(timer)?;
        let (deadline_monotonic, deadline_unix) = first_deadline(due, None, now)?;
        let (_, current) = self.wheel.get(handle).expect("indexed handles are live");
        let id = current.id;
        let payload_len = payload.as_ref().map_or(current.payload().len(), Bytes::len);
        let key_len = current.key().map_or(0, str::len);
        let namespace_len = self.namespaces[current.namespace].name.len();
        let trace = trace.or_else(|| self.traces.get(id).cloned());
        let trace_len = trace.as_ref().map_or(0, |trace| trace.stored_bytes());
        self.admit_to_log(namespace_len, key_len, payload_len + trace_len)?;
        let before = current.held_bytes() + self.trace_bytes_of(id);
        let after =
            held_bytes(key_len, payload_len, current.calendar) + trace_held_bytes(trace.as_ref());
        self.recharge_memory(before, after)?;
        self.replace_trace(id, trace);
        let (_, record) = self
            .wheel
            .get_mut(handle)
            .expect("indexed handles are live");
        record.deadline_unix = deadline_unix;
        record.late = false;
        if let Some(payload) = payload {
            let key = record.key().map(str::to_owned);
            (record.key_and_payload, record.key_len) = TimerRecord::pack(key.as_deref(), &payload);
        }
        self.wheel.reschedule(handle, deadline_monotonic);
        self.log_whole(handle);
        // Its answer leaves the payload out, like a registration's.
        Ok(self.answer_of(handle, now))
    }

    /// Replaces the pending timer `handle` (found under `timer`'s key) with `timer`, keeping
    /// its id and its count of firings: its deadline, payload and schedule are `timer`'s.
    pub(super) fn replace(
        &mut self,
        handle: Handle,
        timer: NewTimer,
        now: Now,
    ) -> Result<Registered, TimerError> {
        let (deadline_monotonic, deadline_unix) =
            first_deadline(timer.due, timer.calendar.as_ref(), now)?;
        self.admit_new_timer_to_log(&timer)?;
        let (_, current) = self.wheel.get(handle).expect("indexed handles are live");
        let before = current.held_bytes() + self.trace_bytes_of(current.id);
        self.recharge_memory(before, new_timer_held_bytes(&timer))?;
        let (_, record) = self
            .wheel
            .get_mut(handle)
            .expect("indexed handles are live");
        let id = record.id;
        (record.key_and_payload, record.key_len) =
            TimerRecord::pack(timer.key.as_deref(), &timer.payload);
        record.deadline_unix = deadline_unix;
        record.repeat = timer.repeat.into();
        record.ttl = timer.ttl.into();
        record.late = false;
        record.calendar = timer.calendar.is_some();
        match timer.calendar {
            Some(calendar) => self.calendars.insert(id, calendar),
            None => drop(self.calendars.remove(id)),
        }
        self.replace_trace(id, timer.trace);
        self.wheel.reschedule(handle, deadline_monotonic);
        self.log_whole(handle);
        Ok(Registered {
            timer: self.answer_of(handle, now),
            created: false,
            replaced: true,
        })
    }

    /// Asks the disk budget (see [`crate::local::store::disk_budget`]) for a timer's whole record
    /// with a namespace, key and payload of these lengths; without a log, nothing is asked.
    pub(super) fn admit_to_log(
        &self,
        namespace: usize,
        key: usize,
        payload: usize,
    ) -> Result<(), TimerError> {
        self.journal
            .as_ref()
            .map_or(Ok(()), |journal| journal.admit(namespace, key, payload))
    }

    /// [`Self::admit_to_log`] for a new timer's record: its key, payload and trace context.
    pub(super) fn admit_new_timer_to_log(&self, timer: &NewTimer) -> Result<(), TimerError> {
        let key_len = timer.key.as_ref().map_or(0, String::len);
        let trace_len = timer.trace.as_ref().map_or(0, |trace| trace.stored_bytes());
        self.admit_to_log(
            timer.namespace.len(),
            key_len,
            timer.payload.len() + trace_len,
        )
    }

    /// Logs the timer whole, as it now is: replay puts it back in place of the older copy.
    pub(super) fn log_whole(&mut self, handle: Handle) {
        if let Some(journal) = &mut self.journal {
            let (_, record) = self.wheel.get(handle).expect("indexed handles are live");
            journal.record_registered(&timer_fields(
                &self.namespaces,
                &self.calendars,
                &self.traces,
                record,
            ));
        }
    }
}
