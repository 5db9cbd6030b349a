//! The plans a replica keeps. Its firing and ack statements run on connections that plan
//! each prepared statement once (generic plans, made again every quarter second), to spare
//! the database planning them at every batch. A generic plan is sized from the tables as
//! they are when it is made, and in steady state the tables are nearly empty: a plan that
//! walked a table or an index whole would be cheap then and ruinous once the table holds
//! a backlog. These tests make the plans on empty tables and on full ones and check that
//! each reaches its rows by probes, one per timer or delivery of the batch.

mod common;

use common::postgres::{explain, Postgres};
use common::tooling::skip_postgres;

/// A database at the latest schema, and a connection to it for setting tables up.
async fn migrated() -> (Postgres, tokio_postgres::Client) {
    let postgres = Postgres::start().await;
    let mut setup = postgres.connect().await;
    tickd::cluster::schema::migrate(&mut setup, 4)
        .await
        .expect("migrating the schema");
    (postgres, setup)
}

/// Runs `sql` on `client`; a failure panics with the database's message.
async fn run(client: &tokio_postgres::Client, sql: &str) {
    client
        .batch_execute(sql)
        .await
        .unwrap_or_else(|error| panic!("{}", explain(&error)));
}

/// `EXPLAIN (COSTS OFF, ...)` of `execute` on `client` with the `more` options, one line
/// per plan node or condition.
async fn plan_of(client: &tokio_postgres::Client, more: &str, execute: &str) -> String {
    client
        .query(&format!("EXPLAIN (COSTS OFF{more}) {execute}"), &[])
        .await
        .unwrap_or_else(|error| panic!("{}", explain(&error)))
        .iter()
        .map(|row| row.get::<_, String>(0))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The scan nodes of `table` in `plan`: each node's line, and its details (the lines
/// after it, up to the next node).
fn scan_nodes<'a>(plan: &'a str, table: &str) -> Vec<(&'a str, Vec<&'a str>)> {
    let lines: Vec<&str> = plan.lines().collect();
    let on_table = format!(" on {table} ");
    lines
        .iter()
        .enumerate()
        .filter(|(_, line)| line.contains("Scan") && format!("{line} ").contains(&on_table))
        .map(|(at, line)| {
            let details = lines[at + 1..]
                .iter()
                .take_while(|detail| !detail.contains("->"))
                .copied()
                .collect();
            (line.trim(), details)
        })
        .collect()
}

/// The scans of `table` in `plan`, each with the index condition that bounds it (None: the
/// scan reads the whole index or table).
fn scans_of(plan: &str, table: &str) -> Vec<(String, Option<String>)> {
    scan_nodes(plan, table)
        .into_iter()
        .map(|(scan, details)| {
            let condition = details
                .iter()
                .find(|detail| detail.contains("Index Cond:") || detail.contains("Recheck Cond:"))
                .map(|detail| detail.trim().to_owned());
            (scan.to_owned(), condition)
        })
        .collect()
}

/// 20,000 timers in four partitions.
const INSERT_TIMERS: &str = "INSERT INTO tickd_timers (id, namespace, partition, deadline, payload)
    SELECT n, 'ns', n % 4, n * 1000, '\\x00' FROM generate_series(1, 20000) n";

/// 20,000 timers due at one instant, 5,000 in each partition.
const INSERT_DUE_AT_ONCE: &str =
    "INSERT INTO tickd_timers (id, namespace, partition, deadline, payload)
    SELECT n, 'ns', n % 4, 100, '\\x00' FROM generate_series(20001, 40000) n";

/// A firing of two due timers, as a replica owning partitions 0 and 1 sends it.
const FIRE_TWO: &str = "EXECUTE fire('{ns,ns}', '{5,7}', '{100,200}', '{f,f}', 300, \
    '{0,1}', '{1,1}', 'r1', '{0,1}', '{NULL,NULL}', '{NULL,NULL}', 1000000, 5, 0, \
    '{NULL,NULL}', '{NULL,NULL}', 500)";

/// The firing statement's kept plan finds each due timer by a probe: the deletion of
/// one-shot timers, the re-arming of repeating and of cron ones, and the look for cron
/// timers still to be scheduled each reach `tickd_timers` through an index, bounded by a
/// due timer's id (not by its partition and deadline, which thousands of timers due at
/// one instant share), and no plan node reads a table in full. Checked on an empty table
/// never analysed; on a table analysed while empty and then filled (the planner sizes it
/// from its current pages, which is why the replica prepares the statement again every
/// quarter second: the plan made while the table was empty walks it, and it is gone
/// within that time); on a full table after ANALYZE; and with 20,000 more timers due at
/// one instant, not yet analysed (where a probe by partition and deadline was chosen, and
/// walked a whole partition's backlog for each timer).
/// A generic plan made without the firing connection's options (sequential scans and
/// merge joins off) fails this on the empty table: it reads a table in full.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kept_firing_plan_probes_for_each_due_timer() {
    if skip_postgres("the_kept_firing_plan_probes_for_each_due_timer") {
        return;
    }
    let (postgres, setup) = migrated().await;
    let client = postgres
        .database()
        .with_generic_plans()
        .connect()
        .await
        .expect("connecting as a replica's firing connection does");
    let prepare = format!(
        "PREPARE fire AS {}",
        tickd::cluster::firing::fire_statement()
    );
    // The statistics may be older than the table: a plan made again after the table
    // grew must probe even when the last ANALYZE saw it empty.
    for (tables, fill) in [
        ("empty, never analysed", None),
        (
            "analysed while empty, then 20,000 timers",
            Some(format!("ANALYZE tickd_timers; {INSERT_TIMERS}")),
        ),
        (
            "20,000 timers, analysed",
            Some("ANALYZE tickd_timers".to_owned()),
        ),
        (
            "and 20,000 more due at one instant, not analysed",
            Some(INSERT_DUE_AT_ONCE.to_owned()),
        ),
    ] {
        if let Some(fill) = fill {
            run(&setup, &fill).await;
            run(&client, "DEALLOCATE fire").await;
        }
        run(&client, &prepare).await;
        let plan = plan_of(&client, "", FIRE_TWO).await;
        assert!(
            !plan.contains("Seq Scan"),
            "the kept plan reads a table in full ({tables}):\n{plan}"
        );
        let scans = scans_of(&plan, "tickd_timers");
        assert_eq!(
            scans.len(),
            4,
            "deletion, both re-arms and the look for unscheduled cron timers each reach \
             tickd_timers once ({tables}):\n{plan}"
        );
        for (scan, condition) in scans {
            let probe = condition
                .as_deref()
                .is_some_and(|condition| condition.contains("(id = due"));
            assert!(
                probe,
                "{scan:?} is not a probe by a due timer's id \
                 (condition {condition:?}, {tables}):\n{plan}"
            );
        }
    }
}
/// The plan a replica keeps of the ack statement (generic, made once every quarter second
/// whatever the table holds) finds each delivery by its `seq`, even when it is made on an
/// empty `tickd_expirations`, as it is in steady state. Had the planner been able to prove
/// the partial indexes' predicates from the statement, this plan would walk the whole
/// index of unacknowledged (or of claimed) rows for every batch: it did, before the
/// statement was written to prevent it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kept_ack_plan_probes_each_delivery_by_seq() {
    if skip_postgres("the_kept_ack_plan_probes_each_delivery_by_seq") {
        return;
    }
    let (postgres, _setup) = migrated().await;
    let client = postgres
        .database()
        .with_probe_plans()
        .connect()
        .await
        .expect("connecting as a replica's ack connection does");
    run(
        &client,
        &format!(
            "PREPARE ack(TEXT[], INT8[], INT4[]) AS {}",
            tickd::cluster::delivery::ACK_STATEMENT
        ),
    )
    .await;
    let plan = plan_of(&client, "", "EXECUTE ack('{a,a}', '{5,7}', '{1,1}')").await;
    for walked in [
        "tickd_expirations_live",
        "tickd_expirations_dead",
        "tickd_expirations_by_claimer",
    ] {
        assert!(
            !plan.contains(walked),
            "the kept plan scans {walked}:\n{plan}"
        );
    }
    assert_eq!(
        plan.matches("Index Cond: (seq = ").count(),
        2,
        "the update and the delete each probe by seq:\n{plan}"
    );
}

/// How many rows each scan of `table` in an `EXPLAIN ANALYZE` walked: the rows it
/// returned plus those its filter removed.
fn walked_by_scans_of(plan: &str, table: &str) -> Vec<(String, u64)> {
    let number_after = |line: &str, label: &str| -> u64 {
        line.split(label)
            .nth(1)
            .and_then(|rest| {
                rest.split(|c: char| !c.is_ascii_digit())
                    .next()?
                    .parse()
                    .ok()
            })
            .unwrap_or(0)
    };
    scan_nodes(plan, table)
        .into_iter()
        .map(|(scan, details)| {
            let removed: u64 = details
                .iter()
                .map(|detail| number_after(detail, "Rows Removed by Filter: "))
                .sum();
            (scan.to_owned(), number_after(scan, "rows=") + removed)
        })
        .collect()
}

/// A long dead list is not walked by delivery. With 20,000 dead expirations (marked, as
/// the trim and the firing of a full buffer leave them) and 30 in flight, all in one
/// namespace, the firing statement's `--max-buffered-total` count (on the firing
/// connection's kept plan) and a claim in that namespace each walk the 30 in flight
/// only. Before dead rows were marked, both walked the index of unacknowledged rows, dead
/// ones included: 100,000 dead rows cost each firing statement 36-196 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivery_walks_what_is_in_flight_not_the_dead_list() {
    if skip_postgres("delivery_walks_what_is_in_flight_not_the_dead_list") {
        return;
    }
    const IN_FLIGHT: u64 = 30;
    let (postgres, setup) = migrated().await;
    run(
        &setup,
        &format!(
            "INSERT INTO tickd_expirations
                 (namespace, timer_id, payload, deadline, fired_at, fired_count, late, attempts,
                  dead)
             SELECT 'ns', n, '\\x00', n, n, 1, false, 5, true FROM generate_series(1, 20000) n;
             INSERT INTO tickd_expirations
                 (namespace, timer_id, payload, deadline, fired_at, fired_count, late, attempts,
                  claimed_by, claim_until)
             SELECT 'ns', 100000 + n, '\\x00', n, n, 1, false, 1, 's1',
                    clock_timestamp() + INTERVAL '1 hour'
             FROM generate_series(1, {IN_FLIGHT}) n;
             ANALYZE tickd_expirations;
             UPDATE tickd_partitions SET owner = 'r1', epoch = 1,
                 lease_until = clock_timestamp() + INTERVAL '1 hour'
             WHERE partition IN (0, 1);
             INSERT INTO tickd_timers (id, namespace, partition, deadline, payload)
             VALUES (5, 'ns', 0, 100, '\\x00'), (7, 'ns', 1, 200, '\\x00');"
        ),
    )
    .await;

    let firing = postgres
        .database()
        .with_generic_plans()
        .connect()
        .await
        .expect("connecting as a replica's firing connection does");
    run(
        &firing,
        &format!(
            "PREPARE fire AS {}",
            tickd::cluster::firing::fire_statement()
        ),
    )
    .await;
    let claims = postgres.connect().await;
    run(
        &claims,
        &format!(
            "PREPARE claimable(TEXT, INT4, INT8, TEXT, INT8, INT8) AS {}",
            tickd::cluster::delivery::CLAIMABLE_STATEMENT
        ),
    )
    .await;

    for (statement, client, execute) in [
        ("the firing statement", &firing, FIRE_TWO),
        (
            "a claim",
            &claims,
            "EXECUTE claimable('ns', 5, 10, 's2', 0, 100)",
        ),
    ] {
        // Run for real (EXPLAIN ANALYZE), then undone.
        run(client, "BEGIN").await;
        let plan = plan_of(client, ", ANALYZE, TIMING OFF, SUMMARY OFF", execute).await;
        run(client, "ROLLBACK").await;
        let scans = walked_by_scans_of(&plan, "tickd_expirations");
        assert!(
            !scans.is_empty(),
            "{statement} reads no expirations:\n{plan}"
        );
        for (scan, walked) in scans {
            assert!(
                walked <= IN_FLIGHT,
                "{statement} walks {walked} rows in {scan:?}, not the {IN_FLIGHT} in \
                 flight:\n{plan}"
            );
        }
    }
}
