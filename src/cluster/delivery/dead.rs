//! Dead expirations: which rows count as dead (out of attempts, or recorded dead when the
//! buffer was full) and which as buffered, the Pending listing of the dead, and Redrive,
//! which sends them back to delivery within the room `--max-buffered-total` leaves.

use std::sync::Arc;

use rustc_hash::FxHashSet;
use tokio_postgres::Row;

use super::cluster_deliveries::ClusterDeliveries;
use super::rows::{delivery_id, expiration_of, split_delivery_id, EXPIRATION_COLUMNS};
use crate::cluster::error::ClusterError;
use crate::cluster::notifications::FIRED_CHANNEL;
use crate::domain::{Dead, DeadList, DeadReason, RedriveOutcome, TimerError, MAX_REDRIVE};

/// A dead expiration: out of attempts (`$1`: `--max-attempts`) or marked dead, never
/// acknowledged, and not under a live claim (its last attempt's ack deadline has passed).
/// Two halves, one per index: the rows marked dead (when a full buffer records them, and
/// by the trim, see [`MARK_DEAD`]), and those out of attempts not yet marked.
///
/// Why the mark: delivery walks the rows neither acknowledged nor dead for every firing
/// (the `--max-buffered-total` count) and every claim, through an index of exactly those
/// (`tickd_expirations_live`). Were dead rows in it, a full dead list would be walked each
/// time (100,000 dead rows: 36-196 ms per firing statement, measured).
pub(super) const DEAD: &str = concat!(
    "((dead AND acked_at IS NULL AND ",
    claim_lapsed!(),
    ") OR (acked_at IS NULL AND NOT dead AND ",
    attempts_spent!("$1"),
    " AND ",
    claim_lapsed!(),
    "))"
);

/// Brings the marks up to date (`$1`: `--max-attempts`): marks the rows that ran out of
/// attempts since, and clears the mark of rows that have attempts left again (a raised
/// `--max-attempts` brings dead expirations back, as it always did here; an older
/// replica's Redrive resets the attempts without knowing the mark). Run by the trim, so
/// the rows delivery walks hold the newly dead only until its next period.
pub(super) const MARK_DEAD: &str = concat!(
    "UPDATE tickd_expirations SET dead = NOT dead
     WHERE (acked_at IS NULL AND NOT dead AND ",
    attempts_spent!("$1"),
    " AND ",
    claim_lapsed!(),
    ") OR (dead AND ",
    attempts_left!("$1"),
    ")"
);

/// The attempts of an expiration recorded dead as it fired, for want of room under
/// `--max-buffered-total` (see `firing`): more than any `--max-attempts` a delivery id
/// can carry, so it is dead whatever that is, and never claimed.
pub(crate) const OVERFLOWED_ATTEMPTS: i32 = u16::MAX as i32;

/// Expirations fired and neither acknowledged nor dead (`$max`: the parameter holding
/// `--max-attempts`): waiting for a subscriber or in flight to one, what
/// `--max-buffered-total` bounds. Shared by Redrive and the firing statement, which both
/// count them; `NOT dead` lets the count walk `tickd_expirations_live` (see [`DEAD`]).
macro_rules! buffered {
    ($max:literal) => {
        concat!(
            "acked_at IS NULL AND NOT dead AND (",
            $crate::cluster::delivery::attempts_left!($max),
            " OR claim_until >= clock_timestamp())"
        )
    };
}
pub(crate) use buffered;

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
    let buffered = buffered!("$1");
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

impl ClusterDeliveries {
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
                    // Recorded dead as it fired, or out of attempts: the only two here.
                    let reason = match attempts == OVERFLOWED_ATTEMPTS {
                        true => DeadReason::BufferFull,
                        false => DeadReason::AttemptsSpent,
                    };
                    Dead {
                        id: delivery_id(row.get(0), attempts),
                        expiration: Arc::new(expiration_of(row)),
                        attempts: reason.attempts_shown(attempts as u32),
                        reason: reason.describe(),
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
