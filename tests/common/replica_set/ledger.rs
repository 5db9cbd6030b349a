//! What the clients of a replica set were told: registrations acknowledged (or refused),
//! expirations delivered on each replica's streams (timer, firing, attempt, when, and what
//! became of the ack), and the checks every replica test makes of it: nothing acknowledged
//! lost, each timer fired once, a second delivery only as a redelivery.
//!
//! A timer's firing is identified by its `fired_at`: two owners firing the same timer
//! would show two `fired_at` values and two first deliveries (attempt 1). Redeliveries
//! (attempt > 1, same `fired_at`) are allowed, since a claim can be lost with the replica
//! holding it.

use std::collections::{BTreeMap, BTreeSet};
use std::future::ready;
use std::sync::{Arc, Mutex};

use super::clients::Background;
use super::ReplicaSet;

/// One expiration as a subscriber received it.
#[derive(Clone, Debug)]
pub(crate) struct Delivery {
    pub(crate) timer_id: String,
    pub(crate) fired_at: i128,
    pub(crate) attempt: u32,
    /// The replica whose stream it came on.
    pub(crate) replica: String,
    /// When the subscriber read it (unix nanos, the test's clock).
    pub(crate) received_at: i128,
    pub(crate) ack: AckOutcome,
}

/// What became of a delivery's ack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum AckOutcome {
    /// Not attempted yet (held by the subscriber, or the call is on its way).
    Awaiting,
    Acknowledged,
    /// The replica answered that the delivery no longer awaited an ack (its deadline
    /// passed, or another attempt took it): it is delivered again.
    NotAwaiting,
    /// The call failed (the replica was unreachable, or could not reach its database).
    Failed(String),
}

/// What the clients were told.
#[derive(Default)]
pub(crate) struct Ledger {
    /// Registrations a replica acknowledged: timer id → deadline (unix nanos).
    pub(crate) registered: BTreeMap<String, i128>,
    pub(crate) register_errors: u64,
    pub(crate) deliveries: Vec<Delivery>,
}

pub(crate) type SharedLedger = Arc<Mutex<Ledger>>;

impl Ledger {
    /// Records a delivery whose ack is still to come; its index, for [`Ledger::acked`].
    pub(crate) fn delivered(&mut self, delivery: Delivery) -> usize {
        self.deliveries.push(delivery);
        self.deliveries.len() - 1
    }

    pub(crate) fn acked(&mut self, index: usize, outcome: AckOutcome) {
        self.deliveries[index].ack = outcome;
    }

    /// Acknowledged registrations never delivered.
    pub(crate) fn undelivered(&self) -> Vec<String> {
        let delivered: BTreeSet<&str> = self
            .deliveries
            .iter()
            .map(|d| d.timer_id.as_str())
            .collect();
        self.registered
            .keys()
            .filter(|id| !delivered.contains(id.as_str()))
            .cloned()
            .collect()
    }

    /// Acknowledged registrations with no delivery whose ack succeeded.
    pub(crate) fn unacknowledged(&self) -> Vec<String> {
        let acknowledged: BTreeSet<&str> = self
            .deliveries
            .iter()
            .filter(|d| d.ack == AckOutcome::Acknowledged)
            .map(|d| d.timer_id.as_str())
            .collect();
        self.registered
            .keys()
            .filter(|id| !acknowledged.contains(id.as_str()))
            .cloned()
            .collect()
    }

    pub(crate) fn deliveries_by_timer(&self) -> BTreeMap<&str, Vec<&Delivery>> {
        let mut by_timer: BTreeMap<&str, Vec<&Delivery>> = BTreeMap::new();
        for delivery in &self.deliveries {
            by_timer
                .entry(&delivery.timer_id)
                .or_default()
                .push(delivery);
        }
        by_timer
    }

    pub(crate) fn summary(&self) -> String {
        let mut per_replica: BTreeMap<&str, usize> = BTreeMap::new();
        let mut lost_acks: BTreeMap<String, usize> = BTreeMap::new();
        for delivery in &self.deliveries {
            *per_replica.entry(&delivery.replica).or_default() += 1;
            if delivery.ack != AckOutcome::Acknowledged {
                *lost_acks.entry(format!("{:?}", delivery.ack)).or_default() += 1;
            }
        }
        let redeliveries = self.deliveries.iter().filter(|d| d.attempt > 1).count();
        format!(
            "{} registrations acknowledged ({} failed), {} deliveries ({redeliveries} \
             redeliveries), per replica: {per_replica:?}, acks not made: {lost_acks:?}",
            self.registered.len(),
            self.register_errors,
            self.deliveries.len(),
        )
    }
}

/// How many first deliveries (attempt 1) each timer must have had.
pub(crate) enum FirstDeliveries {
    /// Nothing was lost in transit: each timer's attempt 1 was seen.
    ExactlyOne,
    /// A replica died, drained or was cut off holding claims: a first delivery may never
    /// have arrived, and its redelivery came instead.
    AtMostOne,
}

/// Every acknowledged registration was delivered; each timer was fired once (one
/// `fired_at`), first delivered at most once (or exactly once, per `first`), and never
/// delivered twice with the same attempt number (a second delivery is a redelivery).
pub(crate) fn assert_each_timer_fired_once(ledger: &Ledger, first: FirstDeliveries) {
    let undelivered = ledger.undelivered();
    assert!(
        undelivered.is_empty(),
        "{} acknowledged registrations never delivered: {undelivered:?}",
        undelivered.len()
    );
    let mut violations = Vec::new();
    for (id, deliveries) in ledger.deliveries_by_timer() {
        let firings: BTreeSet<i128> = deliveries.iter().map(|d| d.fired_at).collect();
        let attempts: BTreeSet<u32> = deliveries.iter().map(|d| d.attempt).collect();
        let first_deliveries = deliveries.iter().filter(|d| d.attempt == 1).count();
        let first_ok = match first {
            FirstDeliveries::ExactlyOne => first_deliveries == 1,
            FirstDeliveries::AtMostOne => first_deliveries <= 1,
        };
        if firings.len() != 1 || !first_ok || attempts.len() != deliveries.len() {
            violations.push(format!(
                "timer {id}: {} firings, {first_deliveries} first deliveries, {} deliveries \
                 of {} attempt numbers: {deliveries:?}",
                firings.len(),
                deliveries.len(),
                attempts.len()
            ));
        }
    }
    assert!(
        violations.is_empty(),
        "{} timers fired more than once or delivered more than once per attempt:\n{}",
        violations.len(),
        violations.join("\n")
    );
}

/// With every replica up, every registration is acknowledged.
pub(crate) fn assert_all_registered(ledger: &SharedLedger, count: usize) {
    let ledger = ledger.lock().unwrap();
    assert_eq!(
        ledger.registered.len(),
        count,
        "a healthy cluster refused registrations: {}",
        ledger.summary()
    );
}

pub(crate) fn assert_all_delivered_by(ledger: &Ledger, replica: &str) {
    let elsewhere: Vec<&Delivery> = ledger
        .deliveries
        .iter()
        .filter(|delivery| delivery.replica != replica)
        .collect();
    assert!(
        elsewhere.is_empty(),
        "deliveries from a replica other than {replica}: {elsewhere:?}"
    );
}

pub(crate) fn registered_at_least(ledger: &SharedLedger, count: usize) -> Result<(), String> {
    let registered = ledger.lock().unwrap().registered.len();
    if registered >= count {
        Ok(())
    } else {
        Err(format!(
            "{registered} of {count} registrations acknowledged"
        ))
    }
}

impl ReplicaSet {
    pub(crate) async fn wait_until_delivered(&self, ledger: &SharedLedger) {
        self.eventually("every acknowledged registration delivered", || {
            let undelivered = ledger.lock().unwrap().undelivered().len();
            ready(match undelivered {
                0 => Ok(()),
                _ => Err(format!("{undelivered} not delivered yet")),
            })
        })
        .await;
    }

    /// Ends a test's traffic: waits until every acknowledged timer is delivered and the
    /// database holds nothing pending or unacknowledged, stops the consumers, and checks
    /// that each timer fired once.
    pub(crate) async fn settle_and_check(
        &self,
        ledger: &SharedLedger,
        consumers: Background,
        first: FirstDeliveries,
    ) {
        self.wait_until_delivered(ledger).await;
        self.wait_until_drained().await;
        consumers.stop().await;
        let ledger = ledger.lock().unwrap();
        eprintln!("{}", ledger.summary());
        assert_each_timer_fired_once(&ledger, first);
    }
}
