//! Where a timer fires: its record becomes an expiration (a repeating or cron timer is
//! armed again), and each round's expirations leave for delivery with the number of the
//! log batch that records them.

use bytes::Bytes;

use super::calendar;
use super::record::{next_repeat, timer_fields, TimerRecord};
use super::timer_table::TimerTable;
use super::traces::trace_held_bytes;
use crate::budget::MemoryReservation;
use crate::clock::Now;
use crate::domain::{Expiration, FiredRound, Handoff, TimerId};

impl TimerTable {
    /// Turns a fired record into its expiration, and re-arms it if it repeats.
    pub(super) fn expire(
        &mut self,
        mut record: TimerRecord,
        deadline_monotonic: u64,
        now: Now,
    ) -> Expiration {
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
        // Its trace context is shared with the timer while it repeats, and the store keeps
        // a copy in its record of the firing.
        let trace = self.traces.get(record.id).cloned();
        let logged = self.journal.is_some();
        let held = record.expiration_held_bytes(logged)
            + trace_held_bytes(trace.as_ref()) * (1 + u64::from(logged));
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
            trace,
            late: record.late,
            memory,
            over_memory_budget,
        };
        if let Some(journal) = &mut self.journal {
            let rearmed_deadline = next.map_or(0, |(unix, _)| unix);
            let fields = timer_fields(&self.namespaces, &self.calendars, &self.traces, &record);
            journal.record_fired(&fields, now.unix, rearmed_deadline);
        }
        match next {
            Some((unix, monotonic)) => self.rearm(record, unix, monotonic),
            None => self.unindex(&record, now),
        }
        expiration
    }

    /// Puts a fired repeating timer back at its next deadline (see [`next_repeat`]).
    pub(super) fn rearm(
        &mut self,
        mut record: TimerRecord,
        deadline_unix: u64,
        deadline_monotonic: u64,
    ) {
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

    /// Hands a round's firings to the worker, which gives them to delivery once it has
    /// released its lock (a channel send and a task's wake-up are no reason to keep callers
    /// from combining). With a log, the round carries the number of the batch that records
    /// it, appended here: delivery holds it until that batch is durable, so that every
    /// record before it (the timers' registrations too) is durable as well, and a batch the
    /// log fails to write is never delivered (a timer whose registration was answered with
    /// an error never fires).
    pub(super) fn hand_off(&mut self, round: Vec<Handoff>, fired: &mut Vec<FiredRound>) {
        let logged_in = self.journal.as_mut().map(|journal| journal.flush());
        if !round.is_empty() {
            fired.push(FiredRound {
                handoffs: round,
                logged_in,
            });
        }
    }
}
