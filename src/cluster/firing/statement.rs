//! The firing statement ([`FIRE`]), the columns of its answer, and the lease check that
//! tells a fenced batch from a moved one ([`HELD`]).

use std::sync::LazyLock;

use crate::cluster::delivery;

/// In one statement (so one round trip and one commit): locks the partitions of the
/// batch that this replica still holds (`$6`, `$7`: partitions and the epochs it was
/// granted; `$8`: this replica) with more than `$17` milliseconds of lease left
/// ([`super::statement_bound`]) `FOR KEY SHARE` (which a renewal does not wait for, and a
/// takeover does: see the firing module's comment); of the due timers (`$1`..`$4`, `$9`) in those
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
/// Each due timer is found by a probe of its id: its row must still be in the partition
/// the wheel had (`t.partition + 0 = due.partition`), but the `+ 0` keeps the partition and
/// deadline out of the index conditions. Timers due at one instant share their partition
/// and deadline by the thousand (a backlog after an outage, a deadline many clients
/// chose), and a probe of `tickd_timers_due` by them walks every one: 16 timers of a
/// backlog of 150,000 took 228 ms that way (the plan kept while the table had no
/// statistics), and 2.7 ms by id.
///
/// `--max-buffered-total` (`$12`) is applied as on one node: the expirations fired and
/// neither acknowledged nor dead (`$13`: `--max-attempts`; the condition is
/// `delivery::buffered`) are counted, up to `$12`, through the index of rows neither
/// acknowledged nor marked dead (so the count walks what is in flight, and the dead that
/// died since the trim last marked them, not the dead list), and those of this batch
/// beyond the room left are recorded dead at once, marked so, with attempts `$14`
/// ([`delivery::OVERFLOWED_ATTEMPTS`]). The count is of the rows committed when the statement
/// starts: replicas firing at the same moment see the same room, so the total can be
/// passed by what they fire in that moment.
pub(super) static FIRE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "
WITH held AS (
    SELECT p.partition, p.lease_until FROM tickd_partitions p
    JOIN unnest($6::INT4[], $7::INT8[]) AS mine(partition, epoch)
      ON p.partition = mine.partition AND p.epoch = mine.epoch
    WHERE p.owner = $8
      AND p.lease_until > clock_timestamp() + $17::INT8 * INTERVAL '1 millisecond'
    FOR KEY SHARE OF p
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
      AND t.partition + 0 = due.partition AND t.repeat_nanos IS NULL
      AND (t.cron IS NULL OR (t.version = due.version AND due.next_deadline IS NULL))
    RETURNING t.namespace, t.id, t.key, t.payload, t.deadline, t.repeat_nanos, t.ttl_nanos,
              t.fired_count + 1 AS fired_count, t.partition, NULL::INT8 AS next_deadline,
              t.version, due.late, t.cron, t.time_zone, due.claimer, due.claim_millis,
              t.trace_context
),
again AS (
    UPDATE tickd_timers t
    SET fired_count = t.fired_count + 1, version = t.version + 1,
        deadline = t.deadline + t.repeat_nanos * (GREATEST($5 - t.deadline, 0) / t.repeat_nanos + 1)
    FROM due
    WHERE t.id = due.id AND t.namespace = due.namespace AND t.deadline = due.deadline
      AND t.partition + 0 = due.partition AND t.repeat_nanos IS NOT NULL
    RETURNING t.namespace, t.id, t.key, t.payload, due.deadline, t.repeat_nanos, t.ttl_nanos,
              t.fired_count, t.partition, t.deadline AS next_deadline, t.version, due.late,
              t.cron, t.time_zone, due.claimer, due.claim_millis, t.trace_context
),
calendar AS (
    UPDATE tickd_timers t
    SET fired_count = t.fired_count + 1, version = t.version + 1, deadline = due.next_deadline
    FROM due
    WHERE t.id = due.id AND t.namespace = due.namespace AND t.deadline = due.deadline
      AND t.partition + 0 = due.partition AND t.cron IS NOT NULL
      AND t.version = due.version AND due.next_deadline IS NOT NULL
    RETURNING t.namespace, t.id, t.key, t.payload, due.deadline, t.repeat_nanos, t.ttl_nanos,
              t.fired_count, t.partition, t.deadline AS next_deadline, t.version, due.late,
              t.cron, t.time_zone, due.claimer, due.claim_millis, t.trace_context
),
unscheduled AS (
    SELECT t.namespace, t.id, t.partition, t.deadline, t.version, t.cron, t.time_zone
    FROM tickd_timers t JOIN due
      ON t.id = due.id AND t.namespace = due.namespace AND t.deadline = due.deadline
     AND t.partition + 0 = due.partition
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
         fired_count, late, cron, time_zone, trace_context, attempts, claimed_by, claim_until,
         dead)
    SELECT namespace, id, key, payload, deadline, $5, repeat_nanos, ttl_nanos, fired_count,
           late, cron, time_zone, trace_context,
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
       CASE WHEN r.claimed_by IS NOT NULL THEN f.trace_context END, r.claimed_by,
       (SELECT left_millis FROM lease)
FROM fired f JOIN recorded r ON r.timer_id = f.id AND r.namespace = f.namespace
UNION ALL
SELECT namespace, id, partition, deadline, version, NULL, cron, time_zone, NULL,
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL
FROM unscheduled",
        buffered = delivery::buffered!("$13")
    )
});

/// The column of [`FIRE`]'s rows where a fired timer's expiration begins, as
/// `EXPIRATION_COLUMNS` (its payload only when claimed for a subscriber here), followed
/// by the subscriber it was claimed for (NULL: none) and how long the shortest lease of
/// the batch's partitions had left, in milliseconds, when the statement checked it.
pub(super) const EXPIRATION: usize = 9;

/// After [`EXPIRATION`]'s columns: the claimer, then the lease left.
pub(super) const CLAIMED_BY: usize = EXPIRATION + 15;
pub(super) const LEASE_LEFT: usize = CLAIMED_BY + 1;

/// The column of [`FIRE`]'s rows that counts the expirations of the statement that went
/// to the dead list for want of room under `--max-buffered-total`.
pub(super) const OVERFLOWED: usize = 8;

/// The column of [`FIRE`]'s rows that holds a cron timer's schedule when it is returned
/// unfired, for its next firing to be computed (then `time_zone` follows).
pub(super) const UNSCHEDULED: usize = 6;

/// Which of the partitions `$1` (granted at epochs `$2`) replica `$3` still holds, and
/// whether each has more than `$4` milliseconds of lease left (enough to fire from).
/// A lease that ran out unclaimed is still held (owner and epoch unchanged): the next
/// renewal extends it (see `ownership`), so its timers are kept, not thrown out.
pub(super) const HELD: &str = "
SELECT p.partition,
       coalesce(p.lease_until > clock_timestamp() + $4::INT8 * INTERVAL '1 millisecond',
                false) AS firable
FROM tickd_partitions p
JOIN unnest($1::INT4[], $2::INT8[]) AS mine(partition, epoch)
  ON p.partition = mine.partition AND p.epoch = mine.epoch
WHERE p.owner = $3";
