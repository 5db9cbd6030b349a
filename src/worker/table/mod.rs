//! The service's timer state, owned by the worker thread: every pending timer in the
//! wheel, plus the indexes the API needs (id, key, namespace counts).
//!
//! All of it lives on one thread, so each command is applied whole or not at all: a
//! failing item changes nothing, and no lock is ever taken.

mod by_id;
mod calendar;
mod id_index;
mod memory;
mod record;
mod replay;
#[cfg(test)]
mod snapshot_pacing_tests;
mod stored_schedules;
mod view;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::oneshot;

use super::command::{Command, Reschedule};
use super::journal::Journal;
use super::namespaces::{Admission, Namespaces};
use super::TimerState;
use crate::budget::memory::held_bytes;
use crate::budget::{MemoryBudget, MemoryReservation, Refusal};
use crate::clock::{Clock, Now, SystemClock};
use crate::domain::{
    Expiration, Handoff, NewTimer, PageToken, PendingPage, PendingQuery, Registered, Target,
    TimerError, TimerId, TimerRef, TimerView,
};
use crate::metrics::Metrics;
use crate::store::records::{self as durable, record::Kind};
use crate::wheel::{Handle, Wheel};
use id_index::IdIndex;
use record::{duration_nanos, next_repeat, timer_fields, TimerRecord};

/// Storage positions one listing page (or one snapshot chunk) looks at, at most: about a
/// millisecond of the worker's time, so that listing a small namespace among millions of
/// timers never stalls firing. A page may hence come back short, even empty, with a token
/// to continue from.
const SCAN_POSITIONS: usize = 65_536;

/// How long a snapshot waits for the disk when its chunks sent are not yet written.
const SNAPSHOT_BACKLOG_RETRY_NANOS: u64 = 1_000_000;

#[derive(Debug, Clone, Copy)]
pub struct TableConfig {
    pub tick: Duration,
    pub max_pending: usize,
    /// 0: no per-namespace quota.
    pub max_pending_per_namespace: u64,
    /// Live namespaces at most (see [`crate::namespaces`]); 0: no limit.
    pub max_namespaces: usize,
}

pub struct TimerTable {
    wheel: Wheel<TimerRecord>,
    /// Every pending timer by id (ids are unique across namespaces; lookups check the
    /// namespace too).
    handles: IdIndex,
    namespaces: Namespaces,
    /// The schedules of cron timers (see [`calendar`]).
    calendars: record::Calendars,
    /// Until recovery ends ([`TimerTable::held_again`]): the schedules it has read back.
    stored_schedules: stored_schedules::StoredSchedules,
    next_id: u64,
    /// With a data directory: where records and deferred replies go.
    journal: Option<Journal>,
    max_pending_per_namespace: u64,
    /// Every pending timer's bytes are charged here on admission and released when it
    /// leaves (a one-shot timer's pass to its expiration as it fires).
    memory: Arc<MemoryBudget>,
    /// When the worker last woke (monotonic), to pace a snapshot the disk is behind on.
    last_woken: u64,
    metrics: Arc<Metrics>,
}

impl TimerTable {
    pub fn new(config: TableConfig, metrics: Arc<Metrics>) -> Self {
        Self::on_clock(config, metrics, &SystemClock::new())
    }

    /// A table whose namespace numbers start at `clock`'s wall-clock time (see
    /// [`Namespaces::new`]): the simulation's clock is its own.
    pub(crate) fn on_clock(config: TableConfig, metrics: Arc<Metrics>, clock: &dyn Clock) -> Self {
        let tick = u64::try_from(config.tick.as_nanos())
            .unwrap_or(u64::MAX)
            .max(1);
        Self {
            wheel: Wheel::new(tick, config.max_pending),
            handles: IdIndex::default(),
            namespaces: Namespaces::new(config.max_namespaces, metrics.clone(), clock),
            calendars: record::Calendars::default(),
            stored_schedules: Default::default(),
            next_id: 1,
            journal: None,
            max_pending_per_namespace: config.max_pending_per_namespace,
            memory: MemoryBudget::unlimited(),
            last_woken: 0,
            metrics,
        }
    }

    /// From now on every mutation is journaled and replies wait until it is durable.
    pub(crate) fn attach_journal(&mut self, mut journal: Journal) {
        journal.charge_to(self.memory.clone());
        self.journal = Some(journal);
    }

    /// Answers a command: at once in memory mode, else once the batch is durable.
    fn respond<T: Send + 'static>(&mut self, reply: oneshot::Sender<T>, value: T) {
        // A dropped receiver means the client went away; there is nobody left to tell.
        match &mut self.journal {
            Some(journal) => journal.on_durable(Box::new(move || {
                let _ = reply.send(value);
            })),
            None => {
                let _ = reply.send(value);
            }
        }
    }

    /// See [`Journal::ask_for_snapshot`].
    #[cfg(any(test, feature = "sim"))]
    pub(crate) fn ask_for_snapshot(&mut self) {
        if let Some(journal) = &mut self.journal {
            journal.ask_for_snapshot();
        }
    }

    /// Journals a record, built only when there is a journal.
    fn log(&mut self, record: impl FnOnce(&Self) -> Kind) {
        if self.journal.is_some() {
            let kind = record(self);
            if let Some(journal) = &mut self.journal {
                journal.record(kind);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.wheel.len()
    }

    /// The live namespaces, which delivery shares with the table (see
    /// [`crate::namespaces`]).
    pub(crate) fn live_namespaces(&self) -> Arc<crate::namespaces::LiveNamespaces> {
        self.namespaces.live()
    }

    pub fn is_empty(&self) -> bool {
        self.wheel.is_empty()
    }

    /// Every pending timer, by deadline: what [`super::Worker::stop`] leaves behind.
    pub fn into_pending(mut self, now: Now) -> Vec<TimerView> {
        let drained = self.wheel.drain();
        drained
            .into_iter()
            .map(|expired| self.view(&expired.value, expired.deadline, now))
            .collect()
    }

    fn register(&mut self, timer: NewTimer, now: Now) -> Result<Registered, TimerError> {
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
        let key_len = timer.key.as_ref().map_or(0, String::len);
        self.admit_to_log(timer.namespace.len(), key_len, timer.payload.len())?;
        // Refused registrations must not leave a namespace (and its metric series) behind.
        if self.wheel.len() >= self.wheel.max_pending() {
            self.metrics.budgets.refused(Refusal::Pending);
            return Err(TimerError::ResourceExhausted(format!(
                "max pending timers reached (--max-pending {})",
                self.wheel.max_pending()
            )));
        }
        let held = held_bytes(
            timer.key.as_ref().map_or(0, String::len),
            timer.payload.len(),
            timer.calendar.is_some(),
        );
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
        self.index(handle);
        self.metrics.timers_registered.inc();
        if let Some(journal) = &mut self.journal {
            let (_, record) = self.wheel.get(handle).expect("just inserted");
            journal.record_registered(&timer_fields(&self.namespaces, &self.calendars, record));
        }
        Ok(Registered {
            timer: self.answer_of(handle, now),
            created: true,
            replaced: false,
        })
    }

    fn index(&mut self, handle: Handle) {
        let (_, record) = self.wheel.get(handle).expect("just inserted");
        let (namespace, id) = (record.namespace, record.id);
        let key = record.key().map(Box::from);
        self.handles.insert(id, handle);
        self.namespaces.add(namespace, id, key);
    }

    fn unindex(&mut self, record: &TimerRecord, now: Now) {
        self.memory.release(record.held_bytes());
        self.handles.remove(record.id);
        if record.calendar {
            self.calendars.remove(record.id);
        }
        self.namespaces
            .remove(record.namespace, record.key(), now.monotonic);
    }

    /// Finds a pending timer's handle. `Ok(None)` means the id was issued once but the
    /// timer is no longer pending (fired or cancelled).
    fn lookup(&self, timer: &TimerRef) -> Result<Option<Handle>, TimerError> {
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
    fn lookup_pending(&self, timer: &TimerRef) -> Result<Handle, TimerError> {
        self.lookup(timer)?
            .ok_or_else(|| TimerError::no_longer_pending(timer))
    }

    fn cancel(&mut self, timer: &TimerRef, now: Now) -> Result<bool, TimerError> {
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

    fn touch(
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

    /// One page of the pending timers, in storage order (see [`PageToken`]).
    fn pending(&self, query: PendingQuery, now: Now) -> Result<PendingPage, TimerError> {
        let namespace = match &query.namespace {
            None => None,
            Some(name) => match self.namespaces.slot(name) {
                Some(slot) => Some(slot),
                None => return Ok(PendingPage::default()),
            },
        };
        let number = namespace.map(|slot| self.namespaces[slot].number);
        let start = match query.after {
            None => 0,
            Some(token) => token.local_position(number).ok_or_else(|| {
                TimerError::invalid(
                    "page_token",
                    "comes from the listing of another namespace (or of one since emptied)",
                )
            })?,
        };
        let count = namespace.map_or(self.wheel.len() as u64, |slot| {
            self.namespaces[slot].pending
        });
        if query.page_size == 0 {
            return Ok(PendingPage {
                count,
                ..PendingPage::default()
            });
        }
        let mut timers = Vec::new();
        let mut bytes = 0;
        let mut resume_at = None;
        for (position, timer) in self.wheel.positions_from(start).take(SCAN_POSITIONS) {
            if timers.len() == query.page_size || bytes >= query.max_bytes {
                resume_at = Some(position);
                break;
            }
            resume_at = position.checked_add(1);
            let Some((_, deadline, record)) = timer else {
                continue;
            };
            if namespace.is_none_or(|id| id == record.namespace) {
                let view = self.view(record, deadline, now);
                bytes += view.listed_bytes();
                timers.push(view);
            }
        }
        // Past the last position there is nothing more to list.
        let more =
            resume_at.is_some_and(|position| self.wheel.positions_from(position).next().is_some());
        Ok(PendingPage {
            count,
            timers,
            next_page_token: more.then(|| PageToken::local(number, resume_at.unwrap_or_default())),
        })
    }

    /// Turns a fired record into its expiration, and re-arms it if it repeats.
    fn expire(&mut self, mut record: TimerRecord, deadline_monotonic: u64, now: Now) -> Expiration {
        record.fired_count += 1;
        self.metrics.timers_fired.inc();
        let lateness = now.monotonic.saturating_sub(deadline_monotonic);
        self.metrics.firing_lateness.observe(lateness as f64 / 1e9);
        let calendar = self.calendar_of(&record);
        let next = match (record.repeat.get(), &calendar) {
            (Some(interval), _) => Some(next_repeat(&record, deadline_monotonic, interval, now)),
            (None, Some(calendar)) => calendar::next_firing(calendar, &record, now),
            (None, None) => None,
        };
        // A timer that stays pending keeps its bytes, so its firing needs bytes of its own:
        // past the budget it is kept dead rather than buffered. One that leaves makes room
        // for its firing (given back by `unindex` below), which is charged even past the
        // budget, by its bookkeeping's few hundred bytes at most: a one-shot firing is never
        // turned away, and registrations wait until its ack gives the bytes back.
        let held = record.expiration_held_bytes(self.journal.is_some());
        let (memory, over_memory_budget) = match next {
            Some(_) => match self.memory.try_reserve(held) {
                Ok(reservation) => (reservation, false),
                Err(_) => (MemoryReservation::forced(&self.memory, held), true),
            },
            None => (MemoryReservation::forced(&self.memory, held), false),
        };
        let expiration = Expiration {
            id: TimerId(record.id),
            namespace: self.namespaces[record.namespace].name.clone(),
            key: record.key().map(str::to_owned),
            payload: Bytes::copy_from_slice(record.payload()),
            deadline_unix: record.deadline_unix,
            fired_unix: now.unix,
            repeat: record.repeat.get(),
            ttl: record.ttl.get(),
            fired_count: record.fired_count,
            calendar,
            late: record.late,
            memory,
            over_memory_budget,
        };
        if let Some(journal) = &mut self.journal {
            let rearmed_deadline = next.map_or(0, |(unix, _)| unix);
            let fields = timer_fields(&self.namespaces, &self.calendars, &record);
            journal.record_fired(&fields, now.unix, rearmed_deadline);
        }
        match next {
            Some((unix, monotonic)) => self.rearm(record, unix, monotonic),
            None => self.unindex(&record, now),
        }
        expiration
    }

    /// Puts a fired repeating timer back at its next deadline (see [`next_repeat`]).
    fn rearm(&mut self, mut record: TimerRecord, deadline_unix: u64, deadline_monotonic: u64) {
        record.deadline_unix = deadline_unix;
        record.late = false;
        let id = record.id;
        // The timer was admitted before; re-arming takes back the place it just freed.
        let handle = self
            .wheel
            .readmit(deadline_monotonic, record)
            .expect("re-arming reuses the fired timer's place");
        self.handles.insert(id, handle);
    }
}

impl TimerState for TimerTable {
    type Command = Command;
    type Fired = Handoff;

    fn apply(&mut self, command: Command, now: Now) {
        crate::faults::panic_if_injected("worker");
        match command {
            Command::Register { timers, reply } => {
                let results = timers
                    .into_iter()
                    .map(|timer| self.register(timer, now))
                    .collect();
                self.respond(reply, results);
            }
            Command::Cancel { timer, reply } => {
                let cancelled = self.cancel(&timer, now);
                self.respond(reply, cancelled);
            }
            Command::Get { timer, reply } => {
                let result = self
                    .lookup_pending(&timer)
                    .map(|handle| self.view_of(handle, now));
                self.respond(reply, result);
            }
            Command::Touch { timer, ttl, reply } => {
                let touched = self.touch(&timer, ttl, now);
                self.respond(reply, touched);
            }
            Command::Pending { query, reply } => {
                let page = self.pending(query, now);
                self.respond(reply, page);
            }
            Command::Reschedule(reschedule) => {
                let Reschedule {
                    timer,
                    due,
                    payload,
                    reply,
                } = *reschedule;
                let moved = self.reschedule(&timer, due, payload, now);
                self.respond(reply, moved);
            }
        }
    }

    fn end_batch(&mut self) {
        let next_id = self.next_id;
        if let Some(journal) = &mut self.journal {
            journal.flush();
            journal.maybe_begin_snapshot(next_id);
        }
    }

    fn fire_due(&mut self, now: Now, fired: &mut Vec<Handoff>) {
        self.last_woken = now.monotonic;
        let handed_over_before = fired.len();
        let mut expired = Vec::new();
        // Planted bug: the wheel is advanced a tick ahead of the clock.
        let until = if crate::faults::planted("fire-early") {
            now.monotonic + self.wheel.tick()
        } else {
            now.monotonic
        };
        self.wheel.advance(until, &mut expired);
        fired.reserve(expired.len());
        for entry in expired {
            fired.push(Handoff::Fired(self.expire(
                entry.value,
                entry.deadline,
                now,
            )));
        }
        // After this batch's expirations, so that delivery holds what they need first.
        self.namespaces
            .sweep(now.monotonic, |name| fired.push(Handoff::Forgotten(name)));
        if let Some(journal) = &mut self.journal {
            journal.flush();
        }
        // A snapshot chunk prefers a round that hands nothing over: the worker comes
        // straight back for it (`next_expiration`), once these firings are on their way to
        // delivery. Encoded first, it held them back by its length, and their hand-off
        // could miss the group commit that carried their records.
        self.continue_snapshot(now.monotonic, fired.len() > handed_over_before);
    }

    fn next_expiration(&self) -> Option<u64> {
        // A snapshot in progress asks to be woken for its next chunk when it is due, or,
        // while the disk catches up with the chunks sent, a moment later.
        let snapshot = self.journal.as_ref().and_then(|journal| {
            let due = journal.next_chunk_at()?;
            Some(match journal.snapshot_backlogged() {
                false => due,
                // Never earlier than `due`: the last chunk went at or before `last_woken`.
                true => self.last_woken.saturating_add(SNAPSHOT_BACKLOG_RETRY_NANOS),
            })
        });
        [
            self.wheel.next_wakeup(),
            self.namespaces.next_sweep(),
            snapshot,
        ]
        .into_iter()
        .flatten()
        .min()
    }
}
