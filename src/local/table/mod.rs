//! The service's timer state, owned by the worker thread: every pending timer in the
//! wheel, plus the indexes the API needs (id, key, namespace counts).
//!
//! All of it lives on one thread, so each command is applied whole or not at all: a
//! failing item changes nothing, and no lock is ever taken.
//!
//! [`TimerTable`] is one type written in parts, a file for each step of a timer's life,
//! so that a reader following one timer reads each file once:
//! - `timer_table`: the type, its construction, and how it answers (at once, or once the
//!   log has it);
//! - `register`: where a timer is born and changed (registration, lookup, cancel, touch);
//! - `calendar`: cron timers, Reschedule, and a registration that replaces a timer;
//! - `fire`: where it fires and leaves for delivery;
//! - `page` and `view`: how it is listed and shown;
//! - `replay`: the table rebuilt from the log at start, and snapshots streamed out;
//! - `memory` and `traces`: its share of the memory budget, and its trace contexts;
//! - this file: the worker's [`TimerState`] over it (apply a command, fire, end a batch).
//!
//! The other files are types of their own that the table holds: its indexes (`id_index`,
//! `by_id`, `namespaces`), a timer's record (`record`), the journal its changes go to and
//! the replies waiting for the log (`journal`, `durable_replies`).

mod by_id;
mod calendar;
pub mod command;
pub(crate) mod durable_replies;
mod fire;
mod id_index;
pub(crate) mod journal;
mod memory;
pub(crate) mod namespaces;
mod page;
mod record;
mod register;
mod replay;
#[cfg(test)]
mod snapshot_pacing_tests;
mod stored_schedules;
mod timer_table;
mod traces;
mod view;

use crate::clock::Now;
use crate::domain::{FiredRound, Handoff};
use crate::worker::TimerState;
use command::{Command, Reschedule};
pub use timer_table::{TableConfig, TimerTable};

/// How long a snapshot waits for the disk when its chunks sent are not yet written.
const SNAPSHOT_BACKLOG_RETRY_NANOS: u64 = 1_000_000;

impl TimerState for TimerTable {
    type Command = Command;
    /// Each round's hand-offs, with the log batch that records them (see
    /// [`TimerTable::hand_off`]): the worker's sink gives them to delivery.
    type Fired = FiredRound;

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
                    trace,
                    reply,
                } = *reschedule;
                let moved = self.reschedule(&timer, due, payload, trace, now);
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

    /// Fires what is due into `fired`, one round with the log batch that records it.
    fn fire_due(&mut self, now: Now, fired: &mut Vec<FiredRound>) {
        self.last_woken = now.monotonic;
        let mut expired = Vec::new();
        // Planted bug: the wheel is advanced a tick ahead of the clock.
        let until = if crate::faults::planted("fire-early") {
            now.monotonic + self.wheel.tick()
        } else {
            now.monotonic
        };
        self.wheel.advance(until, &mut expired);
        let mut round = Vec::with_capacity(expired.len());
        for entry in expired {
            round.push(Handoff::Fired(self.expire(
                entry.value,
                entry.deadline,
                now,
            )));
        }
        // After this batch's expirations, so that delivery holds what they need first.
        self.namespaces
            .sweep(now.monotonic, |name| round.push(Handoff::Forgotten(name)));
        let handed_over = !round.is_empty();
        self.hand_off(round, fired);
        // A snapshot chunk prefers a round that hands nothing over: the worker comes
        // straight back for it (`next_expiration`), once these firings are on their way to
        // delivery. Encoded first, it would hold them back by its length.
        self.continue_snapshot(now.monotonic, handed_over);
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
