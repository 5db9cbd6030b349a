//! What the delivery task writes to the log: settlements (an expiration is done with),
//! attempts (how often one was handed out), and the boot a new delivery id belongs to.
//!
//! Settlements answer an Ack once durable. Attempts only count, so a delivery waits for
//! its attempt to be written to the OS, not for the fsync after it
//! ([`crate::local::store::Batch::leaves_once_written`]): a crash of the process keeps the
//! count, a crash of the machine may lose the last few (the expiration then comes back with
//! fewer attempts counted, never lost). What waits is held in [`crate::local::delivery::log_waits`].

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::sync::oneshot;

use super::state::Delivery;
use crate::domain::{Delivered, Expiration};
use crate::local::delivery::log_waits::{Answer, Sends};
use crate::local::delivery::queue::Waiting;
use crate::local::store::records::{record::Kind, Attempted, Record, Settled};
use crate::local::store::Batch;

impl Delivery {
    /// Records that these expirations are done with (acknowledged, or dropped for good), so a
    /// restart does not deliver them again; then sends `after`.
    pub(super) fn journal_settled(
        &mut self,
        expirations: &[Arc<Expiration>],
        after: Option<Answer>,
    ) {
        let mut batch = Batch::default();
        if self.store.is_some() {
            for expiration in expirations {
                batch.record(&Record {
                    kind: Some(Kind::Settled(Settled {
                        id: expiration.id.0,
                        fired_count: expiration.fired_count,
                    })),
                });
            }
        }
        self.append_then(batch, after);
    }

    /// Answers `reply` once what was appended before is written to the OS (kept across a
    /// crash of the process, as attempts are); at once with no log.
    pub(super) fn after_written(&mut self, reply: oneshot::Sender<()>) {
        let answer = Answer::Recorded(reply);
        match self.store.as_ref() {
            Some(store) => self.awaiting.written.push(store.last_appended(), answer),
            None => answer.send(),
        }
    }

    /// Appends `records` and sends `after` once they are durable; with no log, or nothing
    /// to write, sends it at once.
    pub(super) fn append_then(&mut self, records: Batch, after: Option<Answer>) {
        let Some(store) = self.store.as_ref().filter(|_| !records.is_empty()) else {
            if let Some(after) = after {
                after.send();
            }
            return;
        };
        let batch = store.append(records);
        if let Some(after) = after {
            self.awaiting.durable.push(batch, after);
        }
    }

    /// Appends the dispatch's records; its deliveries go out once they are written (at
    /// once without a log, which counts nothing across a restart).
    pub(super) fn send_outgoing(&mut self, outgoing: Outgoing) {
        let Outgoing {
            mut records,
            sends,
            left,
        } = outgoing;
        let sends = Sends {
            places: sends,
            left,
        };
        match self.store.as_ref() {
            Some(store) if !records.is_empty() => {
                records.leaves_once_written();
                let batch = store.append(records);
                self.awaiting.sends.push(batch, sends);
            }
            _ => sends.deliver(),
        }
    }
}

/// One dispatch's deliveries that wait for their attempts to be written, and those records.
///
/// Each holds its place in its subscriber's stream from the dispatch on (an
/// [`OwnedPermit`]), so that a dispatch never hands out more than the streams can take.
#[derive(Default)]
pub(super) struct Outgoing {
    records: Batch,
    sends: Vec<(mpsc::OwnedPermit<Delivered>, Delivered)>,
    /// Set once they have left (see [`crate::local::delivery::queue::InFlight::left`]).
    left: Option<Arc<AtomicBool>>,
}

impl Outgoing {
    /// Records a new boot first, when the last one's delivery ids ran out.
    pub(super) fn boot(&mut self, new_boot: Option<u64>) {
        if let Some(boot) = new_boot {
            self.records.record(&Record {
                kind: Some(Kind::Boot(boot)),
            });
        }
    }

    /// Records the attempts an expiration has had, this delivery counted.
    pub(super) fn attempted(&mut self, waiting: &Waiting) {
        self.records
            .record(&attempted(&waiting.expiration, waiting.attempts));
    }

    /// Takes a place in the subscriber's stream for `delivered`, to be sent once written;
    /// returns the flag that says it left, or gives `delivered` back if the stream has no
    /// place (it closed: its Unsubscribe is on the way).
    pub(super) fn send_once_written(
        &mut self,
        subscriber: &mpsc::Sender<Delivered>,
        delivered: Delivered,
    ) -> Result<Arc<AtomicBool>, Delivered> {
        let Ok(permit) = subscriber.clone().try_reserve_owned() else {
            return Err(delivered);
        };
        self.sends.push((permit, delivered));
        Ok(self.left.get_or_insert_with(Arc::default).clone())
    }
}

/// The record of an expiration's attempts so far (0: redriven, counted afresh).
pub(super) fn attempted(expiration: &Expiration, attempts: u32) -> Record {
    Record {
        kind: Some(Kind::Attempted(Attempted {
            id: expiration.id.0,
            fired_count: expiration.fired_count,
            attempts,
        })),
    }
}
