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

/// `EXPLAIN (COSTS OFF)` of `execute` on `client`, one line per plan node or condition.
async fn plan_of(client: &tokio_postgres::Client, execute: &str) -> String {
    client
        .query(&format!("EXPLAIN (COSTS OFF) {execute}"), &[])
        .await
        .unwrap_or_else(|error| panic!("{}", explain(&error)))
        .iter()
        .map(|row| row.get::<_, String>(0))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The scans of `table` in `plan`, each with the index condition that bounds it (None: the
/// scan reads the whole index or table).
fn scans_of(plan: &str, table: &str) -> Vec<(String, Option<String>)> {
    let lines: Vec<&str> = plan.lines().collect();
    let on_table = format!(" on {table} ");
    let mut scans = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        let scan = line.contains("Scan") && format!("{line} ").contains(&on_table);
        if !scan {
            continue;
        }
        // The node's own details follow it, up to the next node.
        let condition = lines[at + 1..]
            .iter()
            .take_while(|detail| !detail.contains("->"))
            .find(|detail| detail.contains("Index Cond:") || detail.contains("Recheck Cond:"))
            .map(|detail| detail.trim().to_owned());
        scans.push((line.trim().to_owned(), condition));
    }
    scans
}

/// 20,000 timers in four partitions.
const INSERT_TIMERS: &str = "INSERT INTO tickd_timers (id, namespace, partition, deadline, payload)
    SELECT n, 'ns', n % 4, n * 1000, '\\x00' FROM generate_series(1, 20000) n";

/// A firing of two due timers, as a replica owning partitions 0 and 1 sends it.
const FIRE_TWO: &str = "EXECUTE fire('{ns,ns}', '{5,7}', '{100,200}', '{f,f}', 300, \
    '{0,1}', '{1,1}', 'r1', '{0,1}', '{NULL,NULL}', '{NULL,NULL}', 1000000, 5, 0, \
    '{NULL,NULL}', '{NULL,NULL}')";

/// The firing statement's kept plan finds each due timer by a probe: the deletion of
/// one-shot timers, the re-arming of repeating and of cron ones, and the look for cron
/// timers still to be scheduled each reach `tickd_timers` through an index, bounded by a
/// due timer's id or by its partition and exact deadline, and no plan node reads a table
/// in full. Checked on an empty table never analysed; on a table analysed while empty
/// and then filled (the planner sizes it from its current pages, which is why the replica
/// prepares the statement again every quarter second: the plan made while the table was
/// empty walks it, and it is gone within that time); and on a full table after ANALYZE.
/// A generic plan made without the firing connection's options (sequential scans and
/// merge joins off) fails this on the empty table: it reads a table in full.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kept_firing_plan_probes_for_each_due_timer() {
    if skip_postgres("the_kept_firing_plan_probes_for_each_due_timer") {
        return;
    }
    let postgres = Postgres::start().await;
    let mut setup = postgres.connect().await;
    tickd::cluster::schema::migrate(&mut setup, 4)
        .await
        .expect("migrating the schema");
    let client = postgres
        .database()
        .with_generic_plans()
        .connect()
        .await
        .expect("connecting as a replica's firing connection does");
    let prepare = format!("PREPARE fire AS {}", tickd::cluster::firing::FIRE_STATEMENT);
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
    ] {
        if let Some(fill) = fill {
            setup
                .batch_execute(&fill)
                .await
                .unwrap_or_else(|error| panic!("{}", explain(&error)));
            client
                .batch_execute("DEALLOCATE fire")
                .await
                .unwrap_or_else(|error| panic!("{}", explain(&error)));
        }
        client
            .batch_execute(&prepare)
            .await
            .unwrap_or_else(|error| panic!("{}", explain(&error)));
        let plan = plan_of(&client, FIRE_TWO).await;
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
            let probe = condition.as_deref().is_some_and(|condition| {
                condition.contains("due")
                    && (condition.contains("(id = ")
                        || (condition.contains("(partition = ")
                            && condition.contains("(deadline = ")))
            });
            assert!(
                probe,
                "{scan:?} is not a probe by a due timer's id or exact deadline \
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
    let postgres = Postgres::start().await;
    let mut setup = postgres.connect().await;
    tickd::cluster::schema::migrate(&mut setup, 4)
        .await
        .expect("migrating the schema");
    let client = postgres
        .database()
        .with_probe_plans()
        .connect()
        .await
        .expect("connecting as a replica's ack connection does");
    client
        .batch_execute(&format!(
            "PREPARE ack(TEXT[], INT8[], INT4[]) AS {}",
            tickd::cluster::delivery::ACK_STATEMENT
        ))
        .await
        .unwrap_or_else(|error| panic!("{}", explain(&error)));
    let plan: Vec<String> = client
        .query(
            "EXPLAIN (COSTS OFF) EXECUTE ack('{a,a}', '{5,7}', '{1,1}')",
            &[],
        )
        .await
        .unwrap_or_else(|error| panic!("{}", explain(&error)))
        .iter()
        .map(|row| row.get::<_, String>(0))
        .collect();
    let plan = plan.join("\n");
    for walked in ["tickd_expirations_unacked", "tickd_expirations_by_claimer"] {
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
