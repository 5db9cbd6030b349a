//! The pusher in the harness: its deliveries checked as any subscriber's (the ledger's
//! promises: none after its ack was durable, attempts never falling but for a refund), its
//! turns run until it asks nothing more, its pauses, and the head-of-line bound.
//!
//! **Head of line.** After every step the harness notes whether the pusher's window is
//! full with one of its places held by an expiration waiting out its own failure, or by
//! one that failed before waiting for an open circuit. With the real rules that never
//! happens: a failed push is handed back released (it waits in the backend, taking no
//! place), one that failed before and meets an open circuit is given back unspent to wait
//! in the backend too, a 429 slows the whole sink, a refused connection is the sink's and
//! holds only while the sink is down, and every other wait of a due expiration is for
//! pushes under way, unanswered acks, the pace, or a circuit a fresh expiration's failure
//! opened, all the sink's. So a
//! healthy expiration's wait, counted only over stretches between two steps that both
//! saw that state, must stay within [`HEAD_OF_LINE_BOUND`]: the one clock advance between
//! two steps (at most 40 ms) with room to spare, below the shortest back-off (100 ms, the
//! first attempt's 200 ms halved by jitter) that a failed expiration held in the window
//! would make it wait, however many poison expirations keep failing.

use super::{Harness, MAX_ATTEMPTS, MILLISECOND};
use crate::sim::ledger::Receipt;
use crate::sim::model::Violation;
use crate::sim::pusher::NAMESPACE;

/// See the module's summary.
const HEAD_OF_LINE_BOUND: u64 = 50 * MILLISECOND;
/// Turns of the pusher (each followed by a run of the process) within one step at most:
/// it settles what was answered, the backend answers, it pushes what it may, and gives
/// back what may not go yet, until it asks nothing more. The real pusher does so as fast
/// as the backend answers; a backlog of expirations waiting out an open circuit takes a
/// turn per window's worth.
const TURNS_PER_STEP: usize = 4_096;

impl Harness {
    /// Reads the pusher's stream: each delivery checked as a client's, then held.
    pub(super) fn pusher_receive(&mut self) -> Result<(), Violation> {
        let now = self.now();
        let Some((subscription, ack_timeout)) = self.pusher.receipt_of() else {
            return Ok(());
        };
        for delivered in self.pusher.take() {
            let key = (delivered.expiration.id.0, delivered.expiration.fired_count);
            self.trace(format_args!(
                "pushed to {:016x}/{} attempt {} id {:x}",
                key.0, key.1, delivered.attempt, delivered.delivery_id
            ));
            self.model.check_firing(&delivered)?;
            self.firings += 1;
            let fresh = !self.ledger.seen(key) && delivered.attempt == 1;
            let receipt = Receipt {
                subscription,
                ack_timeout,
                at: now,
            };
            let held = self
                .ledger
                .received(receipt, &delivered, MAX_ATTEMPTS, false)?;
            if fresh && !self.pusher.is_poison(key) {
                let waited = self.waited_behind_failures(delivered.expiration.deadline_unix, now);
                if waited > HEAD_OF_LINE_BOUND {
                    return Err(Violation(format!(
                        "{:016x}/{}, healthy, waited {waited} ns for the pusher while failed expirations held its window (bound {HEAD_OF_LINE_BOUND} ns)",
                        key.0, key.1
                    )));
                }
            }
            self.pusher.holds(delivered, held, now);
        }
        Ok(())
    }

    /// How long, from `due` to `now`, the pusher's window was held by failed expirations
    /// (see the module's summary).
    fn waited_behind_failures(&self, due: u64, now: u64) -> u64 {
        self.blocked
            .windows(2)
            .filter(|pair| pair[0].1 && pair[1].1)
            .map(|pair| {
                let from = pair[0].0.max(due);
                let to = pair[1].0.min(now);
                to.saturating_sub(from)
            })
            .sum()
    }

    /// Notes the head-of-line state after a step.
    pub(super) fn note_blocked(&mut self) {
        let now = self.now();
        let blocked = self.node.is_some() && self.pusher.blocked_by_a_failure(now);
        self.blocked.push((now, blocked));
    }

    /// The pusher's turns: subscribing once the process runs, taking in the backend's
    /// answers, settling and pushing, each followed by a run of the process, until it
    /// asks nothing more. Ok(false) if the disk crashed meanwhile (the caller crashes).
    pub(super) fn pusher_turns(&mut self) -> Result<bool, Violation> {
        for _ in 0..TURNS_PER_STEP {
            let now = self.now();
            let Some(node) = self.node.as_ref() else {
                return Ok(true);
            };
            let mut acted = false;
            if !self.pusher.subscribed() && !self.pusher.paused {
                let number = self.ledger.subscribed();
                self.pusher.subscribe(node, number);
                self.trace(format_args!("pusher subscribed {number}"));
                acted = true;
            }
            acted |= self.pusher.answers(&mut self.ledger, now)?;
            let node = self.node.as_ref().expect("checked above");
            let turn = self.pusher.act(
                node,
                &mut self.ledger,
                &mut self.choices,
                now,
                self.in_liveness,
            );
            for event in turn.events {
                self.trace(event);
            }
            if !(acted || turn.acted) {
                break;
            }
            if let Some(node) = &mut self.node {
                node.run();
            }
            if self.disk.crashed() {
                self.receive()?;
                return Ok(false);
            }
            self.receive()?;
        }
        Ok(true)
    }

    /// Pauses the sink (what the pusher holds unsent is given back, its attempt refunded)
    /// or resumes it.
    pub(super) fn pause_or_resume(&mut self) {
        self.pusher.paused = !self.pusher.paused;
        let paused = self.pusher.paused;
        self.trace(format_args!("pusher paused={paused}"));
    }

    /// The pusher's next wake-up, on the monotonic clock.
    pub(super) fn pusher_wakeup(&self) -> Option<u64> {
        let now = self.now();
        let offset = now - self.clock_monotonic();
        self.pusher
            .next_wakeup(now)
            .map(|at| at.saturating_sub(offset))
    }

    /// The expirations the pusher took and has not settled yet (neither acknowledged nor
    /// dead): those the liveness phase waits for.
    pub(super) fn pusher_unsettled(&self) -> Vec<(u64, u64)> {
        self.ledger.unsettled_in(NAMESPACE, MAX_ATTEMPTS)
    }

    /// True while one of `owed` is neither acknowledged nor dead. (Repeating timers fire
    /// for ever: only what was owed when the phase began is waited for.)
    pub(super) fn pusher_owes(&self, owed: &[(u64, u64)]) -> bool {
        owed.iter()
            .any(|key| self.ledger.unsettled(*key, MAX_ATTEMPTS).is_some())
    }
}
