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
//! listed by Pending.
//!
//! Observers take no part: each follows the namespace's rows in `seq` order and streams a
//! copy of each. While a namespace has an observer (registered in `tickd_observers`), an
//! ack marks its rows acknowledged instead of deleting them, so that the observer sees
//! them too; a trim every [`TRIM_INTERVAL`] deletes them after [`ACKED_RETENTION`], and
//! the dead beyond `--max-dead`. Namespaces nobody observes pay nothing for this. Copies are best-effort, as on one node: one whose firing committed
//! after a later-numbered one (two replicas firing at once) can be passed over.
//!
//! Subscribers and observers wake on `tickd_fired` (sent by the firing statement), on acks
//! made on this replica, and otherwise every [`POLL_INTERVAL`], which bounds how late a
//! redelivery is.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use rustc_hash::FxHashSet;
use tokio::sync::{mpsc, watch, Notify};
use tokio_postgres::Row;
use tokio_stream::wrappers::ReceiverStream;

use tracing::{debug, warn};

use super::loader::FIRED_CHANNEL;
use super::{ClusterError, Connections, Shared};
use crate::delivery::DeliveryConfig;
use crate::domain::{
    AckOutcome, Answer, Dead, DeadList, Delivered, DeliveryStream, Expiration, Expirations,
    SubscribeOptions, TimerError, TimerId,
};
use crate::metrics::Metrics;

/// How often a subscriber looks for expirations it was not woken for: redeliveries, and
/// room made by acks on other replicas.
const POLL_INTERVAL: Duration = Duration::from_millis(250);

/// The columns an [`Expiration`] is read from, in [`expiration_of`]'s order.
const EXPIRATION_COLUMNS: &str =
    "seq, attempts, namespace, timer_id, key, payload, deadline, fired_at, \
     repeat_nanos, ttl_nanos, fired_count, late";

/// Claimable rows of namespace `$1` with attempts left (`$2`): never claimed, or claimed
/// and not acknowledged in time. Oldest first, skipping rows another claim is taking; at
/// most `$3` (room in the stream), and no more than take subscriber `$4` to `$6`
/// unacknowledged claims.
const CLAIMABLE: &str = "SELECT seq FROM tickd_expirations
     WHERE namespace = $1 AND attempts < $2 AND acked_at IS NULL
       AND (claim_until IS NULL OR claim_until < clock_timestamp())
     ORDER BY seq
     LIMIT GREATEST(0, LEAST($3, $6 - (
         SELECT count(*) FROM tickd_expirations
         WHERE claimed_by = $4 AND claim_until > clock_timestamp())))
     FOR UPDATE SKIP LOCKED";

/// Settles the deliveries (`$2` seqs, `$3` attempts) of namespace `$1` whose claim is still
/// live: deletes them, or, while the namespace has a live observer, marks them
/// acknowledged so that the observer can still copy them.
const ACK: &str = "
WITH settled AS (
    SELECT e.seq FROM tickd_expirations e
    JOIN unnest($2::INT8[], $3::INT4[]) AS a(seq, attempts)
      ON e.seq = a.seq AND e.attempts = a.attempts
    WHERE e.namespace = $1 AND e.acked_at IS NULL AND e.claimed_by IS NOT NULL
      AND e.claim_until > clock_timestamp()
),
observed AS (
    SELECT EXISTS (SELECT 1 FROM tickd_observers
                   WHERE namespace = $1 AND alive_until > clock_timestamp()) AS yes
),
kept AS (
    UPDATE tickd_expirations SET acked_at = clock_timestamp(), claimed_by = NULL, claim_until = NULL
    WHERE seq IN (SELECT seq FROM settled) AND (SELECT yes FROM observed)
    RETURNING seq, attempts
),
gone AS (
    DELETE FROM tickd_expirations
    WHERE seq IN (SELECT seq FROM settled) AND NOT (SELECT yes FROM observed)
    RETURNING seq, attempts
)
SELECT seq, attempts FROM kept UNION ALL SELECT seq, attempts FROM gone";

/// How long an observer's registration lasts unrenewed (it renews at every look).
const OBSERVER_TTL: Duration = Duration::from_secs(10);

/// How long a woken subscriber lets notifications gather before it claims: one claim
/// then takes what several firings (on several replicas) produced, instead of one query
/// per firing per subscriber.
const GATHER: Duration = Duration::from_millis(5);

/// Per-namespace wake-ups for subscriber tasks.
#[derive(Clone, Default)]
pub struct Wakeups {
    namespaces: Arc<Mutex<HashMap<String, Arc<Notify>>>>,
}

impl Wakeups {
    fn of(&self, namespace: &str) -> Arc<Notify> {
        let mut namespaces = self.lock();
        namespaces.entry(namespace.to_owned()).or_default().clone()
    }

    pub fn wake(&self, namespace: &str) {
        if let Some(notify) = self.lock().get(namespace) {
            notify.notify_waiters();
        }
    }

    pub fn wake_all(&self) {
        for notify in self.lock().values() {
            notify.notify_waiters();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Notify>>> {
        self.namespaces
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[derive(Clone)]
pub struct ClusterDeliveries {
    connections: Connections,
    metrics: Arc<Metrics>,
    shared: Shared,
    config: DeliveryConfig,
    wakeups: Wakeups,
    stopping: watch::Receiver<bool>,
    next_subscriber: Arc<AtomicU64>,
    /// Tells this process's subscribers from those of an earlier one with the same
    /// replica id, whose claims are not theirs.
    incarnation: u64,
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
            connections,
            metrics,
            shared,
            config,
            wakeups,
            stopping,
            next_subscriber: Arc::new(AtomicU64::new(1)),
            incarnation: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |since| since.as_nanos() as u64),
        }
    }

    /// `replica/incarnation/number`: what a subscriber's claims (or an observer's
    /// registration) are stamped with, unique across replicas and restarts.
    fn next_name(&self) -> String {
        let number = self.next_subscriber.fetch_add(1, Ordering::Relaxed);
        format!("{}/{}/{number}", self.shared.replica_id, self.incarnation)
    }

    pub fn subscribe(&self, options: SubscribeOptions) -> Result<DeliveryStream, TimerError> {
        if options.observer {
            return Ok(self.observe(options.namespace));
        }
        let max_unacked = options
            .max_unacked
            .unwrap_or(self.config.default_max_unacked)
            .clamp(1, self.config.max_unacked_limit);
        let (sender, receiver) = mpsc::channel(max_unacked);
        let subscriber = Subscriber {
            name: self.next_name(),
            namespace: options.namespace.clone(),
            ack_timeout: options
                .ack_timeout
                .unwrap_or(self.config.default_ack_timeout),
            max_unacked,
            auto_ack: options.auto_ack,
            max_attempts: self.config.max_attempts,
            sender,
            deliveries: self.clone(),
        };
        tokio::spawn(subscriber.run(self.stopping.clone()));
        Ok(Box::pin(ReceiverStream::new(receiver)))
    }

    pub async fn ack(
        &self,
        namespace: String,
        delivery_ids: Vec<u64>,
    ) -> Result<AckOutcome, TimerError> {
        let (seqs, attempts): (Vec<i64>, Vec<i32>) =
            delivery_ids.iter().map(|&id| split_delivery_id(id)).unzip();
        let rows = self
            .connections
            .client()
            .await?
            .query(ACK, &[&namespace, &seqs, &attempts])
            .await
            .map_err(ClusterError::query("acknowledging"))?;
        let acknowledged: FxHashSet<u64> = rows
            .iter()
            .map(|row| delivery_id(row.get(0), row.get(1)))
            .collect();
        // Room for this replica's subscribers of the namespace.
        self.wakeups.wake(&namespace);
        Ok(AckOutcome {
            acknowledged: acknowledged.len() as u32,
            unknown: delivery_ids
                .into_iter()
                .filter(|id| !acknowledged.contains(id))
                .collect(),
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
                         WHERE {in_namespace} attempts >= $1 AND acked_at IS NULL
                           AND (claim_until IS NULL OR claim_until < clock_timestamp())
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
                .map(|row| Dead {
                    expiration: Arc::new(expiration_of(row)),
                    attempts: row.get::<_, i32>(1) as u32,
                    reason: "max delivery attempts reached without an ack",
                })
                .collect(),
        })
    }
}

/// How often acknowledged expirations past their retention, and the oldest dead ones
/// beyond `--max-dead` per namespace, are deleted.
const TRIM_INTERVAL: Duration = Duration::from_secs(10);

/// How long an acknowledged expiration stays for observers to copy.
const ACKED_RETENTION: Duration = Duration::from_secs(30);

impl ClusterDeliveries {
    /// Keeps at most `dead_capacity` dead expirations per namespace, the newest, as the
    /// single node does; runs until the replica stops. Every replica runs it: the deletes
    /// are idempotent.
    pub async fn trim_dead(self, mut stopping: watch::Receiver<bool>) {
        loop {
            tokio::select! {
                () = tokio::time::sleep(TRIM_INTERVAL) => {}
                () = super::until_stopped(&mut stopping) => return,
            }
            match self.trim_dead_once().await {
                Ok(0) => {}
                Ok(dropped) => warn!(dropped, "dead expirations over --max-dead dropped"),
                Err(error) => warn!(%error, "trimming dead expirations failed"),
            }
            if let Err(error) = self.forget_acknowledged_once().await {
                warn!(%error, "deleting acknowledged expirations failed");
            }
        }
    }
}

impl ClusterDeliveries {
    /// Deletes the expirations acknowledged more than [`ACKED_RETENTION`] ago, and the
    /// registrations of observers that stopped renewing.
    pub async fn forget_acknowledged_once(&self) -> Result<u64, ClusterError> {
        let client = self.connections.client().await?;
        client
            .execute(
                "DELETE FROM tickd_observers WHERE alive_until < clock_timestamp()",
                &[],
            )
            .await
            .map_err(ClusterError::query("deleting lapsed observers"))?;
        client
            .execute(
                "DELETE FROM tickd_expirations
                 WHERE acked_at < clock_timestamp() - $1::INT8 * INTERVAL '1 millisecond'",
                &[&(ACKED_RETENTION.as_millis() as i64)],
            )
            .await
            .map_err(ClusterError::query("deleting acknowledged expirations"))
    }

    /// A stream of copies of the namespace's expirations from now on.
    fn observe(&self, namespace: String) -> DeliveryStream {
        let (sender, receiver) = mpsc::channel(OBSERVER_BUFFER);
        let observer = Observer {
            name: self.next_name(),
            announced: None,
            namespace,
            sender,
            deliveries: self.clone(),
        };
        tokio::spawn(observer.run(self.stopping.clone()));
        Box::pin(ReceiverStream::new(receiver))
    }

    /// Deletes each namespace's dead expirations beyond the newest `dead_capacity`;
    /// returns how many.
    pub async fn trim_dead_once(&self) -> Result<u64, ClusterError> {
        self.connections
            .client()
            .await?
            .execute(
                "DELETE FROM tickd_expirations WHERE seq IN (
                    SELECT seq FROM (
                        SELECT seq,
                               row_number() OVER (PARTITION BY namespace ORDER BY seq DESC) AS newer
                        FROM tickd_expirations
                        WHERE attempts >= $1 AND acked_at IS NULL
                          AND (claim_until IS NULL OR claim_until < clock_timestamp())
                    ) dead
                    WHERE newer > $2)",
                &[
                    &(self.config.max_attempts as i32),
                    &(self.config.dead_capacity as i64),
                ],
            )
            .await
            .map_err(ClusterError::query("trimming dead expirations"))
    }
}

/// Copies an observer may have waiting in its stream; beyond it copies are dropped (an
/// observer never slows delivery down).
const OBSERVER_BUFFER: usize = 10_000;

/// Rows an observer reads per query.
const OBSERVER_PAGE: i64 = 1_000;

/// One observer's task: follows the namespace's expirations in `seq` order. While its row
/// in `tickd_observers` is live, acks keep the namespace's expirations for it.
struct Observer {
    name: String,
    /// When its registration was last renewed.
    announced: Option<std::time::Instant>,
    namespace: String,
    sender: mpsc::Sender<Delivered>,
    deliveries: ClusterDeliveries,
}

impl Observer {
    async fn run(mut self, mut stopping: watch::Receiver<bool>) {
        let notify = self.deliveries.wakeups.of(&self.namespace);
        if let Err(error) = self.announce().await {
            warn!(namespace = %self.namespace, %error, "starting an observer failed");
            return;
        }
        let mut after = match self.last_seq().await {
            Ok(last) => last,
            Err(error) => {
                warn!(namespace = %self.namespace, %error, "starting an observer failed");
                return;
            }
        };
        loop {
            let woken = notify.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let copied = match self.announce().await {
                Ok(()) => self.copy_after(after).await,
                Err(error) => Err(error),
            };
            match copied {
                Ok(last) => after = last,
                Err(error) => warn!(namespace = %self.namespace, %error, "observing failed"),
            }
            if next_look(woken, &self.sender, &mut stopping).await != Woke::ToLook {
                break;
            }
        }
        self.leave().await;
    }

    /// Registers (or renews, a third of the way through its time) this observer, so that
    /// acks keep what it has yet to copy.
    async fn announce(&mut self) -> Result<(), ClusterError> {
        let fresh = self
            .announced
            .is_some_and(|announced| announced.elapsed() < OBSERVER_TTL / 3);
        if fresh {
            return Ok(());
        }
        let now = std::time::Instant::now();
        self.deliveries
            .connections
            .client()
            .await?
            .execute(
                "INSERT INTO tickd_observers (namespace, observer, alive_until)
                 VALUES ($1, $2, clock_timestamp() + $3::INT8 * INTERVAL '1 millisecond')
                 ON CONFLICT (namespace, observer) DO UPDATE SET alive_until = excluded.alive_until",
                &[&self.namespace, &self.name, &(OBSERVER_TTL.as_millis() as i64)],
            )
            .await
            .map_err(ClusterError::query("registering an observer"))?;
        self.announced = Some(now);
        Ok(())
    }

    async fn leave(&self) {
        let client = match self.deliveries.connections.client().await {
            Ok(client) => client,
            Err(_) => return, // its registration runs out by itself
        };
        let _ = client
            .execute(
                "DELETE FROM tickd_observers WHERE namespace = $1 AND observer = $2",
                &[&self.namespace, &self.name],
            )
            .await;
    }

    /// Where the observer starts: after everything fired before it subscribed.
    async fn last_seq(&self) -> Result<i64, ClusterError> {
        let row = self
            .deliveries
            .connections
            .client()
            .await?
            .query_one(
                "SELECT COALESCE(max(seq), 0) FROM tickd_expirations WHERE namespace = $1",
                &[&self.namespace],
            )
            .await
            .map_err(ClusterError::query("starting an observer"))?;
        Ok(row.get(0))
    }

    /// Streams a copy of every row after `after`; returns the last `seq` seen.
    async fn copy_after(&self, mut after: i64) -> Result<i64, ClusterError> {
        loop {
            let rows = self
                .deliveries
                .connections
                .client()
                .await?
                .query(
                    &format!(
                        "SELECT {EXPIRATION_COLUMNS} FROM tickd_expirations
                         WHERE namespace = $1 AND seq > $2 ORDER BY seq LIMIT $3"
                    ),
                    &[&self.namespace, &after, &OBSERVER_PAGE],
                )
                .await
                .map_err(ClusterError::query("observing expirations"))?;
            for row in &rows {
                after = row.get(0);
                // As on one node: a copy names no delivery and is the firing's first.
                let copy = Delivered {
                    delivery_id: 0,
                    expiration: Arc::new(expiration_of(row)),
                    attempt: 1,
                };
                // Best-effort: a full stream drops the copy.
                let _ = self.sender.try_send(copy);
            }
            if (rows.len() as i64) < OBSERVER_PAGE {
                return Ok(after);
            }
        }
    }
}

/// One subscriber's task: claims expirations for it while it has room, until its stream
/// is dropped or the replica stops.
struct Subscriber {
    /// From [`ClusterDeliveries::next_name`]: what its claims are stamped with.
    name: String,
    namespace: String,
    ack_timeout: Duration,
    max_unacked: usize,
    auto_ack: bool,
    max_attempts: u32,
    sender: mpsc::Sender<Delivered>,
    deliveries: ClusterDeliveries,
}

impl Subscriber {
    async fn run(self, mut stopping: watch::Receiver<bool>) {
        let notify = self.deliveries.wakeups.of(&self.namespace);
        loop {
            let woken = notify.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            if let Err(error) = self.claim_while_room().await {
                warn!(subscriber = %self.name, %error, "claiming expirations failed");
            }
            match next_look(woken, &self.sender, &mut stopping).await {
                Woke::ToLook => {}
                Woke::StreamClosed => break,
                // The replica is draining: the claims stay, so acks of deliveries the
                // client already has still succeed; the rest return at their deadline.
                Woke::Stopping => return,
            }
        }
        self.hand_back().await;
    }

    async fn claim_while_room(&self) -> Result<(), ClusterError> {
        loop {
            // The unacknowledged limit is applied by the claim itself.
            let room = self.sender.capacity();
            if room == 0 {
                return Ok(());
            }
            let started = std::time::Instant::now();
            let claimed = self.claim(room).await?;
            debug!(subscriber = %self.name, room, claimed = claimed.len(), elapsed_us = started.elapsed().as_micros() as u64, "claimed");
            let exhausted = claimed.len() < room;
            let mut sent = Vec::with_capacity(claimed.len());
            let mut stream_open = true;
            for delivered in claimed {
                let delivery_id = delivered.delivery_id;
                // Room was checked; a full or closed stream leaves the claim to expire.
                if self.sender.try_send(delivered).is_err() {
                    stream_open = false;
                    break;
                }
                sent.push(delivery_id);
            }
            if self.auto_ack && !sent.is_empty() {
                // Settled once handed to the stream, as on one node; what could not be
                // handed over stays claimed and comes back at its deadline.
                self.deliveries
                    .ack(self.namespace.clone(), sent)
                    .await
                    .map_err(|error| ClusterError::Settle(error.to_string()))?;
            }
            if exhausted || !stream_open {
                return Ok(());
            }
        }
    }

    /// Claims up to `room` rows until the ack deadline.
    async fn claim(&self, room: usize) -> Result<Vec<Delivered>, ClusterError> {
        let statement = format!(
            "UPDATE tickd_expirations
             SET claimed_by = $4, attempts = attempts + 1,
                 claim_until = clock_timestamp() + $5::INT8 * INTERVAL '1 millisecond'
             WHERE seq IN ({CLAIMABLE})
             RETURNING {EXPIRATION_COLUMNS}"
        );
        let max_attempts = self.max_attempts as i32;
        let ack_timeout = self.ack_timeout.as_millis() as i64;
        let parameters: [&(dyn tokio_postgres::types::ToSql + Sync); 6] = [
            &self.namespace,
            &max_attempts,
            &(room as i64),
            &self.name,
            &ack_timeout,
            &(self.max_unacked as i64),
        ];
        let mut rows = self
            .deliveries
            .connections
            .client()
            .await?
            .query(&statement, &parameters[..])
            .await
            .map_err(ClusterError::query("claiming expirations"))?;
        rows.sort_by_key(|row| row.get::<_, i64>(0));
        self.count(&rows);
        let delivered = rows.iter().map(|row| {
            let attempt = row.get::<_, i32>(1);
            Delivered {
                delivery_id: delivery_id(row.get(0), attempt),
                expiration: Arc::new(expiration_of(row)),
                attempt: attempt as u32,
            }
        });
        Ok(delivered.collect())
    }

    fn count(&self, rows: &[Row]) {
        let metrics = &self.deliveries.metrics;
        for row in rows {
            match row.get::<_, i32>(1) {
                1 => metrics.expirations_delivered.inc(),
                _ => metrics.expirations_redelivered.inc(),
            };
        }
    }

    /// Unacknowledged claims go back at once (next attempt), for any subscriber to take.
    async fn hand_back(&self) {
        if let Err(error) = self.try_hand_back().await {
            warn!(subscriber = %self.name, %error, "handing back deliveries failed; they return at their ack deadline");
        }
    }

    async fn try_hand_back(&self) -> Result<(), ClusterError> {
        self.deliveries
            .connections
            .client()
            .await?
            .query(
                "WITH released AS (
                    UPDATE tickd_expirations SET claimed_by = NULL, claim_until = NULL
                    WHERE claimed_by = $1 RETURNING namespace)
                 SELECT pg_notify($2, namespace)::TEXT FROM (SELECT DISTINCT namespace FROM released) n",
                &[&self.name, &FIRED_CHANNEL],
            )
            .await
            .map_err(ClusterError::query("handing back deliveries"))?;
        Ok(())
    }
}

/// Why a subscriber's or observer's task goes on.
#[derive(Debug, PartialEq, Eq)]
enum Woke {
    /// Time to look at the database again.
    ToLook,
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
        () = tokio::time::sleep(POLL_INTERVAL) => Woke::ToLook,
        () = sender.closed() => Woke::StreamClosed,
        () = super::until_stopped(stopping) => Woke::Stopping,
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

/// Reads [`EXPIRATION_COLUMNS`].
fn expiration_of(row: &Row) -> Expiration {
    Expiration {
        namespace: Arc::from(row.get::<_, &str>(2)),
        id: TimerId(row.get::<_, i64>(3) as u64),
        key: row.get(4),
        payload: Bytes::copy_from_slice(row.get::<_, &[u8]>(5)),
        deadline_unix: row.get::<_, i64>(6) as u64,
        fired_unix: row.get::<_, i64>(7) as u64,
        repeat: row
            .get::<_, Option<i64>>(8)
            .map(|nanos| Duration::from_nanos(nanos as u64)),
        ttl: row
            .get::<_, Option<i64>>(9)
            .map(|nanos| Duration::from_nanos(nanos as u64)),
        fired_count: row.get::<_, i64>(10) as u64,
        late: row.get(11),
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

/// The replicated backend's expirations, seen as the API's [`Expirations`].
impl Expirations for ClusterDeliveries {
    fn subscribe(&self, options: SubscribeOptions) -> Result<DeliveryStream, TimerError> {
        ClusterDeliveries::subscribe(self, options)
    }

    fn ack(&self, namespace: String, delivery_ids: Vec<u64>) -> Answer<AckOutcome> {
        let deliveries = self.clone();
        Box::pin(async move { ClusterDeliveries::ack(&deliveries, namespace, delivery_ids).await })
    }

    fn dead(&self, namespace: Option<String>) -> Answer<DeadList> {
        let deliveries = self.clone();
        Box::pin(async move { ClusterDeliveries::dead(&deliveries, namespace).await })
    }
}
