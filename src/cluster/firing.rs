//! Fires what the wheel says is due, in one fenced statement per batch.
//!
//! The statement first locks the rows of the batch's partitions `FOR SHARE`, keeping only
//! those this replica still holds at the epoch it was granted, with an unexpired lease. A
//! takeover updates those rows, so it cannot happen while a firing holds the lock (the
//! claim skips the row and tries again at its next round), and a firing that starts after
//! it sees the new owner: a replica that lost a partition (paused, cut off, slow) can
//! never fire from it again. Then, in the same statement, each one-shot timer is deleted
//! (or a repeating or cron one re-armed at its next deadline) *if its deadline is still
//! the one the wheel was given*, and an expiration is recorded for every timer fired. A
//! timer cancelled or moved elsewhere matches nothing and fires nothing; a moved one is
//! loaded again. A cron timer takes a second statement (see [`FIRE`]).
//!
//! If the database cannot be reached the batch is retried until it can: the timers are
//! still in their rows, so nothing is lost, only late.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use rustc_hash::{FxHashMap, FxHashSet};
use tokio::sync::{mpsc, watch};
use tokio_postgres::Row;
use tracing::{debug, warn};

use super::schedule::{DueTimer, ScheduleCommand};
use super::timers::stored_calendar;
use super::{ClusterError, Connections, Shared};
use crate::cluster::delivery::{self, Assignment, DirectDelivery, OVERFLOWED_ATTEMPTS};
use crate::delivery::DeliveryConfig;
use crate::metrics::Metrics;

const RETRY_DELAY: Duration = Duration::from_millis(200);

/// Timers fired in one transaction at most (beyond it, the rest wait for the next one).
const MAX_BATCH: usize = 10_000;

/// In one statement (so one round trip and one commit): locks the partitions of the
/// batch that this replica still holds (`$6`, `$7`: partitions and the epochs it was
/// granted; `$8`: this replica) `FOR SHARE`; of the due timers (`$1`..`$4`, `$9`) in those
/// partitions, deletes the one-shot ones and re-arms the repeating ones whose deadline is
/// still the one the wheel had; records one expiration per timer fired; announces the
/// namespaces on `tickd_fired` (identical notifications in a transaction are sent once).
/// Returns what was fired, with the next deadline (and version) of those that repeat.
///
/// Cron timers need their next firing computed here, from a schedule the wheel does not
/// know: a first pass (`$10`, `$11` NULL) leaves them alone and returns them with their
/// schedule and version ([`UNSCHEDULED`] set); the second fires them with the next firing
/// (`$11`; NULL: the schedule has no more, so it ends as a one-shot) if their version is
/// still `$10`, so the firing and its re-arm commit together.
///
/// `--max-buffered-total` (`$12`) is applied as on one node: the expirations fired and
/// neither acknowledged nor dead (`$13`: `--max-attempts`; the condition is
/// `delivery::buffered`) are counted, up to `$12`, through the index of rows neither
/// acknowledged nor marked dead (so the count walks what is in flight, and the dead that
/// died since the trim last marked them, not the dead list), and those of this batch
/// beyond the room left are recorded dead at once, marked so, with attempts `$14`
/// ([`OVERFLOWED_ATTEMPTS`]). The count is of the rows committed when the statement
/// starts: replicas firing at the same moment see the same room, so the total can be
/// passed by what they fire in that moment.
static FIRE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "
WITH held AS (
    SELECT p.partition, p.lease_until FROM tickd_partitions p
    JOIN unnest($6::INT4[], $7::INT8[]) AS mine(partition, epoch)
      ON p.partition = mine.partition AND p.epoch = mine.epoch
    WHERE p.owner = $8 AND p.lease_until > clock_timestamp()
    FOR SHARE OF p
),
due AS (
    SELECT * FROM unnest($1::TEXT[], $2::INT8[], $3::INT8[], $4::BOOL[], $9::INT4[],
                         $10::INT8[], $11::INT8[], $15::TEXT[], $16::INT8[])
        AS d(namespace, id, deadline, late, partition, version, next_deadline, claimer,
             claim_millis)
    WHERE partition IN (SELECT partition FROM held)
),
once AS (
    DELETE FROM tickd_timers t USING due
    WHERE t.id = due.id AND t.namespace = due.namespace AND t.deadline = due.deadline
      AND t.partition = due.partition AND t.repeat_nanos IS NULL
      AND (t.cron IS NULL OR (t.version = due.version AND due.next_deadline IS NULL))
    RETURNING t.namespace, t.id, t.key, t.payload, t.deadline, t.repeat_nanos, t.ttl_nanos,
              t.fired_count + 1 AS fired_count, t.partition, NULL::INT8 AS next_deadline,
              t.version, due.late, t.cron, t.time_zone, due.claimer, due.claim_millis
),
again AS (
    UPDATE tickd_timers t
    SET fired_count = t.fired_count + 1, version = t.version + 1,
        deadline = t.deadline + t.repeat_nanos * (GREATEST($5 - t.deadline, 0) / t.repeat_nanos + 1)
    FROM due
    WHERE t.id = due.id AND t.namespace = due.namespace AND t.deadline = due.deadline
      AND t.partition = due.partition AND t.repeat_nanos IS NOT NULL
    RETURNING t.namespace, t.id, t.key, t.payload, due.deadline, t.repeat_nanos, t.ttl_nanos,
              t.fired_count, t.partition, t.deadline AS next_deadline, t.version, due.late,
              t.cron, t.time_zone, due.claimer, due.claim_millis
),
calendar AS (
    UPDATE tickd_timers t
    SET fired_count = t.fired_count + 1, version = t.version + 1, deadline = due.next_deadline
    FROM due
    WHERE t.id = due.id AND t.namespace = due.namespace AND t.deadline = due.deadline
      AND t.partition = due.partition AND t.cron IS NOT NULL
      AND t.version = due.version AND due.next_deadline IS NOT NULL
    RETURNING t.namespace, t.id, t.key, t.payload, due.deadline, t.repeat_nanos, t.ttl_nanos,
              t.fired_count, t.partition, t.deadline AS next_deadline, t.version, due.late,
              t.cron, t.time_zone, due.claimer, due.claim_millis
),
unscheduled AS (
    SELECT t.namespace, t.id, t.partition, t.deadline, t.version, t.cron, t.time_zone
    FROM tickd_timers t JOIN due
      ON t.id = due.id AND t.namespace = due.namespace AND t.deadline = due.deadline
     AND t.partition = due.partition
    WHERE t.cron IS NOT NULL AND due.version IS NULL
),
fired AS (SELECT * FROM once UNION ALL SELECT * FROM again UNION ALL SELECT * FROM calendar),
buffered AS (
    SELECT count(*) AS held FROM (
        SELECT 1 FROM tickd_expirations
        WHERE {buffered}
        LIMIT $12) unsettled
),
placed AS (
    SELECT fired.*, place + (SELECT held FROM buffered) <= $12 AS room
    FROM (SELECT fired.*, row_number() OVER (ORDER BY deadline, id) AS place FROM fired) fired
),
recorded AS (
    INSERT INTO tickd_expirations
        (namespace, timer_id, key, payload, deadline, fired_at, repeat_nanos, ttl_nanos,
         fired_count, late, cron, time_zone, attempts, claimed_by, claim_until, dead)
    SELECT namespace, id, key, payload, deadline, $5, repeat_nanos, ttl_nanos, fired_count,
           late, cron, time_zone,
           CASE WHEN NOT room THEN $14 WHEN claimer IS NOT NULL THEN 1 ELSE 0 END,
           CASE WHEN room THEN claimer END,
           CASE WHEN room AND claimer IS NOT NULL
                THEN clock_timestamp() + claim_millis * INTERVAL '1 millisecond' END,
           NOT room
    FROM placed
    RETURNING seq, timer_id, namespace, attempts, claimed_by
),
lease AS (
    SELECT (EXTRACT(EPOCH FROM min(lease_until) - clock_timestamp()) * 1000)::INT8 AS left_millis
    FROM held
)
SELECT f.namespace, f.id, f.partition, f.next_deadline, f.version,
       CASE WHEN r.claimed_by IS NULL THEN pg_notify('tickd_fired', f.namespace)::TEXT END,
       NULL AS cron, NULL AS time_zone,
       (SELECT count(*) FROM recorded WHERE attempts = $14) AS overflowed,
       r.seq, r.attempts, f.namespace, f.id, f.key,
       CASE WHEN r.claimed_by IS NOT NULL THEN f.payload END, f.deadline, $5::INT8,
       f.repeat_nanos, f.ttl_nanos, f.fired_count, f.late, f.cron, f.time_zone,
       r.claimed_by, (SELECT left_millis FROM lease)
FROM fired f JOIN recorded r ON r.timer_id = f.id AND r.namespace = f.namespace
UNION ALL
SELECT namespace, id, partition, deadline, version, NULL, cron, time_zone, NULL,
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL
FROM unscheduled",
        buffered = delivery::buffered("$13")
    )
});

/// The firing statement's text, for the test that checks the plan a replica keeps of it
/// (`tests/replica_plans.rs`): not part of the crate's interface.
#[doc(hidden)]
pub fn fire_statement() -> &'static str {
    &FIRE
}

/// The column of [`FIRE`]'s rows where a fired timer's expiration begins, as
/// `EXPIRATION_COLUMNS` (its payload only when claimed for a subscriber here), followed
/// by the subscriber it was claimed for (NULL: none) and how long the shortest lease of
/// the batch's partitions had left, in milliseconds, when the statement checked it.
const EXPIRATION: usize = 9;

/// After [`EXPIRATION`]'s columns: the claimer, then the lease left.
const CLAIMED_BY: usize = EXPIRATION + 14;
const LEASE_LEFT: usize = CLAIMED_BY + 1;

/// The column of [`FIRE`]'s rows that counts the expirations of the statement that went
/// to the dead list for want of room under `--max-buffered-total`.
const OVERFLOWED: usize = 8;

/// The column of [`FIRE`]'s rows that holds a cron timer's schedule when it is returned
/// unfired, for its next firing to be computed (then `time_zone` follows).
const UNSCHEDULED: usize = 6;

/// Which of the partitions `$1` (granted at epochs `$2`) replica `$3` still holds.
const HELD: &str = "
SELECT p.partition FROM tickd_partitions p
JOIN unnest($1::INT4[], $2::INT8[]) AS mine(partition, epoch)
  ON p.partition = mine.partition AND p.epoch = mine.epoch
WHERE p.owner = $3 AND p.lease_until > clock_timestamp()";

pub struct Firing {
    connections: Connections,
    /// The connection the firing statement runs on, keeping one plan of it (none: it runs
    /// on `connections`, planned at each run).
    generic_plans: Option<Connections>,
    shared: Shared,
    metrics: Arc<Metrics>,
    /// `--max-buffered-total`.
    buffered_total: i64,
    /// `--max-attempts`: expirations with that many are dead, not buffered.
    max_attempts: i32,
    /// This replica's subscribers, handed what fires directly (none: every expiration is
    /// recorded for subscribers to claim).
    direct: Option<DirectDelivery>,
}

impl Firing {
    pub fn new(connections: Connections, shared: Shared, metrics: Arc<Metrics>) -> Self {
        let delivery = DeliveryConfig::default();
        Self {
            connections,
            generic_plans: None,
            shared,
            metrics,
            buffered_total: delivery.buffered_total as i64,
            max_attempts: delivery.max_attempts as i32,
            direct: None,
        }
    }

    /// Runs the firing statement on `connections`, opened from
    /// `Database::with_generic_plans` (which says why): it is then planned a few times a
    /// second instead of at every batch. The other statements (the lease check and the
    /// reload of timers that moved) stay on the connections given to [`Firing::new`].
    pub fn with_generic_plans(mut self, connections: Connections) -> Self {
        self.generic_plans = Some(connections);
        self
    }

    /// Hands expirations to this replica's subscribers as they fire (see
    /// `delivery::direct`).
    pub(crate) fn with_direct_delivery(mut self, direct: DirectDelivery) -> Self {
        self.direct = Some(direct);
        self
    }

    /// Applies the delivery settings' bounds (the defaults otherwise).
    pub(crate) fn with_delivery(mut self, delivery: &DeliveryConfig) -> Self {
        self.buffered_total = i64::try_from(delivery.buffered_total).unwrap_or(i64::MAX);
        self.max_attempts = i32::try_from(delivery.max_attempts).unwrap_or(i32::MAX);
        self
    }

    /// Runs until the worker stops and its last batch is fired.
    ///
    /// Whatever the wheel fired while the previous transaction ran is fired together in
    /// the next one: under load, one commit (one fsync) serves many wheel ticks.
    pub(crate) async fn run(
        mut self,
        mut due: mpsc::UnboundedReceiver<Vec<DueTimer>>,
        mut stopping: watch::Receiver<bool>,
    ) {
        while let Some(mut batch) = due.recv().await {
            while batch.len() < MAX_BATCH {
                match due.try_recv() {
                    Ok(more) => batch.extend(more),
                    Err(_) => break,
                }
            }
            while let Err(error) = self.fire(&batch).await {
                warn!(timers = batch.len(), %error, "firing failed; retrying");
                tokio::select! {
                    () = tokio::time::sleep(RETRY_DELAY) => {}
                    // Stopping with the database unreachable: the timers are still in their
                    // rows, for whoever takes the partitions over.
                    () = super::shared::until_stopped(&mut stopping) => return,
                }
            }
        }
    }

    /// Fires one batch; returns how many timers fired (the rest were fenced, cancelled
    /// or moved).
    pub async fn fire(&mut self, batch: &[DueTimer]) -> Result<usize, ClusterError> {
        let started = std::time::Instant::now();
        let now = self.shared.unix_now();
        let namespaces: Vec<&str> = batch.iter().map(|timer| &*timer.namespace).collect();
        let assignment = self
            .direct
            .as_ref()
            .map(|direct| direct.assign(&namespaces));
        let (mut rows, unscheduled): (Vec<Row>, Vec<Row>) = self
            .run_fire(batch, None, now, assignment.as_ref())
            .await?
            .into_iter()
            .partition(|row| row.get::<_, Option<&str>>(UNSCHEDULED).is_none());
        if let (Some(direct), Some(assignment)) = (&self.direct, assignment) {
            direct.deliver(
                assignment,
                &rows,
                EXPIRATION,
                CLAIMED_BY,
                lease_proved(&rows, started),
            );
        }
        let mut overflowed = overflowed_in(&rows);
        if !unscheduled.is_empty() {
            let (calendar_batch, next) = next_firings(batch, &unscheduled, now);
            let calendar_rows = self
                .run_fire(&calendar_batch, Some(&next), now, None)
                .await?;
            overflowed += overflowed_in(&calendar_rows);
            rows.extend(calendar_rows);
        }
        if let Some(direct) = &self.direct {
            direct.wake_claimers(&rows, CLAIMED_BY);
        }
        self.count_fired(batch, &rows, overflowed, now);
        debug!(
            timers = rows.len(),
            elapsed_us = started.elapsed().as_micros() as u64,
            "fired"
        );
        self.rearm(&rows);
        if rows.len() < batch.len() {
            self.settle_unfired(batch, &rows).await?;
        }
        Ok(rows.len())
    }

    /// Runs [`FIRE`] for `batch`; `calendar` gives the cron timers' (version, next
    /// deadline) for the second pass, `assignment` the subscribers here to claim for.
    async fn run_fire(
        &self,
        batch: &[DueTimer],
        calendar: Option<&[(i64, Option<i64>)]>,
        now: u64,
        assignment: Option<&Assignment>,
    ) -> Result<Vec<Row>, ClusterError> {
        let (claimers, claim_millis) = match assignment {
            Some(assignment) => assignment.claims(),
            None => batch.iter().map(|_| (None, None)).unzip(),
        };
        let (partitions, epochs) = self.granted(batch);
        let namespaces: Vec<&str> = batch.iter().map(|timer| &*timer.namespace).collect();
        let ids: Vec<i64> = batch.iter().map(|timer| timer.id as i64).collect();
        let deadlines: Vec<i64> = batch.iter().map(|t| t.deadline_unix as i64).collect();
        let late: Vec<bool> = batch.iter().map(|timer| timer.late).collect();
        let timer_partitions: Vec<i32> = batch.iter().map(|t| t.partition as i32).collect();
        let (versions, next_deadlines): (Vec<Option<i64>>, Vec<Option<i64>>) = match calendar {
            Some(calendar) => calendar.iter().map(|&(v, next)| (Some(v), next)).unzip(),
            None => batch.iter().map(|_| (None, None)).unzip(),
        };
        let connections = self.generic_plans.as_ref().unwrap_or(&self.connections);
        connections
            .client()
            .await?
            .query(
                FIRE.as_str(),
                &[
                    &namespaces,
                    &ids,
                    &deadlines,
                    &late,
                    &(now as i64),
                    &partitions,
                    &epochs,
                    &&*self.shared.replica_id,
                    &timer_partitions,
                    &versions,
                    &next_deadlines,
                    &self.buffered_total,
                    &self.max_attempts,
                    &OVERFLOWED_ATTEMPTS,
                    &claimers,
                    &claim_millis,
                ],
            )
            .await
            .map_err(ClusterError::query("firing timers"))
    }

    fn count_fired(&self, batch: &[DueTimer], rows: &[Row], overflowed: i64, now: u64) {
        self.metrics.timers_fired.inc_by(rows.len() as u64);
        if overflowed > 0 {
            self.metrics.expirations_dead.inc_by(overflowed as u64);
            warn!(
                overflowed,
                max_buffered_total = self.buffered_total,
                "delivery buffer full: expirations moved to the dead list"
            );
        }
        for timer in batch {
            let lateness = now.saturating_sub(timer.deadline_unix);
            self.metrics.firing_lateness.observe(lateness as f64 / 1e9);
        }
    }

    /// The batch's partitions with the epochs this replica was granted them at.
    fn granted(&self, batch: &[DueTimer]) -> (Vec<i32>, Vec<i64>) {
        let mut partitions: Vec<u32> = batch.iter().map(|timer| timer.partition).collect();
        partitions.sort_unstable();
        partitions.dedup();
        self.shared.owned.tenure_arrays(partitions)
    }

    /// Timers that fired nothing were fenced (their partition is no longer this replica's),
    /// or cancelled or moved by another replica: the moved ones whose new deadline is
    /// inside the horizon go back into the wheel.
    async fn settle_unfired(&self, batch: &[DueTimer], rows: &[Row]) -> Result<(), ClusterError> {
        let fired: FxHashSet<i64> = rows.iter().map(|row| row.get(1)).collect();
        let unfired: Vec<&DueTimer> = batch
            .iter()
            .filter(|timer| !fired.contains(&(timer.id as i64)))
            .collect();
        let (partitions, epochs) = self.granted(batch);
        let held: Vec<u32> = self
            .connections
            .client()
            .await?
            .query(HELD, &[&partitions, &epochs, &&*self.shared.replica_id])
            .await
            .map_err(ClusterError::query("checking partition leases"))?
            .iter()
            .map(|row| row.get::<_, i32>(0) as u32)
            .collect();
        let (still_held, fenced): (Vec<&DueTimer>, Vec<&DueTimer>) = unfired
            .into_iter()
            .partition(|timer| held.contains(&timer.partition));
        if !fenced.is_empty() {
            warn!(timers = fenced.len(), "firing fenced: partition lease lost");
        }
        if still_held.is_empty() {
            return Ok(());
        }
        self.reload_moved(&still_held).await
    }

    /// Puts repeating timers back in the wheel at their next deadline.
    fn rearm(&self, rows: &[Row]) {
        let horizon_end = self.shared.horizon_end();
        let rearmed: Vec<DueTimer> = rows
            .iter()
            .filter_map(|row| self.shared.due_timer_of_row(row, false))
            .filter(|timer| timer.deadline_unix <= horizon_end)
            .collect();
        if !rearmed.is_empty() {
            let _ = self.shared.schedule.send(ScheduleCommand::Load(rearmed));
        }
    }

    /// Loads the timers' current deadlines, where still inside the horizon.
    async fn reload_moved(&self, unmatched: &[&DueTimer]) -> Result<(), ClusterError> {
        let unmatched: Vec<i64> = unmatched.iter().map(|timer| timer.id as i64).collect();
        let moved = self
            .connections
            .client()
            .await?
            .query(
                "SELECT namespace, id, partition, deadline, version FROM tickd_timers
                 WHERE id = ANY($1) AND deadline <= $2",
                &[&unmatched, &(self.shared.horizon_end() as i64)],
            )
            .await
            .map_err(ClusterError::query("reloading moved timers"))?;
        let moved: Vec<DueTimer> = moved
            .iter()
            .filter_map(|row| self.shared.due_timer_of_row(row, false))
            .collect();
        if !moved.is_empty() {
            let _ = self.shared.schedule.send(ScheduleCommand::Load(moved));
        }
        Ok(())
    }
}

/// Whether the lease of every partition the statement fired from was still running when
/// its answer came back: the statement reports how long the shortest had left when it
/// checked (after `sent`), so an answer within that time proves it.
fn lease_proved(rows: &[Row], sent: std::time::Instant) -> bool {
    let left = rows
        .first()
        .and_then(|row| row.get::<_, Option<i64>>(LEASE_LEFT));
    left.is_some_and(|left| sent.elapsed() < Duration::from_millis(left.max(0) as u64))
}

/// How many expirations one [`FIRE`] statement's fired `rows` recorded dead for want of
/// room (every fired row carries the statement's count).
fn overflowed_in(rows: &[Row]) -> i64 {
    rows.first()
        .and_then(|row| row.get::<_, Option<i64>>(OVERFLOWED))
        .unwrap_or(0)
}

/// The cron timers returned unfired by the first pass, as the second pass's batch with
/// each one's (version, next deadline): the first cron time after both its deadline and
/// now, so that firings missed while no replica could fire them collapse into this one.
fn next_firings(
    batch: &[DueTimer],
    unscheduled: &[Row],
    now: u64,
) -> (Vec<DueTimer>, Vec<(i64, Option<i64>)>) {
    let by_id: FxHashMap<u64, &DueTimer> = batch.iter().map(|timer| (timer.id, timer)).collect();
    unscheduled
        .iter()
        .filter_map(|row| {
            let timer = *by_id.get(&(row.get::<_, i64>(1) as u64))?;
            let version: i64 = row.get(4);
            let next = stored_calendar(row, UNSCHEDULED)
                .and_then(|calendar| calendar.next_firing(timer.deadline_unix, now));
            Some((timer.clone(), (version, next.map(|next| next as i64))))
        })
        .unzip()
}
