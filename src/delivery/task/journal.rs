//! What the delivery task writes to the log: settlements (an expiration is done with),
//! attempts (how often one was handed out), and the boot a new delivery id belongs to.
//!
//! Settlements answer an Ack once durable. Attempts only count, so a delivery waits for
//! its attempt to be written to the OS, not for the fsync after it
//! ([`crate::store::Batch::on_written`]): a crash of the process keeps the count, a crash
//! of the machine may lose the last few (the expiration then comes back with fewer
//! attempts counted, never lost).

use std::sync::Arc;

use tokio::sync::mpsc;

use super::Delivery;
use crate::delivery::queue::Waiting;
use crate::domain::{Delivered, Expiration};
use crate::store::records::{record::Kind, Attempted, Record, Settled};
use crate::store::{Batch, OnDurable, StoreHandle};

impl Delivery {
    /// Records that these expirations are done with (acknowledged, or dropped for good), so a
    /// restart does not deliver them again; then runs `after`.
    pub(super) fn journal_settled(
        &self,
        expirations: &[Arc<Expiration>],
        after: Option<OnDurable>,
    ) {
        let Some(store) = self.store.as_ref().filter(|_| !expirations.is_empty()) else {
            if let Some(after) = after {
                after();
            }
            return;
        };
        let mut batch = Batch::default();
        for expiration in expirations {
            batch.record(&Record {
                kind: Some(Kind::Settled(Settled {
                    id: expiration.id.0,
                    fired_count: expiration.fired_count,
                })),
            });
        }
        if let Some(after) = after {
            batch.on_durable(after);
        }
        store.append(batch);
    }
}

/// One dispatch's deliveries that wait for their attempts to be written, and those records.
#[derive(Default)]
pub(super) struct Outgoing {
    records: Batch,
    sends: Vec<(mpsc::Sender<Delivered>, Delivered)>,
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

    pub(super) fn send_once_written(
        &mut self,
        subscriber: &mpsc::Sender<Delivered>,
        delivered: Delivered,
    ) {
        self.sends.push((subscriber.clone(), delivered));
    }

    /// Appends the records; the deliveries go out once they are written (at once without
    /// a log, which counts nothing across a restart).
    pub(super) fn send(mut self, store: Option<&StoreHandle>) {
        let sends = std::mem::take(&mut self.sends);
        let deliver = move || {
            for (subscriber, delivered) in sends {
                // A closed stream's Unsubscribe takes its deliveries back.
                let _ = subscriber.try_send(delivered);
            }
        };
        match store {
            Some(store) if !self.records.is_empty() => {
                self.records.on_written(Box::new(deliver));
                store.append(self.records);
            }
            _ => deliver(),
        }
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
