//! What comes back from the simulated process each step: deliveries on the subscribers'
//! streams, and the answers to calls, acks and Redrives, each checked against the
//! [`Model`](crate::sim::model::Model) and the [`Ledger`] as it arrives.

use super::{Call, Harness, MAX_ATTEMPTS};
use crate::domain::TimerError;
use crate::sim::ledger::{Ledger, Receipt};
use crate::sim::model::Violation;
use crate::sim::node::{reply, take_delivery, Reply};

impl Harness {
    /// Every subscriber reads its stream at once (a client that keeps reading).
    pub(super) fn receive(&mut self) -> Result<(), Violation> {
        let now = self.now();
        let mut received = Vec::new();
        for client in &mut self.clients {
            while let Some(delivered) = take_delivery(&mut client.subscription) {
                received.push((client.number, client.ack_timeout, delivered));
            }
        }
        for (subscription, ack_timeout, delivered) in received {
            self.trace(format_args!(
                "delivered {:016x}/{} attempt {} id {:x} to {subscription}",
                delivered.expiration.id.0,
                delivered.expiration.fired_count,
                delivered.attempt,
                delivered.delivery_id
            ));
            self.model.check_firing(&delivered)?;
            self.firings += 1;
            self.ledger.received(
                Receipt {
                    subscription,
                    ack_timeout,
                    at: now,
                },
                &delivered,
                MAX_ATTEMPTS,
                true,
            )?;
        }
        self.pusher_receive()
    }

    /// Takes in the answers that came, checking each against the model.
    pub(super) fn answers(&mut self) -> Result<(), Violation> {
        let now = self.now();
        let mut still = Vec::new();
        let mut answered = Vec::new();
        for mut call in std::mem::take(&mut self.calls) {
            let done = match &mut call {
                Call::Register { token, answer } => match reply(answer) {
                    Reply::Waiting => false,
                    Reply::Dropped => {
                        self.model.register_answered(*token, Err(false), now)?;
                        true
                    }
                    Reply::Answered(mut results) => {
                        let result = results.pop().expect("one timer per registration");
                        answered.push(format!(
                            "answer {token}: {:?}",
                            result.as_ref().map(|registered| (
                                registered.timer.id.0,
                                registered.created,
                                registered.replaced
                            ))
                        ));
                        match result {
                            Ok(registered) => {
                                self.model.register_answered(*token, Ok(&registered), now)?
                            }
                            Err(error) => self.model.register_answered(
                                *token,
                                Err(!matches!(error, TimerError::Unavailable(_))),
                                now,
                            )?,
                        }
                        true
                    }
                },
                Call::Cancel { id, answer } => match reply(answer) {
                    Reply::Waiting => false,
                    Reply::Dropped | Reply::Answered(Err(TimerError::Unavailable(_))) => {
                        self.model.cancelled(*id, None, now);
                        true
                    }
                    Reply::Answered(found) => {
                        self.model.cancelled(*id, Some(found.unwrap_or(false)), now);
                        true
                    }
                },
                Call::Reschedule { id, asked, answer } => match reply(answer) {
                    Reply::Waiting => false,
                    Reply::Dropped | Reply::Answered(Err(TimerError::Unavailable(_))) => {
                        self.model.rescheduled(*id, None, *asked, now);
                        true
                    }
                    Reply::Answered(Ok(view)) => {
                        self.model
                            .rescheduled(*id, Some(view.deadline_unix), *asked, now);
                        true
                    }
                    Reply::Answered(Err(_)) => true,
                },
                Call::Touch {
                    id,
                    ttl,
                    sent_at,
                    answer,
                } => {
                    let outcome = match reply(answer) {
                        Reply::Waiting => None,
                        Reply::Dropped | Reply::Answered(Err(TimerError::Unavailable(_))) => {
                            Some(Ok(None))
                        }
                        Reply::Answered(Ok(view)) => Some(Ok(Some(view.deadline_unix))),
                        Reply::Answered(Err(_)) => Some(Err(())),
                    };
                    if let Some(outcome) = outcome {
                        answered.push(format!("touch {id:016x} -> {outcome:?}"));
                        self.model.touched(*id, *ttl, outcome, *sent_at)?;
                    }
                    outcome.is_some()
                }
            };
            if !done {
                still.push(call);
            }
        }
        self.calls = still;
        for id in std::mem::take(&mut self.model.reused_ids) {
            self.ledger.forget_timer(id);
        }
        for event in answered {
            self.trace(event);
        }
        let mut waiting = Vec::new();
        for (mut later, held, sent_at) in std::mem::take(&mut self.acks) {
            match later.poll() {
                None => waiting.push((later, held, sent_at)),
                Some(None) => {}
                Some(Some(outcome)) => {
                    let outcome = outcome.clone();
                    let (_, ids) = Ledger::ids(&held);
                    self.trace(format_args!("ack {ids:x?} -> {outcome:?}"));
                    self.ledger.acked(&held, &outcome, sent_at, now)?;
                }
            }
        }
        self.acks = waiting;
        let mut waiting = Vec::new();
        for (mut later, namespace, candidates) in std::mem::take(&mut self.redrives) {
            match later.poll() {
                None => waiting.push((later, namespace, candidates)),
                Some(None) => {}
                Some(Some(outcome)) => {
                    let redriven = outcome.redriven;
                    self.trace(format_args!("redrive {namespace} -> {redriven}"));
                    self.ledger.redrive_answered(&candidates, redriven, now)?;
                }
            }
        }
        self.redrives = waiting;
        Ok(())
    }
}
