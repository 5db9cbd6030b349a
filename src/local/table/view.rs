//! How the table shows a pending timer: its view for Get, Pending and a stream, and a
//! registration's answer, which leaves the payload out.

use std::time::Duration;

use bytes::Bytes;

use super::record::TimerRecord;
use super::timer_table::TimerTable;
use crate::clock::Now;
use crate::domain::{Calendar, TimerId, TimerView};
use crate::wheel::Handle;

impl TimerTable {
    /// A registration's answer: the view without its payload, which the answer leaves out
    /// (the caller sent it), so that registering copies the payload once, into the record.
    pub(super) fn answer_of(&self, handle: Handle, now: Now) -> TimerView {
        let (deadline, record) = self.wheel.get(handle).expect("indexed handles are live");
        self.view_with(record, deadline, now, Bytes::new())
    }

    pub(super) fn view_of(&self, handle: Handle, now: Now) -> TimerView {
        let (deadline, record) = self.wheel.get(handle).expect("indexed handles are live");
        self.view(record, deadline, now)
    }

    pub(super) fn view(
        &self,
        record: &TimerRecord,
        deadline_monotonic: u64,
        now: Now,
    ) -> TimerView {
        let payload = Bytes::copy_from_slice(record.payload());
        self.view_with(record, deadline_monotonic, now, payload)
    }

    pub(super) fn view_with(
        &self,
        record: &TimerRecord,
        deadline_monotonic: u64,
        now: Now,
        payload: Bytes,
    ) -> TimerView {
        TimerView {
            id: TimerId(record.id),
            namespace: self.namespaces[record.namespace].name.clone(),
            key: record.key().map(str::to_owned),
            deadline_unix: record.deadline_unix,
            payload,
            repeat: record.repeat.get(),
            ttl: record.ttl.get(),
            remaining: Duration::from_nanos(deadline_monotonic.saturating_sub(now.monotonic)),
            fired_count: record.fired_count,
            calendar: self.calendar_of(record),
        }
    }

    pub(super) fn calendar_of(&self, record: &TimerRecord) -> Option<Calendar> {
        record
            .calendar
            .then(|| self.calendars.get(record.id).cloned())
            .flatten()
    }
}
