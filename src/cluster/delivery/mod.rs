//! Delivery from the shared database: subscribers on any replica share a namespace's
//! expirations, with the single node's guarantees.
//!
//! An expiration is a row of `tickd_expirations` from the moment it fires until it is
//! acknowledged. A subscriber's task claims rows for it (`FOR UPDATE SKIP LOCKED`, so two
//! subscribers never claim the same row) up to its `max_unacked`, stamping each claim with
//! the subscriber's name, the attempt number and the ack deadline. An Ack, on any replica,
//! marks the row acknowledged if that same attempt's deadline has not passed. A claim whose
//! deadline passed is claimed again by any subscriber, with the next attempt number: that
//! is redelivery, and it also covers a replica that died holding claims. A subscriber that
//! leaves hands its claims back at once. After `max_attempts` the row stays as dead and is
//! listed by Pending. The totals across namespaces are kept as on one node: expirations
//! fired beyond `--max-buffered-total` are recorded dead at once (by `firing`), dead ones
//! beyond `--max-dead-total` are trimmed oldest first, and Redrive sends back at most
//! [`MAX_REDRIVE`] a call.
//!
//! Observers take no part: each follows the namespace's rows in `seq` order and streams a
//! copy of each. While a namespace has an observer (registered in `tickd_observers`), an
//! ack marks its rows acknowledged instead of deleting them, so that the observer sees
//! them too; a trim every [`TRIM_INTERVAL`] deletes them after [`ACKED_RETENTION`], and
//! the dead beyond `--max-dead`. Namespaces nobody observes pay nothing for this. Copies are best-effort, as on one node: one whose firing committed
//! after a later-numbered one (two replicas firing at once) can be passed over.
//!
//! The firing replica hands what it fires to its own subscribers of the namespace
//! directly, claimed for them by the firing statement ([`direct`]); claims by subscribers'
//! tasks take the rest. Acks are group-committed ([`acks`]).
//!
//! Subscribers and observers wake on `tickd_fired` (sent by the firing statement for what
//! it left unclaimed), on acks made on this replica (a subscriber only if it was out of
//! room), and otherwise every [`POLL_INTERVAL`], which bounds how late a redelivery is.

/// The SQL condition of an expiration not under a live claim: never claimed, or its ack
/// deadline passed. One definition for what claims take and what counts as dead, which
/// must agree: a row is claimable again exactly when, out of attempts, it would be dead.
/// A macro, so that the statements built from it stay `&str` constants (`concat!`).
macro_rules! claim_lapsed {
    () => {
        "(claim_until IS NULL OR claim_until < clock_timestamp())"
    };
}

mod acks;
mod charged;
mod direct;
mod observer;
mod subscriber;
mod trim;

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rustc_hash::FxHashSet;
use tokio::sync::{mpsc, watch};
use tokio_postgres::Row;

use self::direct::LocalSubscribers;
pub(crate) use self::direct::{Assignment, DirectDelivery};
use crate::budget::MemoryBudget;
use crate::cluster::notifications::{Wakeups, FIRED_CHANNEL};
use crate::cluster::timers::stored_calendar;
use crate::cluster::{ClusterError, Connections, Shared};
use crate::domain::DeliveryConfig;
use crate::domain::{
    AckOutcome, Answer, Dead, DeadList, Delivered, DeliveryStream, Expiration, Expirations,
    RedriveOutcome, SubscribeOptions, TimerError, TimerId, MAX_REDRIVE,
};
use crate::metrics::Metrics;

/// How often a subscriber looks for expirations it was not woken for: redeliveries, and
/// room made by acks on other replicas.
const POLL_INTERVAL: Duration = Duration::from_millis(250);

/// The columns an [`Expiration`] is read from, in [`expiration_of`]'s order.
const EXPIRATION_COLUMNS: &str =
    "seq, attempts, namespace, timer_id, key, payload, deadline, fired_at, \
     repeat_nanos, ttl_nanos, fired_count, late, cron, time_zone";

/// A dead expiration: out of attempts (`$1`: `--max-attempts`) or marked dead, never
/// acknowledged, and not under a live claim (its last attempt's ack deadline has passed).
/// Two halves, one per index: the rows marked dead (when a full buffer records them, and
/// by the trim, see [`MARK_DEAD`]), and those out of attempts not yet marked.
///
/// Why the mark: delivery walks the rows neither acknowledged nor dead for every firing
/// (the `--max-buffered-total` count) and every claim, through an index of exactly those
/// (`tickd_expirations_live`). Were dead rows in it, a full dead list would be walked each
/// time (100,000 dead rows: 36-196 ms per firing statement, measured).
const DEAD: &str = concat!(
    "((dead AND acked_at IS NULL AND ",
    claim_lapsed!(),
    ") OR (acked_at IS NULL AND NOT dead AND attempts >= $1 AND ",
    claim_lapsed!(),
    "))"
);

/// Brings the marks up to date (`$1`: `--max-attempts`): marks the rows that ran out of
/// attempts since, and clears the mark of rows that have attempts left again (a raised
/// `--max-attempts` brings dead expirations back, as it always did here; an older
/// replica's Redrive resets the attempts without knowing the mark). Run by the trim, so
/// the rows delivery walks hold the newly dead only until its next period.
const MARK_DEAD: &str = concat!(
    "UPDATE tickd_expirations SET dead = NOT dead
     WHERE (acked_at IS NULL AND NOT dead AND attempts >= $1 AND ",
    claim_lapsed!(),
    ") OR (dead AND attempts < $1)"
);

/// The attempts of an expiration recorded dead as it fired, for want of room under
/// `--max-buffered-total` (see `firing`): more than any `--max-attempts` a delivery id
/// can carry, so it is dead whatever that is, and never claimed.
pub(crate) const OVERFLOWED_ATTEMPTS: i32 = u16::MAX as i32;

/// Expirations fired and neither acknowledged nor dead (`max_attempts`: the parameter
/// holding `--max-attempts`): waiting for a subscriber or in flight to one, what
/// `--max-buffered-total` bounds. Shared by Redrive and the firing statement, which both
/// count them; `NOT dead` lets the count walk `tickd_expirations_live` (see [`DEAD`]).
pub(crate) fn buffered(max_attempts: &str) -> String {
    format!(
        "acked_at IS NULL AND NOT dead \
         AND (attempts < {max_attempts} OR claim_until >= clock_timestamp())"
    )
}

/// Sends the dead expirations of namespace `$2` back to delivery, those named by `$3`
/// (seqs) with `$4` (the attempt their delivery id names), or all of them when `$3` is
/// NULL, oldest first, at most `$5` ([`MAX_REDRIVE`]) and no more than
/// `--max-buffered-total` (`$6`) has room for, as on one node: their attempts start again
/// from none, and every replica's subscribers of the namespace are woken to claim them.
/// Each takes a new seq, since a delivery id is (seq, attempt): with its old seq and its
/// attempts counted afresh, its next delivery would have an id it had before, and a late
/// ack from then would settle it (the column's default draws it, whatever draws it on
/// the database). Observers, which follow seqs, see a redriven expiration again.
/// Returns the delivery ids' parts of those redriven.
fn redrive_statement() -> String {
    let buffered = buffered("$1");
    format!(
        "WITH buffered AS (
            SELECT count(*) AS held FROM (
                SELECT 1 FROM tickd_expirations WHERE {buffered} LIMIT $6) unsettled
        ),
        chosen AS (
            SELECT e.seq, e.attempts FROM tickd_expirations e
            WHERE e.namespace = $2 AND {DEAD}
              AND ($3::INT8[] IS NULL
                   OR (e.seq, e.attempts) IN (SELECT * FROM unnest($3::INT8[], $4::INT4[])))
            ORDER BY e.seq
            LIMIT LEAST($5, $6 - (SELECT held FROM buffered))
            FOR UPDATE
        ),
        redriven AS (
            UPDATE tickd_expirations e
                SET seq = DEFAULT, attempts = 0, dead = false, claimed_by = NULL, claim_until = NULL
            FROM chosen WHERE e.seq = chosen.seq
            RETURNING chosen.seq, chosen.attempts
        )
        SELECT seq, attempts, pg_notify('{FIRED_CHANNEL}', $2)::TEXT FROM redriven"
    )
}

/// The query that picks the rows a subscriber claims, for the test that checks that a
/// claim does not walk the dead list (`tests/replica_plans.rs`): not part of the crate's
/// interface.
#[doc(hidden)]
pub const CLAIMABLE_STATEMENT: &str = subscriber::CLAIMABLE;

/// The ack statement's text, for the test that checks the plan a replica keeps of it
/// (`tests/replica_plans.rs`): not part of the crate's interface.
#[doc(hidden)]
pub const ACK_STATEMENT: &str = acks::ACK;

/// How long a woken subscriber lets notifications gather before it claims: one claim
/// then takes what several firings (on several replicas) produced, instead of one query
/// per firing per subscriber.
const GATHER: Duration = Duration::from_millis(5);

#[derive(Clone)]
pub struct ClusterDeliveries {
    connections: Connections,
    metrics: Arc<Metrics>,
    shared: Shared,
    config: DeliveryConfig,
    wakeups: Wakeups,
    stopping: watch::Receiver<bool>,
    next_subscriber: Arc<AtomicU64>,
    /// The replica's span, for the subscriber and observer tasks' log events.
    span: tracing::Span,
    /// Tells this process's subscribers from those of an earlier one with the same
    /// replica id, whose claims are not theirs.
    incarnation: u64,
    /// The replica's memory budget, charged for deliveries waiting in streams.
    memory: Arc<MemoryBudget>,
    /// Acks of every caller on this replica, settled a batch per statement.
    acks: acks::Acks,
    /// This replica's subscribers, for the firing to deliver to directly.
    local: LocalSubscribers,
}

impl ClusterDeliveries {
    pub fn new(
        connections: Connections,
        metrics: Arc<Metrics>,
        shared: Shared,
        config: DeliveryConfig,
        wakeups: Wakeups,
        stopping: watch::Receiver<bool>,
    ) -> Self {
        Self {
            acks: acks::start(connections.clone()),
            local: LocalSubscribers::default(),
            connections,
            metrics,
            shared,
            config,
            wakeups,
            stopping,
            next_subscriber: Arc::new(AtomicU64::new(1)),
            span: tracing::Span::none(),
            incarnation: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |since| since.as_nanos() as u64),
            memory: MemoryBudget::unlimited(),
        }
    }

    /// Settles acks on `connections`, opened from `Database::with_probe_plans`: the ack
    /// statement is then planned a few times a second instead of at every batch, where its
    /// planning took 70% of its database time (0.34 ms against 0.10-0.14 ms of execution
    /// a call, three replicas at 5,000 timers/s). `acks::ACK` says why its plan holds at
    /// any batch size. Claims keep fresh plans on the connections given to `new`.
    pub(crate) fn with_ack_connections(mut self, connections: Connections) -> Self {
        self.acks = acks::start(connections);
        self
    }

    /// Charges deliveries waiting in streams to `memory` (by default a budget of their
    /// own, unlimited).
    pub(crate) fn with_memory(mut self, memory: Arc<MemoryBudget>) -> Self {
        self.memory = memory;
        self
    }

    /// What the firing needs to hand expirations to this replica's subscribers directly.
    pub(crate) fn direct_delivery(&self) -> DirectDelivery {
        DirectDelivery {
            subscribers: self.local.clone(),
            memory: self.memory.clone(),
            metrics: self.metrics.clone(),
            wakeups: self.wakeups.clone(),
            connections: self.connections.clone(),
        }
    }

    /// Runs the subscriber and observer tasks in `span` (the replica's).
    pub(crate) fn in_span(mut self, span: tracing::Span) -> Self {
        self.span = span;
        self
    }

    /// `replica/incarnation/number`: what a subscriber's claims (or an observer's
    /// registration) are stamped with, unique across replicas and restarts.
    fn next_name(&self) -> String {
        let number = self.next_subscriber.fetch_add(1, Ordering::Relaxed);
        format!("{}/{}/{number}", self.shared.replica_id, self.incarnation)
    }

    pub(crate) fn subscribe(
        &self,
        options: SubscribeOptions,
    ) -> Result<DeliveryStream, TimerError> {
        if options.observer {
            return Ok(self.observe(options.namespace));
        }
        let rules = options.rules(&self.config.subscriber);
        Ok(self.claim_for(options, rules))
    }

    pub(crate) async fn ack(
        &self,
        namespace: String,
        delivery_ids: Vec<u64>,
    ) -> Result<AckOutcome, TimerError> {
        let request = acks::AckRequest {
            namespace: namespace.clone(),
            delivery_ids,
        };
        let given = request.delivery_ids.clone();
        let settled = self
            .acks
            .submit(request)
            .await
            .ok_or_else(|| TimerError::Unavailable("the replica is stopping".into()))??;
        let settled_ids: Vec<u64> = settled.iter().copied().collect();
        // Room for this replica's subscribers of the namespace that were out of it.
        if self.local.acknowledged(&namespace, &settled_ids) {
            self.wakeups.wake(&namespace);
        }
        let unknown = given
            .into_iter()
            .filter(|id| !settled.contains(id))
            .collect();
        Ok(AckOutcome {
            acknowledged: settled.len() as u32,
            unknown,
        })
    }

    /// The dead expirations kept, oldest first, of one namespace or (None) of every one:
    /// the newest `--max-dead` of each namespace, which is what the trim keeps (older ones
    /// it has yet to delete are neither counted nor listed), so `count` is what is listed.
    pub async fn dead(&self, namespace: Option<String>) -> Result<DeadList, TimerError> {
        let client = self.connections.client().await?;
        let max_attempts = self.config.max_attempts as i32;
        let dead_capacity = self.config.dead_capacity as i64;
        let mut parameters: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
            vec![&max_attempts, &dead_capacity];
        // Two statements rather than `$3 IS NULL OR ...`, so that one namespace's listing
        // keeps using the namespace index.
        let in_namespace = match &namespace {
            Some(namespace) => {
                parameters.push(namespace);
                "namespace = $3 AND"
            }
            None => "",
        };
        let rows = client
            .query(
                &format!(
                    "SELECT {EXPIRATION_COLUMNS} FROM (
                         SELECT {EXPIRATION_COLUMNS}, row_number() OVER (
                             PARTITION BY namespace ORDER BY seq DESC) AS newer
                         FROM tickd_expirations
                         WHERE {in_namespace} {DEAD}
                     ) dead
                     WHERE newer <= $2 ORDER BY seq"
                ),
                &parameters,
            )
            .await
            .map_err(ClusterError::query("listing dead expirations"))?;
        Ok(DeadList {
            count: rows.len() as u64,
            dead: rows
                .iter()
                .map(|row| {
                    let attempts = row.get::<_, i32>(1);
                    let overflowed = attempts == OVERFLOWED_ATTEMPTS;
                    Dead {
                        id: delivery_id(row.get(0), attempts),
                        expiration: Arc::new(expiration_of(row)),
                        // As on one node: never delivered.
                        attempts: if overflowed { 0 } else { attempts as u32 },
                        reason: if overflowed {
                            "delivery buffer full"
                        } else {
                            "max delivery attempts reached without an ack"
                        },
                    }
                })
                .collect(),
        })
    }

    /// Sends the namespace's dead expirations named by `ids` (delivery ids as Pending
    /// lists them; None: all of them) back to delivery, their attempts counted afresh:
    /// the oldest [`MAX_REDRIVE`] at most, within the room `--max-buffered-total` leaves.
    /// "All of them" beyond that takes several calls, each until `redriven` is less.
    pub async fn redrive(
        &self,
        namespace: String,
        ids: Option<Vec<u64>>,
    ) -> Result<RedriveOutcome, TimerError> {
        let max_attempts = self.config.max_attempts as i32;
        let (seqs, attempts): (Option<Vec<i64>>, Option<Vec<i32>>) = match &ids {
            Some(ids) => {
                let (seqs, attempts) = ids.iter().map(|&id| split_delivery_id(id)).unzip();
                (Some(seqs), Some(attempts))
            }
            None => (None, None),
        };
        let rows = self
            .connections
            .client()
            .await?
            .query(
                &redrive_statement(),
                &[
                    &max_attempts,
                    &namespace,
                    &seqs,
                    &attempts,
                    &(MAX_REDRIVE as i64),
                    &i64::try_from(self.config.buffered_total).unwrap_or(i64::MAX),
                ],
            )
            .await
            .map_err(ClusterError::query("redriving dead expirations"))?;
        // The notification reaches this replica's subscribers too; waking them here
        // spares them its round trip.
        self.wakeups.wake(&namespace);
        let (redriven, not_dead) = answered(&rows, ids.unwrap_or_default());
        Ok(RedriveOutcome { redriven, not_dead })
    }
}

/// Why a subscriber's or observer's task goes on.
#[derive(Debug, PartialEq, Eq)]
enum Woke {
    /// Woken: something may be there to look at.
    ToLook,
    /// The poll interval passed without a wake-up.
    Polled,
    /// The client went away.
    StreamClosed,
    /// The replica is stopping or draining.
    Stopping,
}

/// Waits for a `tickd_fired` wake-up (then lets more gather for [`GATHER`]), the poll
/// interval, the client leaving, or the replica stopping.
async fn next_look(
    woken: Pin<&mut tokio::sync::futures::Notified<'_>>,
    sender: &mpsc::Sender<Delivered>,
    stopping: &mut watch::Receiver<bool>,
) -> Woke {
    tokio::select! {
        () = woken => {
            tokio::time::sleep(GATHER).await;
            Woke::ToLook
        }
        () = tokio::time::sleep(POLL_INTERVAL) => Woke::Polled,
        () = sender.closed() => Woke::StreamClosed,
        () = crate::cluster::shared::until_stopped(stopping) => Woke::Stopping,
    }
}

/// Delivery ids name one attempt of one expiration, so an ack of an attempt whose deadline
/// passed (and was delivered again) is told apart from an ack of the current one.
fn delivery_id(seq: i64, attempt: i32) -> u64 {
    ((seq as u64) << 16) | u64::from(attempt as u16)
}

fn split_delivery_id(delivery_id: u64) -> (i64, i32) {
    ((delivery_id >> 16) as i64, (delivery_id & 0xffff) as i32)
}

/// How many deliveries `rows` (whose first columns are `seq, attempts`) settled, and
/// which of the delivery ids `given` they do not name.
fn answered(rows: &[Row], given: Vec<u64>) -> (u32, Vec<u64>) {
    let settled: FxHashSet<u64> = rows
        .iter()
        .map(|row| delivery_id(row.get(0), row.get(1)))
        .collect();
    let others = given
        .into_iter()
        .filter(|id| !settled.contains(id))
        .collect();
    (settled.len() as u32, others)
}

/// Reads [`EXPIRATION_COLUMNS`].
fn expiration_of(row: &Row) -> Expiration {
    expiration_at(row, 0)
}

/// Reads [`EXPIRATION_COLUMNS`] from column `first` on (where `seq` is).
fn expiration_at(row: &Row, first: usize) -> Expiration {
    let nanos = |column: usize| {
        row.get::<_, Option<i64>>(first + column)
            .map(|nanos| Duration::from_nanos(nanos as u64))
    };
    Expiration {
        memory: Default::default(),
        over_memory_budget: false,
        namespace: Arc::from(row.get::<_, &str>(first + 2)),
        id: TimerId(row.get::<_, i64>(first + 3) as u64),
        key: row.get(first + 4),
        payload: Bytes::copy_from_slice(row.get::<_, &[u8]>(first + 5)),
        deadline_unix: row.get::<_, i64>(first + 6) as u64,
        fired_unix: row.get::<_, i64>(first + 7) as u64,
        repeat: nanos(8),
        ttl: nanos(9),
        fired_count: row.get::<_, i64>(first + 10) as u64,
        calendar: stored_calendar(row, first + 12),
        late: row.get(first + 11),
    }
}

/// The replicated backend's expirations, seen as the API's [`Expirations`].
impl Expirations for ClusterDeliveries {
    fn subscribe(&self, options: SubscribeOptions) -> Result<DeliveryStream, TimerError> {
        let counted = self.metrics.subscribers.count(&options);
        Ok(counted.around(ClusterDeliveries::subscribe(self, options)?))
    }

    fn ack(&self, namespace: String, delivery_ids: Vec<u64>) -> Answer<AckOutcome> {
        let deliveries = self.clone();
        Answer::work(
            async move { ClusterDeliveries::ack(&deliveries, namespace, delivery_ids).await },
        )
    }

    fn dead(&self, namespace: Option<String>) -> Answer<DeadList> {
        let deliveries = self.clone();
        Answer::work(async move { ClusterDeliveries::dead(&deliveries, namespace).await })
    }

    fn redrive(&self, namespace: String, ids: Option<Vec<u64>>) -> Answer<RedriveOutcome> {
        let deliveries = self.clone();
        Answer::work(async move { ClusterDeliveries::redrive(&deliveries, namespace, ids).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delivery_id_carries_its_expiration_and_attempt() {
        for (seq, attempt) in [(1, 1), (123_456_789, 5), ((1 << 47) - 1, 65_535)] {
            assert_eq!(split_delivery_id(delivery_id(seq, attempt)), (seq, attempt));
        }
        assert_ne!(delivery_id(7, 1), delivery_id(7, 2));
    }
}
