//! Fires what the wheel says is due, in one fenced statement per batch.
//!
//! The statement first locks the rows of the batch's partitions `FOR KEY SHARE`, keeping
//! only those this replica still holds at the epoch it was granted, with more than
//! [`statement_bound`] of its lease left. Then, in the same statement, each one-shot timer
//! is deleted (or a repeating or cron one re-armed at its next deadline) *if its deadline
//! is still the one the wheel was given*, and an expiration is recorded for every timer
//! fired. A timer cancelled or moved elsewhere matches nothing and fires nothing; a moved
//! one is loaded again. A cron timer takes a second statement (see [`FIRE`]).
//!
//! Why that lock, and why the bound (docs/replication.md argues it in full): the lease
//! round renews with a plain `UPDATE` of `lease_until`, which takes `FOR NO KEY UPDATE`;
//! that does not conflict with `FOR KEY SHARE`, so a renewal never waits for a firing,
//! however slow the firing. A takeover or a release (`ownership`) locks the row
//! `FOR UPDATE` first, which does conflict: it waits for (or skips) a firing in flight,
//! and a firing that starts after it sees the new owner. So while a firing transaction
//! runs, nobody else can become the partition's owner, and a replica that lost a
//! partition (paused, cut off, slow) can never fire from it again. The lease's expiry is
//! held by time: the firing connection's `statement_timeout` is [`statement_bound`], and
//! the fence requires more than that left, so the statement (its triggers included) ends
//! before the lease it checked could run out, or is cancelled and rolled back.
//!
//! Batches are bounded by count and by time ([`pace`]): the limit follows the measured
//! time per timer towards a target well inside the bound, so that a backlog drains at the
//! database's pace in statements that all end inside the lease.
//!
//! If the database cannot be reached the batch is retried until it can: the timers are
//! still in their rows, so nothing is lost, only late.

mod pace;
mod statement;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustc_hash::{FxHashMap, FxHashSet};
use tokio::sync::{mpsc, watch};
use tokio_postgres::Row;
use tracing::{debug, warn};

use super::connections::Connections;
use super::error::ClusterError;
use super::schedule::{DueTimer, ScheduleCommand};
use super::shared::Shared;
use super::timers::stored_calendar;
use crate::cluster::delivery::{Assignment, DirectDelivery, OVERFLOWED_ATTEMPTS};
use crate::domain::DeliveryConfig;
use crate::metrics::Metrics;
use pace::BatchSize;
use statement::{CLAIMED_BY, EXPIRATION, FIRE, HELD, LEASE_LEFT, OVERFLOWED, UNSCHEDULED};

const RETRY_DELAY: Duration = Duration::from_millis(200);

/// The longest a firing statement may run, for a lease of `lease_ttl`: a quarter of it.
///
/// The firing connections' `statement_timeout` is this, and the fence fires only from
/// partitions with more than this left of their lease, so all a firing statement writes
/// (its triggers' writes included) is written while the lease it checked still runs.
/// Leases are renewed every third of the ttl, so one normally has two thirds of it or
/// more left: a quarter leaves room for a renewal late by more than a whole period
/// before a firing is held back for want of lease.
pub fn statement_bound(lease_ttl: Duration) -> Duration {
    lease_ttl / 4
}

/// The time one firing statement aims for: a tenth of the lease, two and a half times
/// inside [`statement_bound`], so a statement twice as slow per timer as the last one
/// measured still ends inside the bound.
fn batch_target(lease_ttl: Duration) -> Duration {
    lease_ttl / 10
}

/// The firing statement's text, for the test that checks the plan a replica keeps of it
/// (`tests/replica_plans.rs`): not part of the crate's interface.
#[doc(hidden)]
pub fn fire_statement() -> &'static str {
    &FIRE
}

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
    /// [`statement_bound`] of this replica's lease, in milliseconds.
    bound_millis: i64,
    /// How many timers the next statement may take.
    size: BatchSize,
}

impl Firing {
    /// Fires on `connections`, which should be opened with [`statement_bound`] as their
    /// statement timeout (`Database::with_statement_timeout`); the fence's margin does
    /// not depend on it, only the proof that nothing is written after the lease it
    /// checked does.
    pub fn new(connections: Connections, shared: Shared, metrics: Arc<Metrics>) -> Self {
        let delivery = DeliveryConfig::default();
        let bound_millis = statement_bound(shared.lease_ttl).as_millis() as i64;
        let size = BatchSize::new(batch_target(shared.lease_ttl));
        Self {
            connections,
            generic_plans: None,
            shared,
            metrics,
            buffered_total: delivery.buffered_total as i64,
            max_attempts: delivery.max_attempts as i32,
            direct: None,
            bound_millis,
            size,
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
    /// the next one, up to the batch limit ([`pace`]): under load, one commit (one fsync)
    /// serves many wheel ticks, and a backlog goes in statements the database ends in
    /// time. A statement the server cancelled at [`statement_bound`] rolled back whole:
    /// its timers go back in front, to be taken in smaller batches.
    pub(crate) async fn run(
        mut self,
        mut due: mpsc::UnboundedReceiver<Vec<DueTimer>>,
        mut stopping: watch::Receiver<bool>,
    ) {
        let mut waiting: VecDeque<DueTimer> = VecDeque::new();
        loop {
            if waiting.is_empty() {
                match due.recv().await {
                    Some(batch) => waiting.extend(batch),
                    None => return,
                }
            }
            while waiting.len() < self.size.limit() {
                match due.try_recv() {
                    Ok(more) => waiting.extend(more),
                    Err(_) => break,
                }
            }
            let taken = waiting.len().min(self.size.limit());
            let batch: Vec<DueTimer> = waiting.drain(..taken).collect();
            loop {
                match self.fire(&batch).await {
                    Ok(_) => break,
                    Err(error) if error.is_cancelled() => {
                        self.size.cancelled(batch.len());
                        warn!(
                            timers = batch.len(),
                            limit = self.size.limit(),
                            "firing statement cancelled at its time bound; firing in smaller batches"
                        );
                        for timer in batch.into_iter().rev() {
                            waiting.push_front(timer);
                        }
                        break;
                    }
                    Err(error) => {
                        warn!(timers = batch.len(), %error, "firing failed; retrying");
                        tokio::select! {
                            () = tokio::time::sleep(RETRY_DELAY) => {}
                            // Stopping with the database unreachable: the timers are still
                            // in their rows, for whoever takes the partitions over.
                            () = super::shared::until_stopped(&mut stopping) => return,
                        }
                    }
                }
            }
        }
    }

    /// Fires one batch; returns how many timers fired (the rest were fenced, cancelled
    /// or moved).
    pub async fn fire(&mut self, batch: &[DueTimer]) -> Result<usize, ClusterError> {
        let started = Instant::now();
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
        self.size.ran(batch.len(), started.elapsed());
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
                    &self.bound_millis,
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
    /// inside the horizon go back into the wheel. A partition still held with too little
    /// lease left to fire from (a renewal late by more than a period: the database is
    /// struggling) is given a moment for the renewal before its timers are loaded again.
    async fn settle_unfired(&self, batch: &[DueTimer], rows: &[Row]) -> Result<(), ClusterError> {
        let fired: FxHashSet<i64> = rows.iter().map(|row| row.get(1)).collect();
        let unfired: Vec<&DueTimer> = batch
            .iter()
            .filter(|timer| !fired.contains(&(timer.id as i64)))
            .collect();
        let (partitions, epochs) = self.granted(batch);
        let held: FxHashMap<u32, bool> = self
            .connections
            .client()
            .await?
            .query(
                HELD,
                &[
                    &partitions,
                    &epochs,
                    &&*self.shared.replica_id,
                    &self.bound_millis,
                ],
            )
            .await
            .map_err(ClusterError::query("checking partition leases"))?
            .iter()
            .map(|row| (row.get::<_, i32>(0) as u32, row.get::<_, bool>(1)))
            .collect();
        let (still_held, fenced): (Vec<&DueTimer>, Vec<&DueTimer>) = unfired
            .into_iter()
            .partition(|timer| held.contains_key(&timer.partition));
        if !fenced.is_empty() {
            warn!(timers = fenced.len(), "firing fenced: partition lease lost");
        }
        if still_held.is_empty() {
            return Ok(());
        }
        if still_held.iter().any(|timer| !held[&timer.partition]) {
            warn!(
                timers = still_held.len(),
                "not fired: too little lease left to fire within it; waiting for its renewal"
            );
            tokio::time::sleep(RETRY_DELAY).await;
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
fn lease_proved(rows: &[Row], sent: Instant) -> bool {
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
