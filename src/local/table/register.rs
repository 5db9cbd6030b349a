//! Where a timer is born and changed: registration (with its key, replacement and the
//! quotas it is admitted under), lookup by id or key, cancellation and a lease's touch.
//! Each is applied whole or not at all: a failing item changes nothing.

use std::time::Duration;

use super::calendar;
use super::namespaces::Admission;
use super::record::{duration_nanos, timer_fields, TimerRecord};
use super::timer_table::TimerTable;
use crate::budget::Refusal;
use crate::clock::Now;
use crate::domain::{NewTimer, Registered, Target, TimerError, TimerRef, TimerView};
use crate::local::store::records::{self as durable, record::Kind};
use crate::wheel::Handle;

impl TimerTable {
    pub(super) fn register(&mut self, timer: NewTimer, now: Now) -> Result<Registered, TimerError> {
        let existing = self.namespaces.slot(&timer.namespace);
        if let (Some(namespace), Some(key)) = (existing, &timer.key) {
            if let Some(&id) = self.namespaces[namespace].keys.get(key.as_str()) {
                let handle = self.handles.get(id).expect("keys index pending timers");
                if timer.replace {
                    return self.replace(handle, timer, now);
                }
                return Ok(Registered {
                    timer: self.answer_of(handle, now),
                    created: false,
                    replaced: false,
                });
            }
        }
        let quota = self.max_pending_per_namespace;
        let pending = existing.map_or(0, |namespace| self.namespaces[namespace].pending);
        if quota > 0 && pending >= quota {
            self.metrics.budgets.refused(Refusal::NamespaceQuota);
            return Err(TimerError::ResourceExhausted(format!(
                "namespace {:?} holds its quota of pending timers (--max-pending-per-namespace {quota})",
                timer.namespace
            )));
        }
        let (deadline_monotonic, deadline_unix) =
            calendar::first_deadline(timer.due, timer.calendar.as_ref(), now)?;
        self.admit_new_timer_to_log(&timer)?;
        // Refused registrations must not leave a namespace (and its metric series) behind.
        if self.wheel.len() >= self.wheel.max_pending() {
            self.metrics.budgets.refused(Refusal::Pending);
            return Err(TimerError::ResourceExhausted(format!(
                "max pending timers reached (--max-pending {})",
                self.wheel.max_pending()
            )));
        }
        let held = calendar::new_timer_held_bytes(&timer);
        self.charge_memory(held)?;
        let namespace = match self.namespaces.intern(&timer.namespace, Admission::Checked) {
            Ok(namespace) => namespace,
            Err(refused) => {
                self.memory.release(held);
                self.metrics.budgets.refused(Refusal::Namespaces);
                return Err(refused);
            }
        };
        let (key_and_payload, key_len) = TimerRecord::pack(timer.key.as_deref(), &timer.payload);
        let record = TimerRecord {
            id: self.next_id,
            namespace,
            key_and_payload,
            key_len,
            deadline_unix,
            repeat: timer.repeat.into(),
            ttl: timer.ttl.into(),
            fired_count: 0,
            late: false,
            calendar: timer.calendar.is_some(),
        };
        let handle = match self.wheel.insert(deadline_monotonic, record) {
            Ok(handle) => handle,
            Err(full) => {
                // Not expected (the room was checked above), but a namespace created for
                // nothing must not stay, nor its charge.
                self.namespaces.queue_if_empty(namespace, now.monotonic);
                self.memory.release(held);
                return Err(TimerError::ResourceExhausted(format!(
                    "max pending timers reached (--max-pending {})",
                    full.limit
                )));
            }
        };
        self.next_id += 1;
        if let Some(calendar) = timer.calendar {
            self.calendars.insert(self.next_id - 1, calendar);
        }
        self.replace_trace(self.next_id - 1, timer.trace);
        self.index(handle);
        self.metrics.timers_registered.inc();
        if let Some(journal) = &mut self.journal {
            let (_, record) = self.wheel.get(handle).expect("just inserted");
            journal.record_registered(&timer_fields(
                &self.namespaces,
                &self.calendars,
                &self.traces,
                record,
            ));
        }
        Ok(Registered {
            timer: self.answer_of(handle, now),
            created: true,
            replaced: false,
        })
    }

    pub(super) fn index(&mut self, handle: Handle) {
        let (_, record) = self.wheel.get(handle).expect("just inserted");
        let (namespace, id) = (record.namespace, record.id);
        let key = record.key().map(Box::from);
        self.handles.insert(id, handle);
        self.namespaces.add(namespace, id, key);
    }

    pub(super) fn unindex(&mut self, record: &TimerRecord, now: Now) {
        self.memory.release(record.held_bytes());
        self.handles.remove(record.id);
        if record.calendar {
            self.calendars.remove(record.id);
        }
        self.forget_trace(record.id);
        self.namespaces
            .remove(record.namespace, record.key(), now.monotonic);
    }

    /// Finds a pending timer's handle. `Ok(None)` means the id was issued once but the
    /// timer is no longer pending (fired or cancelled).
    pub(super) fn lookup(&self, timer: &TimerRef) -> Result<Option<Handle>, TimerError> {
        let namespace = self.namespaces.slot(&timer.namespace);
        let found = namespace.and_then(|namespace| {
            let id = match &timer.target {
                Target::Id(id) => id.0,
                Target::Key(key) => *self.namespaces[namespace].keys.get(key.as_str())?,
            };
            self.handle_in(namespace, id)
        });
        match (&timer.target, found) {
            (_, Some(handle)) => Ok(Some(handle)),
            (Target::Id(id), None) if id.0 < self.next_id && id.0 > 0 => Ok(None),
            (Target::Id(id), None) => Err(TimerError::NotFound(format!(
                "timer {id} not found in namespace {:?}",
                timer.namespace
            ))),
            (Target::Key(key), None) => Err(TimerError::NotFound(format!(
                "no pending timer with key {key:?} in namespace {:?}",
                timer.namespace
            ))),
        }
    }

    /// Like [`Self::lookup`], but a timer that is no longer pending is NOT_FOUND too.
    pub(super) fn lookup_pending(&self, timer: &TimerRef) -> Result<Handle, TimerError> {
        self.lookup(timer)?.ok_or_else(|| timer.no_longer_pending())
    }

    pub(super) fn cancel(&mut self, timer: &TimerRef, now: Now) -> Result<bool, TimerError> {
        let Some(handle) = self.lookup(timer)? else {
            return Ok(false);
        };
        let record = self.wheel.cancel(handle).expect("indexed handles are live");
        self.metrics.timers_cancelled.inc();
        self.log(|table| {
            Kind::Cancelled(durable::Cancelled {
                id: record.id,
                namespace: table.namespaces[record.namespace].name.to_string(),
            })
        });
        self.unindex(&record, now);
        Ok(true)
    }

    pub(super) fn touch(
        &mut self,
        timer: &TimerRef,
        ttl: Option<Duration>,
        now: Now,
    ) -> Result<TimerView, TimerError> {
        let handle = self.lookup_pending(timer)?;
        let (_, record) = self
            .wheel
            .get_mut(handle)
            .expect("indexed handles are live");
        if record.calendar {
            // Its deadline is its calendar's; a heartbeat would make it a lease as well.
            return Err(TimerError::FailedPrecondition(
                "ttl: a cron timer is not a lease; use Reschedule to move its next firing".into(),
            ));
        }
        let given_ttl = ttl;
        let ttl = ttl.or(record.ttl.get()).ok_or_else(|| {
            TimerError::FailedPrecondition(
                "ttl: the timer has no ttl (not a lease); give one in the request".into(),
            )
        })?;
        // A ttl given with the heartbeat becomes the timer's ttl from now on.
        record.ttl = Some(ttl).into();
        let ttl = duration_nanos(ttl);
        record.deadline_unix = now.unix.saturating_add(ttl);
        let (id, namespace, deadline_unix, fired_count) = (
            record.id,
            record.namespace,
            record.deadline_unix,
            record.fired_count,
        );
        self.wheel
            .reschedule(handle, now.monotonic.saturating_add(ttl));
        self.log(|table| {
            Kind::Touched(durable::Touched {
                id,
                namespace: table.namespaces[namespace].name.to_string(),
                deadline_unix_nanos: deadline_unix,
                ttl_nanos: given_ttl.map_or(0, duration_nanos),
                fired_count,
            })
        });
        Ok(self.view_of(handle, now))
    }
}
